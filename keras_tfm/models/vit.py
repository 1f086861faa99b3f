"""The Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words").

    image -> rescale to [-1, 1] (or ImageNet's mean/std) -> PatchEmbedding (+[CLS], + positions) -> depth x EncoderBlock
          -> LayerNorm -> [CLS] state (or mean, or sequence pooling, of the patch tokens) -> Dense logits

Three options make a ViT learn from small data sets (CIFAR-10's 50,000 images) without pre-training, by giving
it some of a CNN's spatial prior: a convolutional or shifted-patch `tokenizer` (CCT, Hassani et al. 2021; SPT,
Lee et al. 2021), locality self-attention (`locality=True`, Lee et al. 2021) and sequence pooling
(`pool="sequence"`, CCT). Preset "cifar10_cpu" combines them in a model small enough to train on a CPU.

`ViTBackbone` is the trunk alone (images -> token states), for a head of your own; `ViT` is built from the same
graph, so both take the same checkpoints (`load_vit_weights`) and `ViTBackbone.from_vit(vit)` copies a ViT's trunk.
"""

import warnings

import keras

from keras_tfm.layers import EncoderBlock, PatchEmbedding, SequencePooling
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.models import _data_checks
from keras_tfm.models._base import PresetModel, compile_classifier
from keras_tfm.models._lora import ParameterEfficient
from keras_tfm.presets import VIT_PRESETS
from keras_tfm.models import vit_weights
from keras_tfm.models.vit_weights import IMAGENET_MEAN, IMAGENET_STD

POOLS = ("cls", "mean", "sequence")
RESCALES = (True, False, "imagenet")
NO_WEIGHT_DECAY = ("cls_token", "position_embeddings")  # besides biases and norms, by rule


# The backbone's sizes: the ViT presets, with the [CLS] token the pooling needs instead of the pooling.
BACKBONE_PRESETS = {
    name: {**{key: value for key, value in sizes.items() if key != "pool"},
           "class_token": sizes.get("pool", "cls") == "cls"}
    for name, sizes in VIT_PRESETS.items()
}


