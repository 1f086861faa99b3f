"""Argument checks shared by the layers: each raises a ValueError naming the argument, the value and what
was expected, before TensorFlow/JAX would fail deep inside with a shape error."""

import contextlib
import difflib
import inspect
import numbers
import threading
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


_checked_upstream = threading.local()


@contextlib.contextmanager
def values_checked_upstream():
    """Within this block `concrete_value` returns None: value checks are skipped because the caller has checked
    the data already, on the host. The ready models' `fit`, `evaluate` and `predict` use it: inside a training
    step reading a tensor's values is a device-to-host copy, which waits for the device (a sync on a GPU; on
    PyTorch and JAX without jit it would happen at every step)."""
    depth = getattr(_checked_upstream, "depth", 0)
    _checked_upstream.depth = depth + 1
    try:
        yield
    finally:
        _checked_upstream.depth = depth


def concrete_value(x):
    """`x` as a NumPy array when its values are known to Python (eager execution), else None.

    Inside `tf.function`, `jax.jit` or a symbolic functional-model trace the values only exist at run time;
    converting them raises, and we report "unknown" so value checks are skipped there. Inside
    `values_checked_upstream()` it is None without looking.
    """
    if getattr(_checked_upstream, "depth", 0):
        return None
    try:
        return keras.ops.convert_to_numpy(x)
    except Exception:  # symbolic tensors and tracers of every backend raise their own error types
        return None


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


def _outside(name, values, size, what, hint):
    """The first value of `values` outside [0, size) (its maximum if too large, else its minimum), or None; a
    TypeError for values that are not whole numbers (a float id 5.7 must not quietly become 5)."""
    values = np.asarray(values)
    if values.size == 0:
        return None
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.bool_)):
        if not np.issubdtype(values.dtype, np.floating) or not np.all(np.mod(values, 1) == 0):
            example = values.ravel()[np.flatnonzero(np.mod(values.astype("float64"), 1) != 0)[:1]]
            raise TypeError(
                f"`{name}` must hold integer {what}. Received dtype {values.dtype}"
                + (f" with the non-integer value {example[0]!r}" if example.size else "") + f". {hint}"
            )
    low, high = values.min(), values.max()
    if high >= size:
        return int(high)
    return int(low) if low < 0 else None


_IDS_HINT = "Check the tokenizer's vocabulary size against the model's `vocab_size`."


def _ids_range(name, vocab_size, where=""):
    return f"Token ids in `{name}`{where} must lie in [0, vocab_size) = [0, {vocab_size})."


def token_ids(name, values, vocab_size, where=""):
    """Checks concrete token ids: integers in [0, vocab_size). `where` follows the name in the message."""
    bad = _outside(name, values, vocab_size, "token ids", "Tokenize to ints (and give keras.Input dtype='int32').")
    if bad is not None:
        raise ValueError(f"{_ids_range(name, vocab_size, where)} Received: an id of {bad}. {_IDS_HINT}")


def tf_assert_in_range(values, size, message):
    """A TensorFlow graph assertion that every value lies in [0, size). When it fails, TensorFlow's error prints
    `message`, then the value outside: the largest if it is too large, else the smallest. Both tests pass for an
    empty tensor, whose min is the dtype's largest value and max its smallest."""
    import tensorflow as tf  # only on the TensorFlow backend, or for a tf.data pipeline

    low, high = tf.reduce_min(values), tf.reduce_max(values)
    bad = tf.where(high >= size, high, low)
    return tf.debugging.Assert((low >= 0) & (high < size), [message, bad])


def token_ids_in_step(name, ids, vocab_size, layer, training=None):
    """`ids`, checked inside a compiled step (where Python cannot see their values) as far as the backend allows.

    A user's own model gets no check before its step, as the ready models do in `fit`. Unchecked, an id >=
    vocab_size is a "Graph execution error" about a GatherV2 node on TensorFlow, and a NaN loss on JAX. So:

    * TensorFlow: an assertion in the graph. The error is still TensorFlow's InvalidArgumentError, but its last
      lines are this message with the id. XLA (`jit_compile=True`) drops assertions, and its gather clamps an
      id that is too large, so under XLA nothing is caught.
    * JAX: a host callback (`jax.debug.callback`) that raises this message's ValueError, in training steps only
      (`training=True`). Training stops with a JaxRuntimeError that ends with it. `model.export` cannot serialize
      a host callback (it fails with "std::bad_cast"), so inference steps are left unchecked.
    * PyTorch runs eagerly: the values are known, and the eager check has already run.

    Skipped inside `values_checked_upstream()`: the ready models check their data before the step. A layer turns
    it off with its own switch (`TokenEmbedding(check_ids=False)`).

    Args:
        name: the argument's name in the message.
        ids: the token ids, a symbolic or traced tensor.
        vocab_size: ids must lie in [0, vocab_size).
        layer: the layer's name, said in the message.
        training: the layer's `training` argument (JAX checks only training steps).
    """
    if getattr(_checked_upstream, "depth", 0):
        return ids
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.is_tensor(ids) or tf.executing_eagerly():
            return ids
        message = f"{_ids_range(name, vocab_size, f' of layer {layer!r}')} {_IDS_HINT} Received: an id of"
        with tf.control_dependencies([tf_assert_in_range(ids, vocab_size, message)]):
            return tf.identity(ids)
    if backend == "jax":
        import jax

        if not isinstance(ids, jax.core.Tracer) or not training:
            return ids

        def check_on_host(values):
            token_ids(name, np.asarray(values), vocab_size, where=f" of layer {layer!r}")

        jax.debug.callback(check_on_host, ids)
    return ids


def class_labels(name, values, num_classes):
    """Checks concrete class labels (sparse, one integer per example): integers in [0, num_classes)."""
    bad = _outside(name, values, num_classes, "class labels", "Give one integer class per example (or one-hot rows).")
    if bad is not None:
        raise ValueError(
            f"Labels in `{name}` must lie in [0, num_classes) = [0, {num_classes}). Received: a label of "
            f"{bad}. Check the data's classes against the model's `num_classes`."
        )


def is_shape_placeholder(x):
    """True for the stand-in tensors PyTorch's symbolic shape inference runs a layer on: they live on the "meta"
    device, and unknown dimensions are filled with an arbitrary size, so their sizes must not be checked."""
    device = getattr(x, "device", None)
    return getattr(device, "type", None) == "meta"
