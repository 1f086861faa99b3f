"""The Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words").

    image -> rescale to [-1, 1] (or ImageNet's mean/std) -> PatchEmbedding (+[CLS], + positions) -> depth x EncoderBlock
          -> LayerNorm                                                           (ViTBackbone: one state per token)
          -> [CLS] state (or mean, or sequence pooling, of the patch tokens) -> Dense logits           (ViT: the task)

Three options make a ViT learn from small data sets (CIFAR-10's 50,000 images) without pre-training, by giving
it some of a CNN's spatial prior: a convolutional or shifted-patch `tokenizer` (CCT, Hassani et al. 2021; SPT,
Lee et al. 2021), locality self-attention (`locality=True`, Lee et al. 2021) and sequence pooling
(`pool="sequence"`, CCT). Preset "cifar10_cpu" combines them in a model small enough to train on a CPU.

The classifier is a task on a backbone (keras-hub's split, as `TextClassifier(TextEncoder(...))`):
`ViT(ViTBackbone(...), num_classes=10)`. The ViT's graph continues the backbone's own graph, so the backbone's
layers are the ViT's (shared weights, the same names: a checkpoint or a `.keras` file finds them in either).
"""

import warnings

import keras

from keras_tfm.checks import DataChecks
from keras_tfm.layers import EncoderBlock, PatchEmbedding, SequencePooling
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.models._base import PresetModel, compile_classifier
from keras_tfm.models._lora import ParameterEfficient
from keras_tfm.presets import VIT_PRESETS, resolve_preset
from keras_tfm.models import vit_weights
from keras_tfm.models.vit_weights import IMAGENET_MEAN, IMAGENET_STD

POOLS = ("cls", "mean", "sequence")
RESCALES = (True, False, "imagenet")
NO_WEIGHT_DECAY = ("cls_token", "position_embeddings")  # besides biases and norms, by rule
# The task's own arguments; every other preset size is the backbone's. `dropout` and `dtype` go to both.
TASK_ARGUMENTS = ("num_classes", "pool", "dropout", "include_top", "head_activation")


def _backbone_presets():
    """The ViT presets' sizes without the pooling, with the [CLS] token `pool="cls"` (the default) reads."""
    return {name: {**{key: value for key, value in sizes.items() if key != "pool"},
                   "class_token": sizes.get("pool", "cls") == "cls"} for name, sizes in VIT_PRESETS.items()}