@keras.saving.register_keras_serializable(package="keras_tfm")
class ViTBackbone(ParameterEfficient, PresetModel, keras.Model):
    """The ViT's trunk: images in, one state per token out, for a head of your own (keras-hub's backbone).

    It is the graph `ViT` classifies with, layer for layer (`rescaling`, `patch_embedding`, `block_0` ...,
    `encoder_norm`), so `load_vit_weights` fills it from the same checkpoints, and `from_vit` takes a trained
    ViT's trunk.

    Args:
        image_size, patch_size, dim, depth, num_heads, mlp_dim, position, dropout, attention_dropout, drop_path,
        channels, rescale, layer_norm_epsilon, tokenizer, locality: as in `ViT`.
        class_token: prepend a learned [CLS] token (its state comes first in the output).
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

    PRESETS = BACKBONE_PRESETS
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
        images, states = _trunk(image_size, patch_size, dim, depth, num_heads, mlp_dim, class_token, position,
                                dropout, attention_dropout, drop_path, channels, rescale, layer_norm_epsilon,
                                tokenizer, locality)
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
        return vit_weights.from_checkpoint(cls, path, image_size, dict(class_token=True), kwargs)

    @classmethod
    def from_vit(cls, vit, **kwargs):
        """A backbone of a `ViT`'s sizes holding a copy of its trunk's weights (trained or loaded): the way to put
        your own head on a ViT you have.

        Args:
            vit: a `keras_tfm.models.ViT`.
            **kwargs: arguments that do not change the weights (`dropout`, `attention_dropout`, `drop_path`,
                `name`, `dtype`).
        """
        if not isinstance(vit, ViT):
            raise TypeError(f"`vit` must be a keras_tfm ViT. Received: {type(vit).__name__}")
        sizes = {name: getattr(vit, name) for name in cls.argument_names() if name != "class_token"}
        backbone = cls(**{**sizes, "class_token": vit.pool == "cls", **kwargs})
        for layer in backbone.layers:
            layer.set_weights(vit.get_layer(layer.name).get_weights())
        return backbone

    def no_weight_decay(self):
        return NO_WEIGHT_DECAY


@keras.saving.register_keras_serializable(package="keras_tfm")
class ViT(ParameterEfficient, PresetModel, keras.Model):
    """A Vision Transformer classifier (or feature extractor), built functionally from keras_tfm layers: the
    `ViTBackbone` graph (the trunk, same layers and names), then pooling and a head.

    Layer names: `rescaling` (when `rescale`), `patch_embedding`, `block_0` ... `block_{depth-1}`,
    `encoder_norm`, `pool`, `head` (when `include_top`). `model.get_layer("block_3")` is an `EncoderBlock`.

    Input pixels: with `rescale=True` (default) the model takes raw pixel values in [0, 255], uint8 or float,
    and maps them to [-1, 1] itself (the preprocessing of the original ViT checkpoints); `rescale="imagenet"`
    takes the same pixels and normalises them with ImageNet's mean and standard deviation (DeiT, DINOv2). Pass
    `rescale=False` to feed images you normalised yourself.

    Args:
        image_size: int or `(height, width)` the model is built for. With `position="sincos2d"` the model also
            runs on other sizes divisible by the patch size; with `"learned"` the size is fixed (load weights
            into a model of another size with `load_vit_weights`, which resamples the table).
        patch_size: int or `(height, width)` of a patch.
        num_classes: number of output classes (ignored with `include_top=False`).
        dim, depth, num_heads, mlp_dim: width, number of blocks, heads per block, MLP width.
        pool: `"cls"` (read the [CLS] token), `"mean"` (average the patch tokens; no [CLS] token), as in
            `TextClassifier`, or `"sequence"` (a learned attention-weighted average of the patch tokens, CCT's
            sequence pooling, `SequencePooling`; no [CLS] token). The old name `"gap"` still works, with a
            FutureWarning, for one release.
        position: `"sincos2d"` or `"learned"` position encoding.
        dropout: dropout after the patch embedding, in the blocks, and before the head.
        attention_dropout: dropout on attention weights.
        drop_path: stochastic-depth rate of the last block; it grows linearly from 0 over the blocks.
        include_top: whether to add the classification head; without it the output is the pooled
            `(batch, dim)` feature vector.
        head_activation: activation of the head (`None` = logits, `"softmax"` = probabilities). The old name
            `activation` still works, with a FutureWarning, for one release.
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
        images `(batch, height, width, channels)` -> logits `(batch, num_classes)` (or features `(batch, dim)`).

    Example:

    >>> model = ViT.from_preset("tiny", num_classes=10)  # 32x32 images, 4x4 patches
    >>> model.compile(optimizer="adamw", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> tuple(model(np.zeros((2, 32, 32, 3), "uint8")).shape)
    (2, 10)
    """

    RENAMED_ARGUMENTS = {"activation": "head_activation"}
    PRESETS = VIT_PRESETS
    OTHER_OPTIONS = {"rescale": ("imagenet",)}  # besides True and False
    CHECKPOINT_FAMILY = "vit"  # load_vit_weights fills it

    def __init__(
        self,
        image_size=224,
        patch_size=16,
        num_classes=1000,
        dim=768,
        depth=12,
        num_heads=12,
        mlp_dim=3072,
        pool="cls",
        position="sincos2d",
        dropout=0.0,
        attention_dropout=0.0,
        drop_path=0.0,
        include_top=True,
        head_activation=None,
        channels=3,
        rescale=True,
        layer_norm_epsilon=1e-6,
        tokenizer="linear",
        locality=False,
        **kwargs,
    ):
        head_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "head_activation",
                                          head_activation, None)
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "vit")
        if pool == "gap":
            warnings.warn('ViT: pool="gap" is deprecated, use pool="mean" (same meaning, the name TextClassifier '
                          'uses); "gap" goes in the next release.', FutureWarning, stacklevel=2)
            pool = "mean"
        _checks.one_of("pool", pool, POOLS)
        if include_top:
            _checks.positive_int("num_classes", num_classes)
        images, x = _trunk(image_size, patch_size, dim, depth, num_heads, mlp_dim, pool == "cls", position, dropout,
                           attention_dropout, drop_path, channels, rescale, layer_norm_epsilon, tokenizer, locality)
        if pool == "cls":
            x = keras.layers.Lambda(lambda tokens: tokens[:, 0], name="pool")(x)  # the [CLS] token's state
        elif pool == "sequence":
            x = SequencePooling(name="pool")(x)  # attention-weighted mean over patch tokens
        else:
            x = keras.layers.GlobalAveragePooling1D(name="pool")(x)  # mean over patch tokens
        outputs = x  # (batch, dim)
        if include_top:
            x = Dropout(dropout, name="head_dropout")(x)
            # float32 logits even under mixed precision, so the softmax and the loss stay exact.
            outputs = keras.layers.Dense(num_classes, activation=head_activation, dtype="float32", name="head")(x)
        super().__init__(images, outputs, **kwargs)

        self.store_arguments(locals())

    @classmethod
    def from_pretrained(cls, path, num_classes=None, image_size=None, **kwargs):
        """A ViT of a pretrained checkpoint's own sizes (read from its tensors), holding its weights, with a new
        head for `num_classes` (the checkpoint's classifier is ignored): the first step of fine-tuning.

        What the checkpoint implies is taken from it (`checkpoint_arguments`): patch size, width, depth, heads,
        MLP width, norm epsilon, the pixel normalisation it was trained with (`rescale`), a learned position
        table and a [CLS] token. LayerScale (DINOv2) is folded into the weights as they load.

        Args:
            path: a checkpoint file or HuggingFace folder (see `load_vit_weights`): original ViT `.npz`, timm
                `.safetensors` / `.pth`, HuggingFace ViT or DINOv2.
            num_classes: classes of the new head; None = no head (`include_top=False`, pooled [CLS] features).
            image_size: the images it will see; None = the size its position table was trained for. Another size
                resamples the table, as the paper does to fine-tune at another resolution.
            **kwargs: arguments that do not change the weights (`dropout`, `drop_path`, `head_activation`,
                `dtype`, `name`, ...).

        Example:

        >>> model = ViT.from_pretrained("checkpoints/dinov2-vits14", num_classes=10, image_size=112)  # doctest: +SKIP
        """
        head = dict(num_classes=num_classes) if num_classes is not None else dict(include_top=False)
        return vit_weights.from_checkpoint(cls, path, image_size, dict(pool="cls", **head), kwargs)

    def compile_for_training(self, optimizer=None, label_smoothing=0.0, **kwargs):
        """`compile` for sparse integer labels: cross-entropy and accuracy.

        Args:
            optimizer: defaults to AdamW(1e-3, weight decay 0.05 except `weight_decay_exempt_variables()`,
                clipping at norm 1).
            label_smoothing: label smoothing of the cross-entropy (0.1 in DeiT).
            **kwargs: passed on to `compile` (e.g. `jit_compile`, `steps_per_execution`).
        """
        compile_classifier(self, optimizer, label_smoothing, weight_decay=0.05, **kwargs)

    def targets(self, y):
        return _data_checks.class_labels(y, self.num_classes) if self.include_top else []

    def no_weight_decay(self):
        """The [CLS] token and the learned position table (biases, norms and the locality scale are exempt by
        rule, see `WeightDecayPolicy`)."""
        return NO_WEIGHT_DECAY


def _trunk(image_size, patch_size, dim, depth, num_heads, mlp_dim, class_token, position, dropout, attention_dropout,
           drop_path, channels, rescale, layer_norm_epsilon, tokenizer, locality):
    """The ViT's trunk, the one graph `ViTBackbone` and `ViT` are built from (same layer names in both, so a
    checkpoint or a `.keras` file finds the same weights): images -> `(images input, token states (batch,
    [1 +] patches, dim))`."""
    _checks.positive_int("depth", depth)
    _checks.positive_int("channels", channels)
    if not (isinstance(rescale, bool) or rescale == "imagenet"):
        raise ValueError(f"`rescale` must be one of {list(RESCALES)}. Received: rescale={rescale!r}")
    if rescale == "imagenet" and channels != 3:
        raise ValueError(f'`rescale="imagenet"` normalises 3 colour channels. Received: channels={channels}')
    _checks.rate("drop_path", drop_path)
    height, width = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    patch_embedding = PatchEmbedding(
        patch_size, dim, position=position, class_token=class_token, dropout=dropout, tokenizer=tokenizer,
        name="patch_embedding",
    )
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
        rate = drop_path * i / max(depth - 1, 1)
        x = EncoderBlock(
            num_heads,
            mlp_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            drop_path=rate,
            layer_norm_epsilon=layer_norm_epsilon,
            locality=locality,
            name=f"block_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    return images, x
