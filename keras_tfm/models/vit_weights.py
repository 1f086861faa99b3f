"""Loading pretrained Vision Transformer checkpoints into `keras_tfm.models.ViT`.

A checkpoint is a flat dictionary of named arrays. Loading one means giving every tensor a place in the model
and converting its layout on the way:

    checkpoint tensor --rename--> model weight   (every tensor used and every weight filled, else ValueError)
                      --layout--> transpose / reshape into heads / split a fused q|k|v / resample positions

Four naming schemes are understood, told apart by the file suffix and the names inside:

    .npz          the original release (google-research/vision_transformer, Flax): "Transformer/encoderblock_0/..."
    .safetensors  timm: "blocks.0.attn.qkv.weight" (query, key and value fused in one matrix); also `.pth`
    .safetensors  HuggingFace transformers' ViT: "vit.encoder.layer.0.attention.attention.query.weight"
    .safetensors  HuggingFace transformers' DINOv2: "encoder.layer.0.attention.attention.query.weight", "...norm1..."

A HuggingFace folder (`model.safetensors` beside `config.json`) can be given instead of the file.

LayerScale (CaiT, Touvron et al. 2021; DINOv2 and timm's `ls1`/`ls2`) multiplies each residual branch's output by
a learned vector, `x + gamma * branch(x)`. The branch ends in a linear projection, so the vector is folded into it
at load time (`W * gamma`, `b * gamma`, exact): our `EncoderBlock` needs no extra weight for it.

Flax stores kernels as (in, out), as Keras does; PyTorch stores Linear weights as (out, in) and Conv2d weights as
(out, in, height, width), so those are transposed. The layouts and the checks are `keras_tfm.models._porting`'s,
shared with the BERT family's loader (`text_weights`); this module holds the ViT naming tables.
"""

import collections
import json
import math
import os
import re
import zipfile

import numpy as np
from keras import ops

from keras_tfm.layers import resample_position_embeddings
from keras_tfm.models import _porting
from keras_tfm.models._porting import (POSITION_TABLE, SAME, TORCH_CONV, TORCH_HEADS_BIAS, TORCH_HEADS_IN,
                                       TORCH_HEADS_OUT, TORCH_LINEAR, fused)
from keras_tfm.models._safetensors import read_safetensors

# ImageNet's per-channel mean and standard deviation of [0, 1] pixels: the normalisation of DeiT, DINOv2 and most
# timm / HuggingFace checkpoints trained after the original ViT (which maps pixels to [-1, 1]). `ViT(rescale=
# "imagenet")` applies them.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# A naming scheme: `top` and `block` map our weight names to (checkpoint name, layout); block names are
# prefixed with `block_prefix` (with "{i}" the block index). `classifier` lists the checkpoint tensors that belong
# to the classifier, dropped when the head is skipped.
# `layer_scale` maps a branch's output projection to the checkpoint's LayerScale vector (folded in, see above);
# `ignored` lists tensors the checkpoint has and a ViT does not use (DINOv2's `mask_token`, for masked training).
_Scheme = collections.namedtuple("Scheme", ["name", "top", "block", "block_prefix", "classifier", "layer_scale",
                                            "ignored"], defaults=({}, ()))

