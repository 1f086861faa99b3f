"""Data checks: token ids and class labels checked before a compiled step sees them, for any Keras model.

Inside a compiled step a bad value cannot raise a clear error: an id >= vocab_size is a gather error buried in a
"Graph execution error" on TensorFlow, or a NaN loss on JAX; a label >= num_classes the same. So the values are
checked where the data comes in, by one object that knows what to check:

    checks = keras_tfm.checks.DataChecks(inputs=20_000, labels=2)  # x: ids < 20,000; y: class labels < 2
    checks(x, y)                                   # arrays: checked now, once, on the host
    with checks:                                   # a failure in the pipeline comes out as the eager error
        model.fit(checks.pipeline(dataset))        # tf.data, a generator or a PyDataset: batch by batch

The ready models (`TextClassifier`, `TransformerLM`, `Seq2SeqTransformer`, `ViT`, ...) carry their own
(`model.data_checks`) and apply it in `fit`, `evaluate`, `predict` and eager calls, as keras-hub's tasks apply
their preprocessor. A model without such checks still has a net: `TokenEmbedding` checks its ids inside the step
where the backend can (`token_ids_in_step`).

The messages are the same wherever a value is caught:

    Token ids in `x` must lie in [0, vocab_size) = [0, 30). Received: an id of 30. Check the tokenizer's ...
    Labels in `y` must lie in [0, num_classes) = [0, 3). Received: a label of 3. Check the data's classes ...
    `x` must hold integer token ids. Received dtype float32 with the non-integer value 2.5. ...
"""

import types

import keras
import numpy as np


_IDS_HINT = "Check the tokenizer's vocabulary size against the model's `vocab_size`."


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
                + (f" with the non-integer value {example[0]!s}" if example.size else "") + f". {hint}"
            )
    low, high = values.min(), values.max()
    if high >= size:
        return int(high)
    return int(low) if low < 0 else None


def _ids_range(name, vocab_size, where=""):
    return f"Token ids in `{name}`{where} must lie in [0, vocab_size) = [0, {vocab_size})."


def token_ids(name, values, vocab_size, where=""):
    """Checks token ids held in NumPy (or anything `np.asarray` reads): integers in [0, vocab_size).

    Args:
        name: the argument's name in the message.
        values: the ids, any shape.
        vocab_size: ids must lie in [0, vocab_size).
        where: said after the name (" of layer 'token_embedding'").

    Raises:
        ValueError: an id outside the range (the message gives the largest, or the smallest if none is too large).
        TypeError: ids that are not whole numbers (5.7; 5.0 is accepted).
    """
    bad = _outside(name, values, vocab_size, "token ids", "Tokenize to ints (and give keras.Input dtype='int32').")
    if bad is not None:
        raise ValueError(f"{_ids_range(name, vocab_size, where)} Received: an id of {bad}. {_IDS_HINT}")


def class_labels(name, values, num_classes):
    """Checks sparse class labels (one integer per example): integers in [0, num_classes). Raises as
    `token_ids` does."""
    bad = _outside(name, values, num_classes, "class labels", "Give one integer class per example (or one-hot rows).")
    if bad is not None:
        raise ValueError(
            f"Labels in `{name}` must lie in [0, num_classes) = [0, {num_classes}). Received: a label of "
            f"{bad}. Check the data's classes against the model's `num_classes`."
        )


def concrete_value(x):
    """`x` as a NumPy array when its values are known to Python (eager execution), else None: inside
    `tf.function`, `jax.jit` or a symbolic trace the values only exist at run time, and value checks are skipped."""
    try:
        return keras.ops.convert_to_numpy(x)
    except Exception:  # symbolic tensors and tracers of every backend raise their own error types
        return None


def tf_assert_in_range(values, size, message):
    """A TensorFlow graph assertion that every value lies in [0, size). When it fails, TensorFlow's error prints
    `message`, then the value outside: the largest if it is too large, else the smallest. Both tests pass for an
    empty tensor, whose min is the dtype's largest value and max its smallest."""
    import tensorflow as tf  # only on the TensorFlow backend

    low, high = tf.reduce_min(values), tf.reduce_max(values)
    bad = tf.where(high >= size, high, low)
    return tf.debugging.Assert((low >= 0) & (high < size), [message, bad])


