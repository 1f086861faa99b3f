"""The one checkpoint-porting engine: how a checkpoint tensor becomes a model weight, for every family.

A family's loader (`vit_weights` for ViT, `text_weights` for BERT, DistilBERT and RoBERTa) does two things. It
says which checkpoint tensor fills which weight, with a layout: a naming table per family and naming scheme. It
also decides what a problem means: ViT lists every problem at once, with hints; the text encoders name the first
one. This module holds the rest: the layouts, and `plan`, which checks and converts every tensor before anything
is assigned.

A layout turns a checkpoint tensor into a weight, given the weight's shape: `expected(shape)` is the shape the
tensor must have in the checkpoint (None = any size on that axis), `convert(array, shape)` returns it in the
model's layout. Flax stores kernels as (in, out), as Keras does; PyTorch stores Linear weights as (out, in) and
Conv2d weights as (out, in, height, width), so those are transposed.
"""

import collections

import numpy as np

Layout = collections.namedtuple("Layout", ["expected", "convert"])

SAME = Layout(lambda shape: shape, lambda array, shape: np.reshape(array, shape))
# A ViT's position table is stored with a leading batch axis, (1, tokens, dim). Any token count is accepted
# here: a table for another patch grid is resampled afterwards.
POSITION_TABLE = Layout(lambda shape: (1, None, shape[-1]), lambda array, shape: array[0])
# PyTorch Linear: (out, in) -> (in, out).
TORCH_LINEAR = Layout(lambda shape: shape[::-1], lambda array, shape: array.T)
# PyTorch Conv2d: (out, in, height, width) -> (height, width, in, out).
TORCH_CONV = Layout(
    lambda shape: (shape[3], shape[2], shape[0], shape[1]), lambda array, shape: array.transpose(2, 3, 1, 0)
)
# Query/key/value projection: (heads * head_dim, dim) -> (dim, heads, head_dim); bias -> (heads, head_dim).
TORCH_HEADS_IN = Layout(lambda shape: (shape[1] * shape[2], shape[0]), lambda array, shape: array.T.reshape(shape))
TORCH_HEADS_BIAS = Layout(lambda shape: (shape[0] * shape[1],), lambda array, shape: array.reshape(shape))
# Attention output projection: (dim, heads * head_dim) -> (heads, head_dim, dim).
TORCH_HEADS_OUT = Layout(lambda shape: (shape[2], shape[0] * shape[1]), lambda array, shape: array.T.reshape(shape))


def fused(part, layout):
    """timm's `attn.qkv`: query, key and value stacked along the output axis; `part` 0, 1, 2 picks one."""
    return Layout(
        lambda shape: (3 * layout.expected(shape)[0],) + tuple(layout.expected(shape)[1:]),
        lambda array, shape: layout.convert(np.split(array, 3, axis=0)[part], shape),
    )


def shape_fits(shape, expected):
    """Whether a checkpoint tensor's `shape` is the `expected` one (None: any size on that axis)."""
    return len(shape) == len(expected) and all(e is None or s == e for s, e in zip(shape, expected))


Missing = collections.namedtuple("Missing", ["key", "source"])
Mismatched = collections.namedtuple("Mismatched", ["key", "source", "found", "expected"])


def plan(entries, tensors):
    """Checks and converts every entry; assigns nothing.

    Args:
        entries: `(key, checkpoint name, weight shape, layout)` for every weight to fill; `key` is the loader's
            own (a weight's name or the variable).
        tensors: the checkpoint, `{name: array}`.

    Returns:
        `(values, missing, mismatched)`: `{key: array in the weight's layout}` for the entries that fit, and
        `Missing` and `Mismatched` records, in the entries' order, for those that do not.
    """
    values, missing, mismatched = {}, [], []
    for key, source, shape, layout in entries:
        shape = tuple(shape)
        if source not in tensors:
            missing.append(Missing(key, source))
            continue
        array = tensors[source]
        expected = tuple(layout.expected(shape))
        if not shape_fits(tuple(array.shape), expected):
            mismatched.append(Mismatched(key, source, tuple(array.shape), expected))
            continue
        values[key] = layout.convert(array, shape)
    return values, missing, mismatched