@keras.saving.register_keras_serializable(package="keras_tfm")
class ViTBackbone(ParameterEfficient, PresetModel, keras.Model):
    """The ViT's trunk: images in, one state per token out (keras-hub's backbone). `ViT` puts a classifier on it;
    put a head of your own on it the same way.

    Layer names: `rescaling` (when `rescale`), `patch_embedding`, `block_0` ... `block_{depth-1}`, `encoder_norm`.
    `backbone.get_layer("block_3")` is an `EncoderBlock`.

    Input pixels: with `rescale=True` (default) the model takes raw pixel values in [0, 255], uint8 or float,
    and maps them to [-1, 1] itself (the preprocessing of the original ViT checkpoints); `rescale="imagenet"`
    takes the same pixels and normalises them with ImageNet's mean and standard deviation (DeiT, DINOv2). Pass
    `rescale=False` to feed images you normalised yourself.

    Args:
        image_size: int or `(height, width)` the model is built for. With `position="sincos2d"` the model also
            runs on other sizes divisible by the patch size; with `"learned"` the size is fixed (load weights
            into a model of another size with `load_vit_weights`, which resamples the table).
        patch_size: int or `(height, width)` of a patch.
        dim, depth, num_heads, mlp_dim: width, number of blocks, heads per block, MLP width.
        class_token: prepend a learned [CLS] token (its state comes first in the output).
        position: `"sincos2d"` or `"learned"` position encoding.
        dropout: dropout after the patch embedding and in the blocks.
        attention_dropout: dropout on attention weights.
        drop_path: stochastic-depth rate of the last block; it grows linearly from 0 over the blocks.
        channels: number of image channels.
        rescale: what the model does to [0, 255] pixels first: `True` maps them to [-1, 1], `"imagenet"`
            subtracts ImageNet's mean and divides by its standard deviation (per channel), `False` nothing.
        layer_norm_epsilon: epsilon of every layer norm.
        tokenizer: how `PatchEmbedding` makes the token grid: `"linear"` (the paper's patches), `"conv"` (a
            convolutional stem, CCT / hybrid ViT) or `"shifted"` (shifted patch tokenization, SPT). The grid is
            the same in all three: one token per patch.
        locality: locality self-attention in every block (a trained logit scale, no attention of a token to
            itself; Lee et al. 2021).
        **kwargs: `keras.Model` arguments (`name`, ...).

    Call arguments / shapes:
        images `(batch, height, width, channels)` -> token states `(batch, [1 +] patches, dim)`, after the final
        layer norm.

    Example:

    >>> backbone = ViTBackbone.from_preset("tiny")  # 32x32 images, 4x4 patches, a [CLS] token
    >>> tuple(backbone(np.zeros((2, 32, 32, 3), "uint8")).shape)
    (2, 65, 128)
    >>> images = keras.Input((32, 32, 3))
    >>> states = backbone(images)
    >>> my_model = keras.Model(images, keras.layers.Dense(4)(states[:, 1:]))  # a per-patch head of your own
    """

    PRESETS = _backbone_presets()
    OTHER_OPTIONS = {"rescale": ("imagenet",)}  # besides True and False
    CHECKPOINT_FAMILY = "vit"  # load_vit_weights fills it
    lora_trainable_layers = ()  # a backbone alone: only the LoRA updates learn

    def __init__(
        self,
        image_size=224,
        patch_size=16,
        dim=768,
        depth=12,
        num_heads=12,
        mlp_dim=3072,
        class_token=True,
        position="sincos2d",
        dropout=0.0,
        attention_dropout=0.0,
        drop_path=0.0,
        channels=3,
        rescale=True,
        layer_norm_epsilon=1e-6,
        tokenizer="linear",
        locality=False,
        **kwargs,
    ):
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "vit_backbone")
        _checks.positive_int("depth", depth)
        _checks.positive_int("channels", channels)
        if not (isinstance(rescale, bool) or rescale == "imagenet"):
            raise ValueError(f"`rescale` must be one of {list(RESCALES)}. Received: rescale={rescale!r}")
        if rescale == "imagenet" and channels != 3:
            raise ValueError(f'`rescale="imagenet"` normalises 3 colour channels. Received: channels={channels}')
        _checks.rate("drop_path", drop_path)
        height, width = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
        patch_embedding = PatchEmbedding(patch_size, dim, position=position, class_token=class_token, dropout=dropout,
                                         tokenizer=tokenizer, name="patch_embedding")
        patch_embedding.grid_size(height, width)  # raises if the image size does not divide into patches

        # sin-cos positions are computed per call, so any divisible image size works: leave the size open.
        spatial = (height, width) if position == "learned" else (None, None)
        images = keras.Input(spatial + (channels,), name="images")
        if rescale == "imagenet":
            # (pixel / 255 - mean) / std, per channel, as a constant normalisation (no weights to load or train).
            x = keras.layers.Normalization(mean=[255 * m for m in IMAGENET_MEAN],
                                           variance=[(255 * s) ** 2 for s in IMAGENET_STD], name="rescaling")(images)
        elif rescale:
            x = keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="rescaling")(images)
        else:
            x = images
        x = patch_embedding(x)  # (batch, [1 +] patches, dim)
        for i in range(depth):
            x = EncoderBlock(num_heads, mlp_dim, dropout=dropout, attention_dropout=attention_dropout,
                             drop_path=drop_path * i / max(depth - 1, 1), layer_norm_epsilon=layer_norm_epsilon,
                             locality=locality, name=f"block_{i}")(x)
        states = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
        super().__init__(images, states, **kwargs)
        self.store_arguments(locals())

    @classmethod
    def from_pretrained(cls, path, image_size=None, **kwargs):
        """A backbone of a pretrained checkpoint's own sizes, holding its weights (its classifier ignored).

        Args:
            path: a checkpoint file or HuggingFace folder (see `load_vit_weights`): original ViT `.npz`, timm
                `.safetensors` / `.pth`, HuggingFace ViT or DINOv2.
            image_size: the images it will see; None = the size its position table was trained for. Another size
                resamples the table (the patch size must divide it).
            **kwargs: arguments that do not change the weights (`dropout`, `drop_path`, `dtype`, `name`, ...).

        Example:

        >>> backbone = ViTBackbone.from_pretrained("checkpoints/dinov2-vits14", image_size=112)  # doctest: +SKIP
        """
        return vit_weights.from_checkpoint(cls, path, image_size, kwargs)

    def no_weight_decay(self):
        """The [CLS] token and the learned position table (biases, norms and the locality scale are exempt by
        rule, see `WeightDecayPolicy`)."""
        return NO_WEIGHT_DECAY


