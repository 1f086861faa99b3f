"""Token ids and labels checked where the ready models' `fit`, `evaluate` and `predict` meet their data.

Inside a compiled step a bad value cannot raise a clear error: an id >= vocab_size is a TensorFlow gather error
buried in a "Graph execution error" traceback, or on JAX a silent NaN; a label >= num_classes the same. So the
values are checked before they reach the step, in the form the data comes in:

* arrays: once, on the host, before training starts (a pass over the arrays);
* a `tf.data.Dataset`: a check mapped onto every batch in the pipeline (its own threads, beside the step), whose
  failure is turned back into the eager call's error by `raise_clear_error`;
* a Python generator or a `keras.utils.PyDataset`: every batch, on the host, as it is drawn.

A model says what to check: `token_inputs(x)` gives `(name, values, vocab_size)` entries, `targets(y)`
`(name, values, size, kind)` ones, kind "token ids" or "labels" (`_checks.token_ids` / `_checks.class_labels`
make the messages).
"""

import re
import types

import keras
import numpy as np

from keras_tfm.layers import _checks

TOKEN_IDS, LABELS = "token ids", "labels"
_MARK = "keras_tfm data check"
# What a generator's or PyDataset's check raised, as TensorFlow quotes it inside its own error.
_RAISED = re.compile(r"(TypeError|ValueError): ((?:Token ids in|Labels in|`[^`\n]*` must hold integer) [^\n]*)")
_FAILED = re.compile(re.escape(_MARK) + r"\|([^|]*)\|([^|]*)\|(\d+)\|(\w+)\|[^\[]*\[([^\]]*)\]")


def check_values(name, values, size, kind):
    """The eager check of `values` (a NumPy array): integers in [0, size), or the clear error."""
    if kind == LABELS:
        _checks.class_labels(name, values, size)
    else:
        _checks.token_ids(name, values, size)


def entries(model, x, y=None):
    """`(name, values, size, kind)` for every token-id input in `x` and every target in `y` of `model`."""
    inputs = [(name, values, size, TOKEN_IDS) for name, values, size in model.token_inputs(x)] if x is not None else []
    return inputs + (list(model.targets(y)) if y is not None else [])


def class_labels(y, num_classes):
    """The `targets` entry of a classifier's `y`: sparse labels (one integer per example) are checked; one-hot or
    soft labels (floats, one column per class: mixup, label smoothing done in the data) are not."""
    if isinstance(y, (list, tuple)):
        y = np.asarray(y)
    shape, dtype = getattr(y, "shape", None), getattr(y, "dtype", None)
    if shape is None or dtype is None:
        return []
    floating = "float" in keras.backend.standardize_dtype(dtype)
    if floating and len(shape) >= 2 and shape[-1] == num_classes and num_classes > 1:
        return []
    return [("y", y, num_classes, LABELS)]


def _batch_entries(model, batch):
    x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
    return entries(model, x, y)


def check_arrays(model, x, y=None):
    """Checks in-memory inputs (and targets): the eager call's check, once, before the step is traced."""
    if x is None or is_pipeline(x):
        return
    for name, values, size, kind in entries(model, x, None if is_pipeline(y) else y):
        if values is not None and not is_pipeline(values):
            concrete = _checks.concrete_value(values)  # None while tracing a graph
            if concrete is not None:
                check_values(name, concrete, size, kind)


def checked(model, data):
    """`data` as `fit` takes it, with its token ids and labels checked: arrays now, a `tf.data.Dataset`, a
    generator or a `PyDataset` batch by batch. Returns what to give `fit` in its place."""
    if _is_tf_dataset(data):
        return _checked_tf_dataset(model, data)
    if isinstance(data, types.GeneratorType):
        return _checked_generator(model, data)
    if isinstance(data, keras.utils.PyDataset):
        return _CheckedPyDataset(model, data)
    return data