_ORIGINAL = _Scheme(
    name="original ViT (.npz)",
    top={
        "patch_embedding/projection/kernel": ("embedding/kernel", SAME),
        "patch_embedding/projection/bias": ("embedding/bias", SAME),
        "patch_embedding/cls_token": ("cls", SAME),
        "patch_embedding/position_embeddings": ("Transformer/posembed_input/pos_embedding", POSITION_TABLE),
        "encoder_norm/gamma": ("Transformer/encoder_norm/scale", SAME),
        "encoder_norm/beta": ("Transformer/encoder_norm/bias", SAME),
        "head/kernel": ("head/kernel", SAME),
        "head/bias": ("head/bias", SAME),
    },
    block={
        "attention_norm/gamma": ("LayerNorm_0/scale", SAME),
        "attention_norm/beta": ("LayerNorm_0/bias", SAME),
        "attention/query/kernel": ("MultiHeadDotProductAttention_1/query/kernel", SAME),
        "attention/query/bias": ("MultiHeadDotProductAttention_1/query/bias", SAME),
        "attention/key/kernel": ("MultiHeadDotProductAttention_1/key/kernel", SAME),
        "attention/key/bias": ("MultiHeadDotProductAttention_1/key/bias", SAME),
        "attention/value/kernel": ("MultiHeadDotProductAttention_1/value/kernel", SAME),
        "attention/value/bias": ("MultiHeadDotProductAttention_1/value/bias", SAME),
        "attention/output/kernel": ("MultiHeadDotProductAttention_1/out/kernel", SAME),
        "attention/output/bias": ("MultiHeadDotProductAttention_1/out/bias", SAME),
        "feed_forward_norm/gamma": ("LayerNorm_2/scale", SAME),
        "feed_forward_norm/beta": ("LayerNorm_2/bias", SAME),
        "feed_forward/hidden/kernel": ("MlpBlock_3/Dense_0/kernel", SAME),
        "feed_forward/hidden/bias": ("MlpBlock_3/Dense_0/bias", SAME),
        "feed_forward/output/kernel": ("MlpBlock_3/Dense_1/kernel", SAME),
        "feed_forward/output/bias": ("MlpBlock_3/Dense_1/bias", SAME),
    },
    block_prefix="Transformer/encoderblock_{i}/",
    # ImageNet-21k checkpoints put a tanh "pre_logits" layer before the head; the paper drops both to fine-tune.
    classifier=("head/kernel", "head/bias", "pre_logits/kernel", "pre_logits/bias"),
)

_TIMM = _Scheme(
    name="timm (.safetensors)",
    top={
        "patch_embedding/projection/kernel": ("patch_embed.proj.weight", TORCH_CONV),
        "patch_embedding/projection/bias": ("patch_embed.proj.bias", SAME),
        "patch_embedding/cls_token": ("cls_token", SAME),
        "patch_embedding/position_embeddings": ("pos_embed", POSITION_TABLE),
        "encoder_norm/gamma": ("norm.weight", SAME),
        "encoder_norm/beta": ("norm.bias", SAME),
        "head/kernel": ("head.weight", TORCH_LINEAR),
        "head/bias": ("head.bias", SAME),
    },
    block={
        "attention_norm/gamma": ("norm1.weight", SAME),
        "attention_norm/beta": ("norm1.bias", SAME),
        "attention/query/kernel": ("attn.qkv.weight", fused(0, TORCH_HEADS_IN)),
        "attention/query/bias": ("attn.qkv.bias", fused(0, TORCH_HEADS_BIAS)),
        "attention/key/kernel": ("attn.qkv.weight", fused(1, TORCH_HEADS_IN)),
        "attention/key/bias": ("attn.qkv.bias", fused(1, TORCH_HEADS_BIAS)),
        "attention/value/kernel": ("attn.qkv.weight", fused(2, TORCH_HEADS_IN)),
        "attention/value/bias": ("attn.qkv.bias", fused(2, TORCH_HEADS_BIAS)),
        "attention/output/kernel": ("attn.proj.weight", TORCH_HEADS_OUT),
        "attention/output/bias": ("attn.proj.bias", SAME),
        "feed_forward_norm/gamma": ("norm2.weight", SAME),
        "feed_forward_norm/beta": ("norm2.bias", SAME),
        "feed_forward/hidden/kernel": ("mlp.fc1.weight", TORCH_LINEAR),
        "feed_forward/hidden/bias": ("mlp.fc1.bias", SAME),
        "feed_forward/output/kernel": ("mlp.fc2.weight", TORCH_LINEAR),
        "feed_forward/output/bias": ("mlp.fc2.bias", SAME),
    },
    block_prefix="blocks.{i}.",
    classifier=("head.weight", "head.bias"),
    layer_scale={"attention/output": "ls1.gamma", "feed_forward/output": "ls2.gamma"},  # DINOv2, CaiT, DeiT III
)