@keras.saving.register_keras_serializable(package="keras_tfm")
class ViT(ParameterEfficient, PresetModel, keras.Model):
    """A Vision Transformer classifier (or feature extractor): a `ViTBackbone` and a head on its pooled state.

    Layer names: the backbone's (`rescaling`, `patch_embedding`, `block_0` ..., `encoder_norm`), then `pool` and,
    with `include_top`, `head_dropout` and `head`. The ViT's graph continues the backbone's, so those layers are
    the backbone's own objects: `model.backbone` is the trunk, trained in place, for a head of your own.

    Args:
        backbone: the `ViTBackbone` to classify with (its very layers; a pretrained one fine-tunes in place).
        num_classes: number of output classes (ignored with `include_top=False`).
        pool: `"cls"` (read the [CLS] token's state; the backbone needs `class_token=True`), `"mean"` (average
            the patch tokens) or `"sequence"` (a learned attention-weighted average of the patch tokens, CCT's
            sequence pooling, `SequencePooling`). None (default): `"cls"` when the backbone has a [CLS] token,
            else `"mean"`. The old name `"gap"` still works, with a FutureWarning, for one release.
        dropout: dropout before the head.
        include_top: whether to add the classification head; without it the output is the pooled
            `(batch, dim)` feature vector.
        head_activation: activation of the head (`None` = logits, `"softmax"` = probabilities). The old name
            `activation` still works, with a FutureWarning, for one release.
        **kwargs: `keras.Model` arguments (`name`, ...).

    Call arguments / shapes:
        images `(batch, height, width, channels)` -> logits `(batch, num_classes)` (float32, also under mixed
        precision), or features `(batch, dim)`.

    Example:

    >>> backbone = ViTBackbone(image_size=32, patch_size=4, dim=64, depth=2, num_heads=4, mlp_dim=128)
    >>> model = ViT(backbone, num_classes=10)
    >>> tuple(model(np.zeros((2, 32, 32, 3), "uint8")).shape)
    (2, 10)
    >>> model = ViT.from_preset("tiny", num_classes=10)  # the backbone of a named size first, then the head
    >>> model.compile(optimizer="adamw", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    """

    RENAMED_ARGUMENTS = {"activation": "head_activation"}
    PRESETS = VIT_PRESETS
    CHECKPOINT_FAMILY = "vit"  # load_vit_weights fills it

    def __init__(self, backbone=None, num_classes=1000, pool=None, dropout=0.0, include_top=True,
                 head_activation=None, **kwargs):
        head_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "head_activation",
                                          head_activation, None)
        if isinstance(backbone, dict):  # from a saved config
            backbone = keras.saving.deserialize_keras_object(backbone)
        sizes = sorted(set(kwargs) & set(ViTBackbone.argument_names()))
        if sizes or backbone is None:
            raise TypeError(
                "ViT takes a ViTBackbone (keras_tfm 0.4; the sizes were its arguments before). Build the backbone "
                "first: ViT(ViTBackbone(image_size=..., patch_size=..., dim=..., ...), num_classes=...), or "
                f'ViT.from_preset("tiny", num_classes=...). Received: backbone={type(backbone).__name__} and the '
                f"backbone arguments {sizes}")
        if not isinstance(backbone, ViTBackbone):
            raise TypeError(f"`backbone` must be a keras_tfm ViTBackbone. Received: {type(backbone).__name__}")
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "vit")
        if pool == "gap":
            warnings.warn('ViT: pool="gap" is deprecated, use pool="mean" (same meaning, the name TextClassifier '
                          'uses); "gap" goes in the next release.', FutureWarning, stacklevel=2)
            pool = "mean"
        pool = ("cls" if backbone.class_token else "mean") if pool is None else pool
        _checks.one_of("pool", pool, POOLS)
        if pool == "cls" and not backbone.class_token:
            raise ValueError(f'pool="cls" reads the [CLS] token, and backbone {backbone.name!r} has none '
                             '(class_token=False). Use pool="mean" or "sequence", or a backbone with a [CLS] token.')
        if include_top:
            _checks.positive_int("num_classes", num_classes)

        states = backbone.output  # (batch, [1 +] patches, dim): the ViT's graph goes on from the backbone's
        if pool == "cls":
            x = keras.layers.Lambda(lambda tokens: tokens[:, 0], name="pool")(states)  # the [CLS] token's state
        else:
            if backbone.class_token:  # pool the patch tokens only
                states = keras.layers.Lambda(lambda tokens: tokens[:, 1:], name="patch_tokens")(states)
            if pool == "sequence":
                x = SequencePooling(name="pool")(states)  # attention-weighted mean over patch tokens
            else:
                x = keras.layers.GlobalAveragePooling1D(name="pool")(states)  # mean over patch tokens
        outputs = x  # (batch, dim)
        if include_top:
            x = Dropout(dropout, name="head_dropout")(x)
            # float32 logits even under mixed precision, so the softmax and the loss stay exact.
            outputs = keras.layers.Dense(num_classes, activation=head_activation, dtype="float32", name="head")(x)
        super().__init__(backbone.input, outputs, **kwargs)
        self.store_arguments(locals())

    # The backbone's sizes, read through the task (as a TextClassifier gives its encoder's `vocab_size`).
    image_size = property(lambda self: self.backbone.image_size)
    patch_size = property(lambda self: self.backbone.patch_size)
    dim = property(lambda self: self.backbone.dim)
    depth = property(lambda self: self.backbone.depth)

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """A ViT on a new `ViTBackbone` of a named size (`PRESETS`), built first.

        Args:
            preset: a key of `PRESETS` ("tiny", "cifar10_cpu", "ViT-B/16", ...).
            **kwargs: the ViT's arguments (`num_classes`, `pool`, ..., `name`) and the backbone's (`image_size`,
                `dim`, `depth`...), which win over the preset's; `dropout` and `dtype` go to both.
        """
        if "backbone" in kwargs:
            raise TypeError(f"ViT.from_preset builds the backbone: to use yours, write ViT(backbone, ...). "
                            f"Received: backbone={type(kwargs['backbone']).__name__}")
        _checks.known_keywords(cls, kwargs, set(TASK_ARGUMENTS) | set(ViTBackbone.argument_names())
                               | set(cls.RENAMED_ARGUMENTS) | _checks.MODEL_KEYWORDS, signature_of=ViTBackbone)
        return cls(**_split_sizes(resolve_preset(cls.PRESETS, preset, cls.__name__, kwargs)))

    @classmethod
    def from_pretrained(cls, path, num_classes=None, image_size=None, **kwargs):
        """A ViT on a pretrained checkpoint's backbone (`ViTBackbone.from_pretrained`), reading its [CLS] token,
        with a new head for `num_classes` (the checkpoint's classifier is ignored): the first step of fine-tuning.

        What the checkpoint implies is taken from it (`checkpoint_arguments`): patch size, width, depth, heads,
        MLP width, norm epsilon, the pixel normalisation it was trained with (`rescale`), a learned position
        table and a [CLS] token. LayerScale (DINOv2) is folded into the weights as they load.

        Args:
            path: a checkpoint file or HuggingFace folder (see `load_vit_weights`): original ViT `.npz`, timm
                `.safetensors` / `.pth`, HuggingFace ViT or DINOv2.
            num_classes: classes of the new head; None = no head (`include_top=False`, pooled [CLS] features).
            image_size: the images it will see; None = the size its position table was trained for. Another size
                resamples the table, as the paper does to fine-tune at another resolution.
            **kwargs: arguments that do not change the weights: the backbone's (`dropout`, `drop_path`,
                `attention_dropout`, `dtype`) and the head's (`head_activation`, `name`; `dropout` and `dtype`
                go to both).

        Example:

        >>> model = ViT.from_pretrained("checkpoints/dinov2-vits14", num_classes=10, image_size=112)  # doctest: +SKIP
        """
        task = {name: kwargs.pop(name) for name in ("head_activation", "activation", "name") if name in kwargs}
        task.update({name: kwargs[name] for name in ("dropout", "dtype") if name in kwargs})
        backbone = ViTBackbone.from_pretrained(path, image_size, **kwargs)
        head = dict(num_classes=num_classes) if num_classes is not None else dict(include_top=False)
        model = cls(backbone, pool="cls", **head, **task)
        if model.include_top:
            # The paper's fine-tuning head: zero-initialised, so training starts from uniform predictions instead
            # of random logits of pretrained features (whose scale is large: DINOv2's reach +-10).
            for variable in model.get_layer("head").weights:
                variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
        return model

    def get_config(self):
        return {**super().get_config(), "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        if config.get("backbone") is None:  # saved before 0.4: the backbone's sizes among the ViT's arguments
            config = _split_sizes(config)
        return super().from_config(config)  # PresetMixin's: the frozen layers frozen again

    def compile_for_training(self, optimizer=None, label_smoothing=0.0, **kwargs):
        """`compile` for sparse integer labels: cross-entropy and accuracy.

        Args:
            optimizer: defaults to AdamW(1e-3, weight decay 0.05 except `weight_decay_exempt_variables()`,
                clipping at norm 1).
            label_smoothing: label smoothing of the cross-entropy (0.1 in DeiT).
            **kwargs: passed on to `compile` (e.g. `jit_compile`, `steps_per_execution`).
        """
        compile_classifier(self, optimizer, label_smoothing, weight_decay=0.05, **kwargs)

    @property
    def data_checks(self):
        """Sparse labels in [0, num_classes) in `y`, with the head (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(labels=self.num_classes if self.include_top else None)

    def no_weight_decay(self):
        return self.backbone.no_weight_decay()


def _split_sizes(arguments):
    """A preset's or a pre-0.4 config's ViT arguments with the backbone's sizes among them -> the ViT's arguments
    with a `ViTBackbone` built from those sizes (named `vit_backbone`; its layers keep their names, so the weights
    of a pre-0.4 `.keras` file load). The [CLS] token is there when the pooling reads it."""
    arguments = dict(arguments)
    pool = arguments.get("pool")
    sizes = {name: arguments.pop(name) for name in ViTBackbone.argument_names() if name in arguments}
    sizes.update({name: arguments[name] for name in ("dropout", "dtype") if name in arguments})
    sizes.setdefault("class_token", pool in (None, "cls"))
    arguments["backbone"] = ViTBackbone(**sizes)
    return arguments