def _checked_generator(model, generator):
    for batch in generator:
        _check_batch(model, batch)
        yield batch


def _check_batch(model, batch):
    for name, values, size, kind in _batch_entries(model, batch):
        if values is not None:
            check_values(name, keras.ops.convert_to_numpy(values), size, kind)


class _CheckedPyDataset(keras.utils.PyDataset):
    """A `PyDataset` whose batches are checked as they are drawn (in its workers, when it has them)."""

    def __init__(self, model, dataset):
        super().__init__(workers=dataset.workers, use_multiprocessing=dataset.use_multiprocessing,
                         max_queue_size=dataset.max_queue_size)
        self.model, self.dataset = model, dataset

    def __getitem__(self, index):
        batch = self.dataset[index]
        _check_batch(self.model, batch)
        return batch

    def __len__(self):
        return len(self.dataset)

    @property
    def num_batches(self):
        return self.dataset.num_batches

    def on_epoch_begin(self):
        self.dataset.on_epoch_begin()

    def on_epoch_end(self):
        self.dataset.on_epoch_end()


def _is_tf_dataset(data):
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "element_spec") and hasattr(data, "map")


def _checked_tf_dataset(model, dataset):
    import tensorflow as tf  # only here: the data already is a TensorFlow pipeline

    def check(name, values, size, kind):
        # Two reductions per checked tensor (`_checks.tf_assert_in_range`; an empty batch passes).
        values = tf.convert_to_tensor(values)
        mark = f"{_MARK}|{kind}|{name}|{size}|{values.dtype.name}|"
        tests = []
        if values.dtype.is_floating:  # a float id must be a whole number (5.7 must not quietly become 5)
            whole = tf.reduce_max(tf.abs(values - tf.floor(values))) <= 0
            tests.append(tf.debugging.Assert(whole, [mark, _first_fraction(tf, values)]))
        tests.append(_checks.tf_assert_in_range(values, size, mark))
        with tf.control_dependencies(tests):
            return tf.identity(values)

    def check_element(*element):
        batch = element[0] if len(element) == 1 else element
        checked_values = {id(values): check(name, values, size, kind)
                          for name, values, size, kind in _batch_entries(model, batch) if values is not None}
        return tf.nest.map_structure(lambda t: checked_values.get(id(t), t), batch)

    # Checked one batch after the other in the prefetch's background thread: the step need not wait for the
    # check (a map after the user's own `prefetch` would otherwise undo it), and no thread pool is added.
    return dataset.map(check_element).prefetch(tf.data.AUTOTUNE)


def _first_fraction(tf, values):
    flat = tf.reshape(values, [-1])
    return tf.gather(flat, tf.argmax(tf.cast(tf.abs(flat - tf.floor(flat)) > 0, "int32")))


def raise_clear_error(error):
    """If `error` (raised by `fit`, `evaluate` or `predict`) comes from a data check, raises the eager call's
    error in its place, without the backend's traceback. Otherwise returns, and the caller re-raises `error`."""
    message = str(error)
    found = _FAILED.search(message)
    if found is not None:  # a tf.data check's assertion: the message is made again from the failing value
        kind, name, size, dtype, value = found.groups()
        try:
            check_values(name, np.array([float(value)]).astype(dtype), int(size), kind)
        except (TypeError, ValueError) as clear:
            raise clear from None
    found = _RAISED.search(message)
    if found is not None and not isinstance(error, (TypeError, ValueError)):
        # A generator's check on TensorFlow: tf.data ran the generator and wrapped its error in its own.
        raise {"TypeError": TypeError, "ValueError": ValueError}[found.group(1)](found.group(2)) from None


def is_pipeline(x):
    """A data pipeline rather than arrays: a `tf.data.Dataset`, a `keras.utils.PyDataset`, a generator..."""
    return not isinstance(x, (tuple, list, dict)) and not hasattr(x, "__array__") and not hasattr(x, "shape")
