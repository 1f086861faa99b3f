"""The ready models check their token ids and labels where the data comes in, before a compiled step sees it.

Inside a compiled step a bad value cannot raise a clear error: an id >= vocab_size is a backend gather error
("indices[1,2] = 10 is not in [0, 10)") or, on JAX, a NaN loss. `CheckedInputs` runs the checks of
`keras_tfm.models._data_checks` at the four doors of a Keras model: an eager call, `fit`, `evaluate` and
`predict`. The steps themselves then read no values back to the host (`_checks.values_checked_upstream`).
"""

import contextlib

import keras

from keras_tfm import _keras_workarounds
from keras_tfm.layers import _checks
from keras_tfm.models import _data_checks


class CheckedInputs:
    """Mixin that checks a model's token ids and labels before they reach a (compiled) step.

    What is checked: what the model names in `token_inputs(x)` (`(name, values, vocab_size)` entries: integers in
    [0, vocab_size)) and `targets(y)` (`(name, values, size, kind)` entries: token ids or class labels in
    [0, size)). A float id must be a whole number: 5.7 must not quietly become 5.

    When:

    * an eager call on arrays, `model(ids)`: the arrays, before Keras casts them at the input layer;
    * `fit`, `evaluate`, `predict` on arrays: once, on the host, before the first step (also `validation_data`);
    * on a `tf.data.Dataset`, a generator or a `keras.utils.PyDataset`: every batch as it is drawn (see
      `_data_checks.checked`); a failure there comes out as the eager call's ValueError or TypeError, and on JAX
      the model keeps its last good weights (`keras_tfm._keras_workarounds.JaxStateKeeper`).

    Symbolic calls (building a graph on `keras.Input`s) are not checked: there are no values yet.

    Example:

    >>> model = TextClassifier.from_preset("tiny", vocab_size=30, max_length=8, dim=16, depth=1, num_heads=2,
    ...                                    mlp_dim=32)
    >>> model(np.full((1, 8), 30))  # doctest: +SKIP
    ValueError: Token ids in `x` must be in [0, vocab_size) = [0, 30). Received: an id of 30 ...
    """

    def token_inputs(self, x):
        """`[(name, values, vocab_size)]` for the token-id tensors in the model input `x` (none for images)."""
        return []

    def targets(self, y):
        """`[(name, values, size, kind)]` for the targets in `y` to check (kind `_data_checks.TOKEN_IDS` or
        `LABELS`); none by default."""
        return []

    def __call__(self, inputs, *args, **kwargs):
        # Eager calls on arrays: Keras would cast float ids to int32 at the input layer (5.7 -> 5) unseen.
        if not isinstance(inputs, keras.KerasTensor) and not (
            isinstance(inputs, (tuple, list)) and any(isinstance(t, keras.KerasTensor) for t in inputs)
        ):
            _data_checks.check_arrays(self, inputs)
        return super().__call__(inputs, *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        _data_checks.check_arrays(self, x, y)
        x = _data_checks.checked(self, x)
        if isinstance(validation_data, (tuple, list)) and validation_data:
            _data_checks.check_arrays(self, *validation_data[:2])
        else:
            validation_data = _data_checks.checked(self, validation_data)
        kwargs["callbacks"] = _with_jax_state_kept(self, kwargs.get("callbacks"))
        with _checks.values_checked_upstream(), _clear_data_errors(self):  # checked above: no per-step host copies
            return super().fit(x, y, *args, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        _data_checks.check_arrays(self, x, y)
        kwargs["callbacks"] = _with_jax_state_kept(self, kwargs.get("callbacks"))
        with _checks.values_checked_upstream(), _clear_data_errors(self):
            return super().evaluate(_data_checks.checked(self, x), y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        _data_checks.check_arrays(self, x)
        kwargs["callbacks"] = _with_jax_state_kept(self, kwargs.get("callbacks"))
        with _checks.values_checked_upstream(), _clear_data_errors(self):
            return super().predict(_data_checks.checked(self, x), *args, **kwargs)


@contextlib.contextmanager
def _clear_data_errors(model):
    """A failed pipeline check raised from inside Keras' loop (a TensorFlow graph error on that backend) comes out
    as the eager call's ValueError or TypeError, without the traceback through the backend. On JAX the model
    keeps its weights (see `keras_tfm._keras_workarounds.JaxStateKeeper`)."""
    try:
        yield
    except BaseException as error:
        if keras.backend.backend() == "jax":
            model.jax_state_sync()
        if isinstance(error, Exception):
            _data_checks.raise_clear_error(error)
        raise


def _with_jax_state_kept(model, callbacks):
    if keras.backend.backend() != "jax":
        return callbacks
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks  # Keras' own container: left as it is
    return [*(callbacks or []), _keras_workarounds.JaxStateKeeper()]