def _huggingface_scheme(prefix):
    """transformers' ViT names; `prefix` is "vit." for `ViTForImageClassification`, "" for a bare `ViTModel`."""
    projection = f"{prefix}embeddings.patch_embeddings.projection"
    return _Scheme(
        name="HuggingFace transformers (.safetensors)",
        top={
            "patch_embedding/projection/kernel": (f"{projection}.weight", TORCH_CONV),
            "patch_embedding/projection/bias": (f"{projection}.bias", SAME),
            "patch_embedding/cls_token": (f"{prefix}embeddings.cls_token", SAME),
            "patch_embedding/position_embeddings": (f"{prefix}embeddings.position_embeddings", POSITION_TABLE),
            "encoder_norm/gamma": (f"{prefix}layernorm.weight", SAME),
            "encoder_norm/beta": (f"{prefix}layernorm.bias", SAME),
            "head/kernel": ("classifier.weight", TORCH_LINEAR),
            "head/bias": ("classifier.bias", SAME),
        },
        block={
            "attention_norm/gamma": ("layernorm_before.weight", SAME),
            "attention_norm/beta": ("layernorm_before.bias", SAME),
            "attention/query/kernel": ("attention.attention.query.weight", TORCH_HEADS_IN),
            "attention/query/bias": ("attention.attention.query.bias", TORCH_HEADS_BIAS),
            "attention/key/kernel": ("attention.attention.key.weight", TORCH_HEADS_IN),
            "attention/key/bias": ("attention.attention.key.bias", TORCH_HEADS_BIAS),
            "attention/value/kernel": ("attention.attention.value.weight", TORCH_HEADS_IN),
            "attention/value/bias": ("attention.attention.value.bias", TORCH_HEADS_BIAS),
            "attention/output/kernel": ("attention.output.dense.weight", TORCH_HEADS_OUT),
            "attention/output/bias": ("attention.output.dense.bias", SAME),
            "feed_forward_norm/gamma": ("layernorm_after.weight", SAME),
            "feed_forward_norm/beta": ("layernorm_after.bias", SAME),
            "feed_forward/hidden/kernel": ("intermediate.dense.weight", TORCH_LINEAR),
            "feed_forward/hidden/bias": ("intermediate.dense.bias", SAME),
            "feed_forward/output/kernel": ("output.dense.weight", TORCH_LINEAR),
            "feed_forward/output/bias": ("output.dense.bias", SAME),
        },
        block_prefix=f"{prefix}encoder.layer.{{i}}.",
        # A bare ViTModel may carry a tanh pooler, the counterpart of the original "pre_logits".
        classifier=(
            "classifier.weight", "classifier.bias", f"{prefix}pooler.dense.weight", f"{prefix}pooler.dense.bias"
        ),
    )


def _dinov2_scheme(prefix):
    """transformers' `Dinov2Model` names ("" prefix) or those of its classifier ("dinov2." prefix): ViT's, but for
    the norms and the MLP of each block, LayerScale, and a mask token used only in pre-training."""
    vit = _huggingface_scheme(prefix)
    block = {**vit.block,
             "attention_norm/gamma": ("norm1.weight", SAME),
             "attention_norm/beta": ("norm1.bias", SAME),
             "feed_forward_norm/gamma": ("norm2.weight", SAME),
             "feed_forward_norm/beta": ("norm2.bias", SAME),
             "feed_forward/hidden/kernel": ("mlp.fc1.weight", TORCH_LINEAR),
             "feed_forward/hidden/bias": ("mlp.fc1.bias", SAME),
             "feed_forward/output/kernel": ("mlp.fc2.weight", TORCH_LINEAR),
             "feed_forward/output/bias": ("mlp.fc2.bias", SAME)}
    return vit._replace(
        name="HuggingFace DINOv2 (.safetensors)", block=block, classifier=("classifier.weight", "classifier.bias"),
        layer_scale={"attention/output": "layer_scale1.lambda1", "feed_forward/output": "layer_scale2.lambda1"},
        ignored=(f"{prefix}embeddings.mask_token",))


