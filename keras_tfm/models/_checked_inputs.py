"""The ready models check their data where it comes in, with their `keras_tfm.checks.DataChecks`.

As keras-hub's tasks run their preprocessor on the data given to `fit`, `evaluate` and `predict`, ours run their
checks there: arrays once, before the first step; a `tf.data.Dataset`, a generator or a `PyDataset` batch by batch
(`DataChecks.pipeline`). An eager call checks the arrays before Keras casts them at the input layer (a float id
5.7 would quietly become 5). The same object is public (`model.data_checks`), for a user's own pipeline.

Inside these loops the model's `TokenEmbedding`s compile no check of their own (the data is checked already), and
an eager step (PyTorch) reads no ids back to the host.
"""

import contextlib

import keras

from keras_tfm import _keras_workarounds
from keras_tfm.checks import DataChecks
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.walk import iter_layers


class CheckedInputs:
    """Mixin that checks a model's data with its `data_checks` before a (compiled) step sees it.

    Symbolic calls (building a graph on `keras.Input`s) are not checked: there are no values yet.

    Example:

    >>> model = TextClassifier.from_preset("tiny", vocab_size=30, max_length=8, dim=16, depth=1, num_heads=2,
    ...                                    mlp_dim=32)
    >>> model.data_checks
    DataChecks(inputs=30, labels=2, target_ids=None)
    >>> model(np.full((1, 8), 30))  # doctest: +SKIP
    ValueError: Token ids in `x` must lie in [0, vocab_size) = [0, 30). Received: an id of 30 ...
    """

    @property
    def data_checks(self):
        """What this model's inputs and targets must hold (`keras_tfm.checks.DataChecks`); nothing by default."""
        return DataChecks()

    def __call__(self, inputs, *args, **kwargs):
        if not getattr(self, "_data_checked", False) and not _is_pipeline(inputs):
            self.data_checks(inputs)  # eager arrays only: symbolic and traced tensors have no values to see
        return super().__call__(inputs, *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        checks = self.data_checks
        x = _checked(checks, x, y)
        if isinstance(validation_data, (tuple, list)) and validation_data:
            _checked(checks, *validation_data[:2])
        else:
            validation_data = _checked(checks, validation_data)
        with checked_loop(self, checks):
            return super().fit(x, y, *args, validation_data=validation_data,
                               **_with_jax_state_kept(kwargs))

    def evaluate(self, x=None, y=None, *args, **kwargs):
        if getattr(self, "_data_checked", False):  # `fit`'s validation: its data is checked already
            return super().evaluate(x, y, *args, **kwargs)
        checks = self.data_checks
        x = _checked(checks, x, y)
        with checked_loop(self, checks):
            return super().evaluate(x, y, *args, **_with_jax_state_kept(kwargs))

    def predict(self, x, *args, **kwargs):
        checks = self.data_checks
        x = _checked(checks, x)
        with checked_loop(self, checks):
            return super().predict(x, *args, **_with_jax_state_kept(kwargs))


@contextlib.contextmanager
def checked_loop(model, checks=None):
    """A Keras loop of `model` on data already checked: its `TokenEmbedding`s compile no check and its eager calls
    read no ids; a pipeline's failure comes out as the clear error (`DataChecks.__exit__`), and on JAX the model
    keeps its last good weights (`keras_tfm._keras_workarounds.JaxStateKeeper`)."""
    layers = list(iter_layers(model))
    embeddings = [layer for layer in layers if isinstance(layer, TokenEmbedding) and layer.check_ids]
    models = [layer for layer in layers if isinstance(layer, CheckedInputs) and not getattr(layer, "_data_checked", 0)]
    for layer in embeddings:
        layer.check_ids = False
    for layer in models:  # the model and those nested in it (a TextClassifier's TextEncoder)
        layer._data_checked = True
    try:
        with checks or contextlib.nullcontext():
            yield
    except BaseException:
        if keras.backend.backend() == "jax" and hasattr(model, "jax_state_sync"):
            model.jax_state_sync()
        raise
    finally:
        for layer in models:
            layer._data_checked = False
        for layer in embeddings:
            layer.check_ids = True


def _is_pipeline(x):
    """A data pipeline rather than arrays: a `tf.data.Dataset`, a `keras.utils.PyDataset`, a generator..."""
    return not isinstance(x, (tuple, list, dict)) and not hasattr(x, "__array__") and not hasattr(x, "shape")


def _checked(checks, x, y=None):
    """Arrays: checked now (labels too); a pipeline: returned checked batch by batch."""
    if x is None:
        return x
    if _is_pipeline(x):
        return checks.pipeline(x)
    checks(x, None if _is_pipeline(y) else y)
    return x


def _with_jax_state_kept(kwargs):
    """A loop's keyword arguments, on JAX with `JaxStateKeeper` among the callbacks."""
    callbacks = kwargs.get("callbacks")
    if keras.backend.backend() != "jax" or isinstance(callbacks, keras.callbacks.CallbackList):
        return kwargs  # Keras' own container: left as it is
    return {**kwargs, "callbacks": [*(callbacks or []), _keras_workarounds.JaxStateKeeper()]}