def token_ids_in_step(name, ids, vocab_size, layer, training=None):
    """`ids`, checked inside a compiled step (where Python cannot see their values) as far as the backend allows.

    The net under a model that does not check its data before the step (`DataChecks`). Unchecked, an id >=
    vocab_size is a "Graph execution error" about a GatherV2 node on TensorFlow, and a NaN loss on JAX. So:

    * TensorFlow: an assertion in the graph. The error is TensorFlow's InvalidArgumentError, but its last lines are
      this message with the id. XLA (`jit_compile=True`) drops assertions, and its gather clamps an id that is
      too large, so under XLA nothing is caught.
    * JAX: a host callback (`jax.debug.callback`) that raises this message's ValueError, in training steps only
      (`training=True`). Training stops with a JaxRuntimeError that ends with it. `model.export` cannot serialize
      a host callback (it fails with "std::bad_cast"), so inference steps are left unchecked.
    * PyTorch runs eagerly: the values are known, and the eager check has already run.

    Args:
        name: the argument's name in the message.
        ids: the token ids, a symbolic or traced tensor.
        vocab_size: ids must lie in [0, vocab_size).
        layer: the layer's name, said in the message.
        training: the layer's `training` argument (JAX checks only training steps).
    """
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


class DataChecks:
    """What a model's data must hold: token ids in [0, vocab_size) in its inputs, class labels or token ids in
    [0, size) in its targets. Checks arrays at once and pipelines batch by batch, on the host, with the errors of
    `token_ids` and `class_labels`.

    Args:
        inputs: the token ids in `x` and their vocabulary sizes. An int: `x` is a tensor of ids (named `x` in
            messages), or a dict whose "token_ids" entry is. A dict `{name: vocab_size}`: `x` is a tuple (the
            entries in order) or a dict (by key). None: `x` holds no ids (images).
        labels: `num_classes`: `y` holds sparse class labels. One-hot or soft labels (floats, one column per
            class: mixup, label smoothing done in the data) are not checked.
        target_ids: `vocab_size`: `y` holds token ids (a language model's or a decoder's targets).

    Call arguments (`checks(x, y=None, sample_weight=None)`):
        x, y, sample_weight: one batch or whole arrays, as `fit` takes them; `sample_weight` is not checked.

    Returns:
        `(x, y, sample_weight)` as given. Symbolic or traced tensors (inside `dataset.map`, `tf.function`, a
        compiled step) have no values yet and pass unchecked: give a pipeline to `pipeline` instead.

    Raises:
        ValueError, TypeError: the first bad value, as in the module's docstring.

    Example:

    >>> checks = DataChecks(inputs=30, labels=3)
    >>> checks(np.array([[1, 2, 29]]), np.array([2]))  # doctest: +SKIP
    >>> checks(np.array([[1, 2, 30]]))  # doctest: +SKIP
    ValueError: Token ids in `x` must lie in [0, vocab_size) = [0, 30). Received: an id of 30. ...
    """

    def __init__(self, inputs=None, labels=None, target_ids=None):
        if labels is not None and target_ids is not None:
            raise ValueError(f"`y` holds either class labels or token ids. Received: labels={labels!r}, "
                             f"target_ids={target_ids!r}")
        self.inputs, self.labels, self.target_ids = inputs, labels, target_ids
        self.failure = None  # the clear error of a pipeline's check, kept for `__exit__`

    def __repr__(self):
        return f"DataChecks(inputs={self.inputs!r}, labels={self.labels!r}, target_ids={self.target_ids!r})"

    def entries(self, x=None, y=None):
        """`(name, values, size, check)` for each tensor of `x` and `y` to check; `check` is `token_ids` or
        `class_labels`."""
        found = []
        if x is not None and self.inputs is not None:
            if isinstance(self.inputs, dict):
                if isinstance(x, (tuple, list)):  # the entries in order
                    tensors = list(x)
                elif isinstance(x, dict):  # by key
                    tensors = [x.get(name) for name in self.inputs]
                else:
                    tensors = []
                found += [(name, values, size, token_ids)
                          for (name, size), values in zip(self.inputs.items(), tensors)]
            elif isinstance(x, dict):
                found.append(("x['token_ids']", x.get("token_ids"), self.inputs, token_ids))
            elif not isinstance(x, (tuple, list)):
                found.append(("x", x, self.inputs, token_ids))
        if y is not None and self.target_ids is not None:
            found.append(("y", y, self.target_ids, token_ids))
        if y is not None and self.labels is not None and not _dense_labels(y, self.labels):
            found.append(("y", y, self.labels, class_labels))
        return [entry for entry in found if entry[1] is not None]

    def __call__(self, x, y=None, sample_weight=None):
        for name, values, size, check in self.entries(x, y):
            values = concrete_value(values)  # None while tracing a graph: nothing to see yet
            if values is not None:
                check(name, values, size)
        return x, y, sample_weight

    def pipeline(self, data):
        """`data` as `fit` takes it, with each batch checked as it is drawn: a `tf.data.Dataset` (a check mapped
        onto it, Python only on a failure), a generator or a `keras.utils.PyDataset` (checked on the host).
        Anything else (arrays) is returned as it is: check those with `checks(x, y)`.

        A failure comes out of `fit` inside the backend's error where the batches pass through TensorFlow (a
        `tf.data` pipeline; any pipeline on the TensorFlow backend, which feeds generators through `tf.data`);
        `with checks:` around the call raises the clear error in its place (the check keeps the error object;
        no message is parsed)."""
        if type(data).__module__.startswith("tensorflow") and hasattr(data, "element_spec"):
            import tensorflow as tf  # only here: the data already is a TensorFlow pipeline

            # Checked in the prefetch's background thread, beside the step (a map after the user's own `prefetch`
            # would otherwise run in the step's time), and no thread pool is added.
            return data.map(self._tf_batch).prefetch(tf.data.AUTOTUNE)
        if isinstance(data, types.GeneratorType):
            return (self._unpacked(batch) for batch in data)
        if isinstance(data, keras.utils.PyDataset):
            return _CheckedPyDataset(self, data)
        return data

    def _unpacked(self, batch):
        try:
            self(*keras.utils.unpack_x_y_sample_weight(batch))
        except (TypeError, ValueError) as error:
            self.failure = error  # for `__exit__`: TensorFlow's loop may wrap it in its own error
            raise
        return batch

    def _tf_batch(self, *element):
        import tensorflow as tf

        def checked(name, values, size, check):
            values = tf.convert_to_tensor(values)
            low, high = tf.cast(tf.reduce_min(values), "float64"), tf.cast(tf.reduce_max(values), "float64")
            good = (low >= 0) & (high < size)  # an empty batch passes: its min is +max, its max -max
            if values.dtype.is_floating:  # a float id must be a whole number (5.7 must not quietly become 5)
                good &= tf.reduce_all(tf.equal(values, tf.floor(values)))

            def on_host():  # only for a batch that failed: the eager check makes (and keeps) the clear error
                found = tf.numpy_function(lambda v: self._record(check, name, v, size), [values], values.dtype)
                return tf.ensure_shape(found, values.shape)

            return tf.cond(good, lambda: tf.identity(values), on_host)

        batch = element[0] if len(element) == 1 else element
        x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
        tensors = {id(entry[1]): checked(*entry) for entry in self.entries(x, y)}
        return tf.nest.map_structure(lambda t: tensors.get(id(t), t), batch)

    def _record(self, check, name, values, size):
        try:
            check(name, values, size)
        except (TypeError, ValueError) as error:
            self.failure = error
            raise
        return values  # not reached: the graph calls this only when the batch failed its test

    def __enter__(self):
        self.failure = None
        return self

    def __exit__(self, kind, error, traceback):
        failure, self.failure = self.failure, None
        if error is not None and failure is not None and error is not failure:
            raise failure from None  # the clear error, without the backend's traceback
        return False


def _dense_labels(y, num_classes):
    """True for one-hot or soft labels: floats, one column per class (nothing to check)."""
    shape, dtype = getattr(y, "shape", None), getattr(y, "dtype", None)
    if shape is None or dtype is None:
        return False
    floating = "float" in keras.backend.standardize_dtype(dtype)
    return floating and len(shape) >= 2 and shape[-1] == num_classes and num_classes > 1


class _CheckedPyDataset(keras.utils.PyDataset):
    """A `PyDataset` whose batches are checked as they are drawn (in its workers, when it has them)."""

    def __init__(self, checks, dataset):
        super().__init__(workers=dataset.workers, use_multiprocessing=dataset.use_multiprocessing,
                         max_queue_size=dataset.max_queue_size)
        self.checks, self.dataset = checks, dataset

    def __getitem__(self, index):
        return self.checks._unpacked(self.dataset[index])

    def __len__(self):
        return len(self.dataset)

    @property
    def num_batches(self):
        return self.dataset.num_batches

    def on_epoch_begin(self):
        self.dataset.on_epoch_begin()

    def on_epoch_end(self):
        self.dataset.on_epoch_end()