def load_vit_weights(model, path, skip_head=False):
    """Loads a pretrained ViT checkpoint (original `.npz`, timm or HuggingFace `.safetensors`) into a `ViT`
    or a `ViTBackbone`.

    Every checkpoint tensor is mapped to one weight of the model by name and converted to its layout (PyTorch
    matrices transposed, attention projections split into heads, timm's fused query|key|value split in three).
    Nothing is assigned unless the whole checkpoint fits: a tensor the model has no place for, a weight the
    checkpoint does not fill, or a shape that differs raises a `ValueError` that lists every such name.

    The model must be built like the checkpoints: `position="learned"`, `pool="cls"`, and the checkpoint's
    `depth`, `dim`, `mlp_dim` and `num_heads` (checked against the tensors; PyTorch files do not record the
    number of heads, so for them it is checked only when a `config.json` beside the file names
    `num_attention_heads`). The image size may differ: when the model's patch grid differs from the
    checkpoint's (e.g. a 224/16 = 14x14 table loaded into a 384/16 = 24x24 model) the position table is
    resampled with `resample_position_embeddings`, as in the paper's fine-tuning at higher resolution. The
    checkpoint's grid is read from its table, which must be square unless it already matches the model's grid.

    The classifier: with `skip_head=True` the checkpoint's head (and its `pre_logits`/`pooler` layer, which this
    ViT does not have) is deliberately ignored and the model's head keeps its fresh initialisation, for
    fine-tuning on another set of classes. A model built with `include_top=False` skips them the same way.
    Otherwise a head of another shape is an error that suggests `skip_head=True`, and `pre_logits`/`pooler`
    tensors are reported as unused.

    Numerics: the model's MLP uses the exact (erf) GELU and its `layer_norm_epsilon`. timm and HuggingFace use
    the exact GELU too; the original Flax code used the tanh approximation, so logits of `.npz` checkpoints
    differ slightly from those of the JAX code. HuggingFace configs use `layer_norm_eps=1e-12`; pass that as
    `layer_norm_epsilon` to match them exactly. With `rescale=True` the model feeds pixels in [-1, 1], the
    preprocessing of the original and most timm/HuggingFace ViT weights; for weights trained with ImageNet
    mean/std normalisation (e.g. DeiT) build the model with `rescale=False` and normalise the images yourself.

    Args:
        model: a `keras_tfm.models.ViT` built with `position="learned"`, `pool="cls"` (as the `"ViT-*"` presets
            build it), or a `ViTBackbone` with `position="learned"`, `class_token=True` (its presets of the same
            names); a backbone takes the checkpoint's trunk and ignores its classifier.
        path: path of the checkpoint, ending in `.npz` (google-research/vision_transformer) or `.safetensors`
            (timm or HuggingFace transformers naming; F32, F16 and BF16 tensors).
        skip_head: ignore the checkpoint's classifier and keep the model's freshly initialised head.

    Returns:
        The model, with its weights replaced.

    Example:

    >>> model = ViT.from_preset("ViT-B/16", image_size=384, num_classes=10)  # position="learned", pool="cls"
    >>> model = load_vit_weights(model, "ViT-B_16.npz", skip_head=True)  # ImageNet-21k weights, new 10-class head

    Reference: Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words: Transformers for Image Recognition at
    Scale", section 3.2 (fine-tuning: drop the pre-trained head, interpolate the position embeddings in 2D).
    """
    return _load(model, checkpoint_file(path), skip_head)


