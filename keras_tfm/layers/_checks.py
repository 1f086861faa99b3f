"""Argument checks shared by the layers: each raises a ValueError naming the argument, the value and what
was expected, before TensorFlow/JAX would fail deep inside with a shape error. The checks of data values (token
ids, labels) are public, in `keras_tfm.checks`."""

import difflib
import inspect
import numbers
import warnings

import keras
import numpy as np


def positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        expected = "a positive integer" + (" or None" if allow_none else "")
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")


def positive_number(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        expected = "a positive number" + (" or None" if allow_none else "")
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")


def rate(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")


def one_of(name, value, options):
    if value not in options:
        raise ValueError(f"`{name}` must be one of {list(options)}. Received: {name}={value!r}")


def rank(name, shape, expected_rank, layout):
    shape = tuple(shape)
    if len(shape) != expected_rank:
        raise ValueError(
            f"`{name}` must have rank {expected_rank}, shape {layout}. Received: {name} with shape {shape}"
        )


def static(size):
    """A tensor dimension as a Python int, or None when it is only known at run time (None in TensorFlow,
    a symbolic dimension in JAX's shape-polymorphic tracing)."""
    return size if isinstance(size, numbers.Integral) else None


def mask_shape(name, mask, expected, layout):
    """Checks the rank and every statically known size of `mask` against `expected` (None = any)."""
    shape = tuple(mask.shape)
    mismatch = len(shape) != len(expected) or any(
        static(want) is not None and static(got) is not None and want != got for got, want in zip(shape, expected)
    )
    if mismatch:
        raise ValueError(
            f"`{name}` must have shape {layout} = {tuple(expected)}. Received: {name} with shape {shape}"
        )


# Keyword arguments `keras.layers.Layer.__init__` takes besides those in its signature (legacy shape arguments).
_LAYER_EXTRA_KEYWORDS = {"input_shape", "input_dim"}
MODEL_KEYWORDS = {"name", "trainable", "dtype"}


def layer_keywords():
    """The keyword arguments every Keras layer accepts (`name`, `dtype`, `trainable`, ...)."""
    parameters = inspect.signature(keras.layers.Layer.__init__).parameters
    return {name for name, p in parameters.items() if p.kind == p.KEYWORD_ONLY} | _LAYER_EXTRA_KEYWORDS


def known_keywords(owner, kwargs, accepted, signature_of=None):
    """A TypeError for the first keyword in `kwargs` that `owner` (a class, or a method such as
    `Seq2SeqTransformer.generate`) does not take, naming the closest valid one: `ViT(num_class=10)` must fail, not
    build a 1000-class model. The valid names are `accepted` plus the parameters of `signature_of` (default:
    `owner`; a class's are those of its `__init__`)."""
    target = signature_of or owner
    for name in kwargs:
        if name in accepted:
            continue
        parameters = inspect.signature(target.__init__ if isinstance(target, type) else target).parameters
        valid = sorted({p for p in parameters if p not in ("self", "kwargs")} | set(accepted))
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        raise TypeError(
            f"{owner.__qualname__} got an unexpected keyword argument `{name}` (= {kwargs[name]!r}).{hint} "
            f"Valid arguments: {', '.join(valid)}."
        )


def booleans(owner, arguments):
    """A TypeError for each argument of `owner.__init__` (a class) whose default is True or False but whose value
    in `arguments` (the constructor's `locals()`) is not a bool: `norm_first="yes"` must not quietly mean True,
    nor `norm_first="no"`. An owner's `OTHER_OPTIONS` ({name: values}) names the other values an argument may
    take (ViT's `rescale="imagenet"`)."""
    others = getattr(owner, "OTHER_OPTIONS", {})
    for name, parameter in inspect.signature(owner.__init__).parameters.items():
        if isinstance(parameter.default, bool) and name in arguments:
            value = arguments[name]
            if not isinstance(value, (bool, np.bool_)) and value not in others.get(name, ()):
                raise TypeError(f"`{name}` must be True or False. Received: {name}={value!r}")


def renamed(owner, kwargs, old, new, value, default=None):
    """Reads a deprecated argument name: returns the value under `old` (with a FutureWarning) or `value`.
    Old names keep working for one release, and `.keras` files saved with them still load."""
    if old not in kwargs:
        return value
    old_value = kwargs.pop(old)
    if value != default and value != old_value:
        raise TypeError(f"{owner}: pass `{new}` only (`{old}` is its old name). Received: {old}={old_value!r}, "
                        f"{new}={value!r}")
    warnings.warn(f"{owner}: `{old}` is deprecated, use `{new}` (same meaning); `{old}` goes in the next release.",
                  FutureWarning, stacklevel=3)
    return old_value


def is_shape_placeholder(x):
    """True for the stand-in tensors PyTorch's symbolic shape inference runs a layer on: they live on the "meta"
    device, and unknown dimensions are filled with an arbitrary size, so their sizes must not be checked."""
    device = getattr(x, "device", None)
    return getattr(device, "type", None) == "meta"
