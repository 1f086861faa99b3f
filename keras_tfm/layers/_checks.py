"""Argument checks shared by the layers: each raises a ValueError naming the argument, the value and what
was expected, before TensorFlow/JAX would fail deep inside with a shape error."""

import numbers

import keras


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


def concrete_value(x):
    """`x` as a NumPy array when its values are known to Python (eager execution), else None.

    Inside `tf.function`, `jax.jit` or a symbolic functional-model trace the values only exist at run time;
    converting them raises, and we report "unknown" so value checks are skipped there.
    """
    try:
        return keras.ops.convert_to_numpy(x)
    except Exception:  # symbolic tensors and tracers of every backend raise their own error types
        return None