def _load(model, path, skip_head, tensors=None):
    """`load_vit_weights` of the checkpoint file `path`, whose `tensors` may have been read already."""
    # ViT and ViTBackbone (vit.py, which imports this module) say so by CHECKPOINT_FAMILY.
    if getattr(model, "CHECKPOINT_FAMILY", None) != "vit":
        raise ValueError("`model` must be a keras_tfm.models.ViT or ViTBackbone. Received: model of type "
                         f"{type(model).__name__}")
    backbone = getattr(model, "backbone", model)  # a ViT's sizes are its backbone's
    if backbone.position != "learned" or not backbone.class_token:
        raise ValueError(
            "Pretrained ViT checkpoints have a learned position table and a [CLS] token: build the backbone with "
            'position="learned", class_token=True (the "ViT-*" presets do). Received: '
            f"position={backbone.position!r}, class_token={backbone.class_token!r}"
        )
    if backbone.tokenizer != "linear" or backbone.locality:
        raise ValueError(
            "Pretrained ViT checkpoints have linear patch projections and plain attention: build the model with "
            f'tokenizer="linear", locality=False. Received: tokenizer={backbone.tokenizer!r}, '
            f"locality={backbone.locality!r}"
        )
    tensors = _read_checkpoint(path) if tensors is None else tensors
    scheme = _naming_scheme(tensors, path)
    _check_sizes(backbone, tensors, scheme, path)

    weights = _model_weights(model)  # our name -> variable
    plan = dict(scheme.top)  # our name -> (checkpoint name, layout)
    for i in range(backbone.depth):
        prefix = scheme.block_prefix.format(i=i)
        plan.update({f"block_{i}/{ours}": (prefix + theirs, layout) for ours, (theirs, layout) in scheme.block.items()})

    # LayerScale vectors, one per branch and block, folded into the branch's output projection below.
    scales = {f"block_{i}/{ours}": scheme.block_prefix.format(i=i) + theirs
              for i in range(backbone.depth) for ours, theirs in scheme.layer_scale.items()}
    scales = {ours: theirs for ours, theirs in scales.items() if theirs in tensors}

    drop_head = skip_head or not getattr(model, "include_top", False)  # a ViTBackbone has no head
    skipped = set(scheme.classifier) if drop_head else set()  # checkpoint tensors deliberately left unused
    # With skip_head the head stays as initialised: it is neither loaded nor reported as missing.
    targets = {name: variable for name, variable in weights.items() if not (drop_head and name.startswith("head/"))}

    values, missing_records, mismatched_records = _porting.plan(
        [(name, plan[name][0], variable.shape, plan[name][1]) for name, variable in targets.items()], tensors)
    missing = [f"`{targets[m.key].path}` (checkpoint name `{m.source}`)" for m in missing_records]
    mismatched = [
        f"`{m.source}` has shape {m.found} in the checkpoint, but the model's `{targets[m.key].path}` "
        f"of shape {tuple(targets[m.key].shape)} needs {tuple('any' if size is None else size for size in m.expected)}"
        for m in mismatched_records]

    for ours, theirs in scales.items():
        if tensors[theirs].shape != (backbone.dim,):
            mismatched.append(f"`{theirs}` has shape {tensors[theirs].shape} in the checkpoint; a LayerScale vector "
                              f"of this model needs ({backbone.dim},)")
    used = {plan[name][0] for name in targets} | skipped | set(scales.values()) | set(scheme.ignored)
    unused = sorted(set(tensors) - used)
    problems = []
    if mismatched:
        problems.append("shapes differ:\n    " + "\n    ".join(mismatched))
    if missing:
        problems.append("model weights without a value in the checkpoint: " + ", ".join(missing))
    if unused:
        problems.append("checkpoint tensors the model has no place for: " + ", ".join(f"`{n}`" for n in unused))
    if problems:
        raise ValueError(
            f"Cannot load {path} ({scheme.name} names) into model '{model.name}':\n  - "
            + "\n  - ".join(problems)
            + _hints(plan, mismatched, missing, unused, scheme)
        )

    position = "patch_embedding/position_embeddings"
    values[position] = _fit_position_table(values[position], model.get_layer("patch_embedding"), plan[position][0])
    for branch, source in scales.items():  # x + gamma * (h W + b) = x + h (W * gamma) + b * gamma
        gamma = tensors[source]  # (dim,): scales the output features, the kernels' last axis
        values[f"{branch}/kernel"] = values[f"{branch}/kernel"] * gamma
        values[f"{branch}/bias"] = values[f"{branch}/bias"] * gamma
    for name, value in values.items():
        variable = weights[name]
        variable.assign(ops.cast(value, variable.dtype))
    return model


def checkpoint_arguments(path):
    """The `ViT` / `ViTBackbone` arguments a checkpoint's own shape implies, read from its tensors (and from a
    HuggingFace `config.json` / `preprocessor_config.json` beside it).

    Args:
        path: a checkpoint file or HuggingFace folder, as `load_vit_weights` takes.

    Returns:
        A dict with `patch_size`, `dim`, `depth`, `num_heads`, `mlp_dim`, `image_size` (the size its position
        table was trained for), `layer_norm_epsilon`, `rescale` (`"imagenet"` when the checkpoint's preprocessing
        is ImageNet's mean and std, as DINOv2's and DeiT's, else `True`: [-1, 1]) and `position="learned"`.
        `heads_recorded` says whether the checkpoint records its number of heads: PyTorch files do not, and
        without a `config.json` it is `dim // 64` (64-wide heads, as every ViT, DeiT and DINOv2 size has).

    Example:

    >>> checkpoint_arguments("checkpoints/dinov2-vits14")  # doctest: +SKIP
    {'patch_size': 14, 'dim': 384, 'depth': 12, 'num_heads': 6, 'mlp_dim': 1536, 'image_size': 518, ...}
    """
    file = checkpoint_file(path)
    return _arguments(file, _read_checkpoint(file))


