"""What the ready models share: presets, storing their arguments, `get_config`/`from_config`, and a clear
error for a misspelled keyword (`ViT(num_class=10)` must not quietly build a 1000-class model)."""

import contextlib
import inspect

import keras

from keras_tfm.layers import _checks
from keras_tfm.metrics import MaskedSparseCategoricalCrossentropy
from keras_tfm.models import _data_checks
from keras_tfm.models.presets import resolve_preset


class PresetModel:
    """Mixin for a functional `keras.Model` subclass whose constructor builds the graph.

    A subclass sets `PRESETS` (a dict of named sizes), calls `check_keywords(kwargs)` before building and
    `store_arguments(locals())` after `super().__init__`; every constructor argument is then an attribute of the
    same name and `get_config` returns exactly those arguments (plus `name`, `trainable` and `dtype` from Keras).
    """

    PRESETS = {}

    @classmethod
    def argument_names(cls):
        return [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")]

    @classmethod
    def check_keywords(cls, kwargs):
        _checks.known_keywords(cls, kwargs, _checks.MODEL_KEYWORDS)

    def store_arguments(self, arguments):
        _checks.booleans(type(self), arguments)  # `norm_first="yes"` is an error, not True
        for name in self.argument_names():
            setattr(self, name, arguments[name])

    # ------------------------------------------------------------------------------------------------------
    # Token ids and labels are checked before they reach the step (`_data_checks`): inside the compiled graph an
    # id >= vocab_size would surface as a backend gather error ("indices[1,2] = 10 is not in [0, 10)") or, on
    # JAX, as a NaN loss. In the steps themselves the layers do not look at values (a device-to-host copy per
    # step): `_checks.values_checked_upstream`.

    def token_inputs(self, x):
        """`[(name, values, vocab_size)]` for the token-id tensors in the model input `x` (none for images)."""
        return []

    def targets(self, y):
        """`[(name, values, size, kind)]` for the targets in `y` to check (kind `_data_checks.TOKEN_IDS` or
        `LABELS`); none by default."""
        return []

    def _check_token_inputs(self, x):
        _data_checks.check_arrays(self, x)

    def __call__(self, inputs, *args, **kwargs):
        # Eager calls on arrays: Keras would cast float ids to int32 at the input layer (5.7 -> 5) unseen.
        if not isinstance(inputs, keras.KerasTensor) and not (
            isinstance(inputs, (tuple, list)) and any(isinstance(t, keras.KerasTensor) for t in inputs)
        ):
            self._check_token_inputs(inputs)
        return super().__call__(inputs, *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        _data_checks.check_arrays(self, x, y)
        x = _data_checks.checked(self, x)
        if isinstance(validation_data, (tuple, list)) and validation_data:
            _data_checks.check_arrays(self, *validation_data[:2])
        else:
            validation_data = _data_checks.checked(self, validation_data)
        self._build_optimizer_before_tracing()
        kwargs["callbacks"] = _with_jax_state_kept(self, kwargs.get("callbacks"))
        with _checks.values_checked_upstream(), _clear_data_errors(self):  # checked above: no per-step host copies
            return super().fit(x, y, *args, validation_data=validation_data, **kwargs)

    def _build_optimizer_before_tracing(self):
        """Creates the optimizer's slots (Adam's moments...) now, eagerly. On TensorFlow without a distribution
        strategy Keras leaves that to the first traced training step, and a `tf.function` that creates variables
        is traced a second time: the whole step, twice (3.4 of the 13.6 seconds of `reverse_digits --quick`).
        Under a strategy, and on JAX and PyTorch, Keras builds the optimizer before tracing itself."""
        optimizer = getattr(self, "optimizer", None)
        if keras.backend.backend() != "tensorflow" or optimizer is None or optimizer.built or not self.built:
            return
        import tensorflow as tf

        if self._distribute_strategy is None and not tf.distribute.has_strategy():
            optimizer.build(self.trainable_variables)  # what Keras' own symbolic build does under a strategy

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

    def _compile_classifier(self, optimizer, label_smoothing, weight_decay, **kwargs):
        """`compile_for_training` of the classifiers (ViT, TextClassifier): sparse labels, their cross-entropy
        (label-smoothed if asked) and accuracy; AdamW by default, weight decay skipping `no_weight_decay()`."""
        from_logits = self.activation is None  # a head with "softmax" gives probabilities
        if optimizer is None:
            optimizer = self.exclude_from_weight_decay(
                keras.optimizers.AdamW(1e-3, weight_decay=weight_decay, clipnorm=1.0))
        if label_smoothing:  # Keras' sparse cross-entropy has no label smoothing; ours does (nothing ignored)
            loss = MaskedSparseCategoricalCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing,
                                                       ignore_id=-1, name="crossentropy")
        else:
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
        self.compile(optimizer=optimizer, loss=loss, metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
                     **kwargs)

    def no_weight_decay(self):
        """Names of the variables weight decay should skip (as timm's `no_weight_decay`): biases and the layer
        norms' scales and offsets here; models add their position tables and learned tokens. Decaying a norm's
        scale towards 0 shrinks what the layer passes on, which no amount of data asks for."""
        return ["bias", "gamma", "beta"]

    def exclude_from_weight_decay(self, optimizer):
        """Tells `optimizer` (e.g. `keras.optimizers.AdamW`, before its first step) to skip the variables named by
        `no_weight_decay()`, matched by exact name, and returns it.

        Exact names, not `optimizer.exclude_from_weight_decay(var_names=...)`: that searches its patterns in the
        variable's full path on the TensorFlow backend, where "token" would also exempt `token_embedding/...`.
        """
        names = set(self.no_weight_decay())
        optimizer.exclude_from_weight_decay(var_list=[v for v in self.trainable_variables if v.name in names])
        return optimizer

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """A model of a named size (`PRESETS`); keyword arguments override the preset's."""
        return cls(**resolve_preset(cls.PRESETS, preset, cls.__name__, kwargs))

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype
        config.update({name: getattr(self, name) for name in self.argument_names()})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@contextlib.contextmanager
def _clear_data_errors(model):
    """A failed pipeline check raised from inside Keras' loop (a TensorFlow graph error on that backend) comes out
    as the eager call's ValueError or TypeError, without the traceback through the backend. On JAX the model
    keeps its weights (see `_JaxStateKeeper`)."""
    try:
        yield
    except BaseException as error:
        if keras.backend.backend() == "jax":
            model.jax_state_sync()
        if isinstance(error, Exception):
            _data_checks.raise_clear_error(error)
        raise


class _JaxStateKeeper(keras.callbacks.Callback):
    """On JAX, Keras' loops take the variables' values out of the model while they run (`_purge_model_variables`)
    and put back the latest ones at the end, or when a callback asks (`jax_state_sync`). An error in the middle,
    such as a bad batch found by a data check, would leave the model without its weights. This hands Keras the
    current values as "the latest ones" before the first step, so that `jax_state_sync` can always put back the
    last good state."""

    async_safe = True

    def _keep(self):
        model = self.model
        optimizer = getattr(model, "optimizer", None)  # none before compile (predict)
        model._jax_state = {
            "trainable_variables": [v.value for v in model.trainable_variables],
            "non_trainable_variables": [v.value for v in model.non_trainable_variables],
            "optimizer_variables": [v.value for v in optimizer.variables] if optimizer else [],
            "metrics_variables": [v.value for v in model.metrics_variables],
        }
        model._jax_state_synced = True

    def on_train_begin(self, logs=None):
        self._keep()

    def on_test_begin(self, logs=None):
        if not getattr(self.model, "_jax_state", None):  # a standalone evaluate (in fit the state is fresh)
            self._keep()

    def on_predict_begin(self, logs=None):
        if not getattr(self.model, "_jax_state", None):
            self._keep()


def _with_jax_state_kept(model, callbacks):
    if keras.backend.backend() != "jax":
        return callbacks
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks  # Keras' own container: left as it is
    return [*(callbacks or []), _JaxStateKeeper()]