def _arguments(file, tensors):
    """`checkpoint_arguments` of the checkpoint `file`, whose `tensors` are read."""
    scheme = _naming_scheme(tensors, file)
    first = scheme.block_prefix.format(i=0)

    def tensor(name):
        if name not in tensors:
            raise ValueError(f"{file} ({scheme.name} names) has no `{name}`: not a complete ViT checkpoint.")
        return tensors[name]

    pattern = re.compile(re.escape(scheme.block_prefix).replace(re.escape("{i}"), r"(\d+)"))
    depth = len({int(match.group(1)) for match in map(pattern.match, tensors) if match})
    kernel = tensor(scheme.top["patch_embedding/projection/kernel"][0])
    patch = kernel.shape[:2] if scheme is _ORIGINAL else kernel.shape[2:]  # Flax (h, w, in, out); torch (out, in, h, w)
    dim = tensor(scheme.top["patch_embedding/cls_token"][0]).shape[-1]
    patches = tensor(scheme.top["patch_embedding/position_embeddings"][0]).shape[-2] - 1
    side = math.isqrt(patches)
    query_bias = tensor(first + scheme.block["attention/query/bias"][0])
    config = _json_beside(file, "config.json")
    recorded = query_bias.ndim == 2 or isinstance(config.get("num_attention_heads"), int)
    num_heads = (query_bias.shape[0] if query_bias.ndim == 2 else config.get("num_attention_heads", max(1, dim // 64)))
    arguments = dict(
        patch_size=int(patch[0]) if patch[0] == patch[1] else tuple(int(size) for size in patch),
        dim=int(dim), depth=depth, num_heads=int(num_heads),
        mlp_dim=int(tensor(first + scheme.block["feed_forward/hidden/bias"][0]).shape[0]),
        image_size=int(side * patch[0]) if side * side == patches else None,
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-6)),
        rescale="imagenet" if _imagenet_normalised(file, config) else True,
        position="learned",
    )
    if arguments["image_size"] is None:
        raise ValueError(f"{file}: the position table has {patches} patch rows, not a square grid; pass image_size.")
    arguments["heads_recorded"] = recorded
    return arguments


def from_checkpoint(cls, path, image_size, kwargs):
    """`ViTBackbone.from_pretrained`: `cls` of the checkpoint's sizes (with its [CLS] token) and the caller's
    `kwargs`, loaded."""
    file = checkpoint_file(path)
    tensors = _read_checkpoint(file)  # read once, for the sizes and for the weights
    arguments = _arguments(file, tensors)
    # The checkpoint's shape is not the caller's to change; the number of heads is, where it is not recorded.
    settable = {"image_size"} if arguments.pop("heads_recorded") else {"image_size", "num_heads"}
    clashing = sorted((set(arguments) - settable) & set(kwargs))
    if clashing:
        raise TypeError(f"{cls.__name__}.from_pretrained takes {', '.join(clashing)} from the checkpoint "
                        f"({', '.join(f'{name}={arguments[name]!r}' for name in clashing)}); build "
                        f"{cls.__name__}(...) and call load_vit_weights to choose them yourself.")
    arguments.update({name: kwargs.pop(name) for name in settable & set(kwargs)})
    if image_size is not None:
        arguments["image_size"] = image_size
    model = cls(**arguments, class_token=True, tokenizer="linear", locality=False, **kwargs)
    _load(model, file, skip_head=True, tensors=tensors)
    return model


def _json_beside(file, name):
    """The dict in the JSON file `name` beside `file` ({} when there is none, or it holds no dict)."""
    config_path = os.path.join(os.path.dirname(file), name)
    if not os.path.isfile(config_path):
        return {}
    try:
        with open(config_path) as stream:
            config = json.load(stream)
    except (OSError, ValueError) as error:
        raise ValueError(f"{config_path} is not readable JSON: {error}") from None
    return config if isinstance(config, dict) else {}


def _imagenet_normalised(file, config):
    """Whether the checkpoint beside `file` expects ImageNet's mean/std (else [-1, 1], the original ViT's)."""
    mean = _json_beside(file, "preprocessor_config.json").get("image_mean")
    if mean is not None:
        return bool(np.allclose(mean, IMAGENET_MEAN, atol=1e-3))
    return config.get("model_type") == "dinov2"


def _hints(plan, mismatched, missing, unused, scheme):
    """What to do about the usual reasons a checkpoint does not fit, as extra lines of the error."""
    lines = []
    head_sources = [plan[name][0] for name in ("head/kernel", "head/bias")]
    if any(f"`{source}`" in line for line in mismatched for source in head_sources):
        lines.append(
            "The checkpoint's classifier has another number of classes: pass skip_head=True to keep the model's "
            "freshly initialised head (for fine-tuning), or build the model with the checkpoint's num_classes."
        )
    if any(line.startswith("`head/") for line in missing):
        lines.append(
            "The checkpoint has no classification head: pass skip_head=True to keep the model's initialised "
            "head, or build the model with include_top=False."
        )
    extras = [name for name in unused if name in scheme.classifier]
    if extras:
        lines.append(
            f"{', '.join(f'`{name}`' for name in extras)} belong to a layer between the features and the head that this ViT does not "
            "have: pass skip_head=True to drop the checkpoint's classifier, as when fine-tuning."
        )
    return "".join("\n" + line for line in lines)


def _model_weights(model):
    """The ViT's weights under the names the naming schemes use (they mirror the variables' paths)."""
    embedding = model.get_layer("patch_embedding")
    weights = {
        "patch_embedding/projection/kernel": embedding.projection.kernel,  # (patch_h, patch_w, channels, dim)
        "patch_embedding/projection/bias": embedding.projection.bias,  # (dim,)
        "patch_embedding/cls_token": embedding.cls_token,  # (1, 1, dim)
        "patch_embedding/position_embeddings": embedding.position_embeddings,  # (1 + grid_h * grid_w, dim)
    }
    layers = {"encoder_norm": model.get_layer("encoder_norm")}
    for i in range(model.depth):
        block = model.get_layer(f"block_{i}")
        layers.update(
            {
                f"block_{i}/attention_norm": block.attention_norm,
                f"block_{i}/attention/query": block.attention.query_dense,  # kernel (dim, heads, head_dim)
                f"block_{i}/attention/key": block.attention.key_dense,
                f"block_{i}/attention/value": block.attention.value_dense,
                f"block_{i}/attention/output": block.attention.output_dense,  # kernel (heads, head_dim, dim)
                f"block_{i}/feed_forward_norm": block.feed_forward_norm,
                f"block_{i}/feed_forward/hidden": block.feed_forward.hidden,  # kernel (dim, mlp_dim)
                f"block_{i}/feed_forward/output": block.feed_forward.output_projection,  # kernel (mlp_dim, dim)
            }
        )
    if getattr(model, "include_top", False):
        layers["head"] = model.get_layer("head")  # kernel (dim, num_classes)
    for prefix, layer in layers.items():
        weights.update({f"{prefix}/{variable.name}": variable for variable in layer.weights})  # kernel/bias, gamma/beta

    # Every weight of the model must have a name above, or it could silently keep its random initialisation.
    named = {id(variable) for variable in weights.values()}
    unnamed = [variable.path for variable in model.weights if id(variable) not in named]
    if unnamed:
        raise ValueError(f"These weights of model '{model.name}' have no counterpart in ViT checkpoints: {unnamed}")
    return weights


def _fit_position_table(table, embedding, source):
    """The checkpoint's `(1 + patches, dim)` table on the model's patch grid, resampled if the grids differ."""
    patches = table.shape[0] - 1  # row 0 is the [CLS] token's
    model_grid = tuple(embedding.build_grid)
    side = math.isqrt(patches)
    if side * side == patches:
        grid = (side, side)  # published tables are square
    elif patches == model_grid[0] * model_grid[1]:
        grid = model_grid  # not square, but the same size: assume the model's grid
    else:
        raise ValueError(
            f"`{source}` has {patches} patch rows (after the [CLS] row), which is neither a square grid nor the "
            f"model's {model_grid[0]}x{model_grid[1]} grid, so it cannot be resampled to the model's grid."
        )
    if grid == model_grid:
        return table
    resampled = resample_position_embeddings(
        table, grid, model_grid, num_prefix_tokens=1, interpolation=embedding.interpolation
    )  # (1 + grid_h * grid_w, dim)
    return ops.convert_to_numpy(resampled)


def _check_sizes(model, tensors, scheme, path):
    """Compares the architecture the checkpoint implies with the model's, before comparing tensor by tensor."""
    pattern = re.compile(re.escape(scheme.block_prefix).replace(re.escape("{i}"), r"(\d+)"))
    blocks = {int(match.group(1)) for match in map(pattern.match, tensors) if match}
    found = {"depth": len(blocks)} if blocks else {}
    first = scheme.block_prefix.format(i=0)
    cls_token = tensors.get(scheme.top["patch_embedding/cls_token"][0])
    if cls_token is not None:
        found["dim"] = cls_token.shape[-1]
    hidden_bias = tensors.get(first + scheme.block["feed_forward/hidden/bias"][0])
    if hidden_bias is not None:
        found["mlp_dim"] = hidden_bias.shape[0]  # (mlp_dim,) in every format
    query_bias = tensors.get(first + scheme.block["attention/query/bias"][0])
    if query_bias is not None and query_bias.ndim == 2:
        found["num_heads"] = query_bias.shape[0]  # Flax keeps the heads apart: (heads, head_dim)
    config = _json_beside(path, "config.json") if "num_heads" not in found else {}
    if isinstance(config.get("num_attention_heads"), int):
        found["num_heads"] = config["num_attention_heads"]  # HuggingFace's config beside the weights

    differ = {name: size for name, size in found.items() if getattr(model, name) != size}
    if differ:
        received = ", ".join(f"{name}={getattr(model, name)}" for name in differ)
        wanted = ", ".join(f"{name}={size}" for name, size in differ.items())
        raise ValueError(
            f"The checkpoint {path} is a ViT with {wanted}; build the model with those sizes. Received: {received}"
        )


def _naming_scheme(tensors, path):
    """Which of the four naming schemes a checkpoint uses."""
    if path.lower().endswith(".npz"):
        return _ORIGINAL
    if "cls_token" in tensors:
        return _TIMM
    for prefix in ("dinov2.", ""):
        if f"{prefix}encoder.layer.0.norm1.weight" in tensors:  # DINOv2's block names (ViT's: layernorm_before)
            return _dinov2_scheme(prefix)
    for prefix in ("vit.", ""):
        if f"{prefix}embeddings.cls_token" in tensors:
            return _huggingface_scheme(prefix)
    raise ValueError(
        f"{path} uses neither timm names (`cls_token`, `blocks.0.attn.qkv.weight`, ...) nor HuggingFace "
        f"transformers names (`vit.embeddings.cls_token`, ...). Its first names: {sorted(tensors)[:5]}"
    )


CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin")


def checkpoint_file(path):
    """The checkpoint file `path` names: the file itself, or a HuggingFace folder's `model.safetensors`.

    Raises:
        FileNotFoundError: nothing at `path`, or a folder without `model.safetensors`.
        ValueError: a file whose suffix is not a checkpoint's (`CHECKPOINT_SUFFIXES`).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        inside = os.path.join(path, "model.safetensors")
        if not os.path.isfile(inside):
            raise FileNotFoundError(f"The folder {path!r} holds no model.safetensors: not a HuggingFace checkpoint "
                                    "folder. Give the checkpoint file itself, or the folder that holds it.")
        return inside
    if not os.path.isfile(path):  # first: a missing file is the likeliest mistake, and nothing else matters then
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()!r})"
        raise FileNotFoundError(f"No ViT checkpoint at `path`: {path!r}{where} is not a file.")
    if path.lower().endswith(".keras"):
        raise ValueError(f"{path} is a whole saved Keras model, not a checkpoint of weights: load it with "
                         "keras_tfm.load_model (or keras.saving.load_model) and train it further.")
    if not path.lower().endswith(CHECKPOINT_SUFFIXES):
        raise ValueError(
            f"Unknown checkpoint format: the path must end in `.npz` (original ViT, timm), `.safetensors` (timm, "
            f"HuggingFace), or `.pth`/`.pt`/`.bin` (a PyTorch state dict), or name a HuggingFace folder. "
            f"Received: path={path!r}")
    return path


def _read_checkpoint(path):
    """`{name: float32 array}` from a `.npz`, `.safetensors` or PyTorch (`.pth`, `.pt`, `.bin`) file."""
    lowered = path.lower()
    try:
        if lowered.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                return {name: np.asarray(archive[name], dtype="float32") for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # not a zip, cut short, pickled objects
        raise ValueError(f"{path} is not a readable .npz checkpoint (not one, cut short, or holding Python "
                         f"objects): {error}") from None
    if lowered.endswith(".safetensors"):
        return read_safetensors(path, floats_only=True)
    return _read_torch_checkpoint(path)


def _read_torch_checkpoint(path):
    """A PyTorch state dict (timm's `.pth`), read with `torch.load(weights_only=True)`: tensors only, no code."""
    try:
        import torch
    except ImportError:
        raise ValueError(f"{path} is a PyTorch file: reading it needs torch (pip install torch), or convert it to "
                         ".safetensors first.") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not a state dict
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(f"{path} is not a readable PyTorch checkpoint: {type(error).__name__}: {first_line}") \
            from None
    for key in ("model", "state_dict"):  # training checkpoints wrap the weights
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise ValueError(f"{path} holds no state dict of tensors (a dict of name -> tensor).")
    return {name: value.detach().float().numpy() for name, value in state.items()}
