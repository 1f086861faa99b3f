"""What the ready models share: presets, storing their arguments, `get_config`/`from_config`, and a clear
error for a misspelled keyword (`ViT(num_class=10)` must not quietly build a 1000-class model)."""

import inspect

import keras

from keras_tfm.layers import _checks
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
        for name in self.argument_names():
            setattr(self, name, arguments[name])

    # ------------------------------------------------------------------------------------------------------
    # Token ids are checked before Keras traces the step: inside the compiled graph an id >= vocab_size would
    # surface as a backend gather error ("indices[1,2] = 10 is not in [0, 10)"). In the steps themselves the
    # layers do not look at values (a device-to-host copy per step): `_checks.values_checked_upstream`.

    def token_inputs(self, x):
        """`[(name, array, vocab_size)]` for the token-id arrays in the model input `x` (none for images)."""
        return []

    def _check_token_inputs(self, x):
        if x is None or _is_dataset(x):
            return  # a tf.data pipeline or generator: its values are only seen inside the graph
        for name, values, vocab_size in self.token_inputs(x):
            if values is not None and not _is_dataset(values):
                concrete = _checks.concrete_value(values)  # None while tracing a graph
                if concrete is not None:
                    _checks.token_ids(name, concrete, vocab_size)

    def __call__(self, inputs, *args, **kwargs):
        # Eager calls on arrays: Keras would cast float ids to int32 at the input layer (5.7 -> 5) unseen.
        if not isinstance(inputs, keras.KerasTensor) and not (
            isinstance(inputs, (tuple, list)) and any(isinstance(t, keras.KerasTensor) for t in inputs)
        ):
            self._check_token_inputs(inputs)
        return super().__call__(inputs, *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        self._check_token_inputs(x)
        if isinstance(validation_data, (tuple, list)) and validation_data:
            self._check_token_inputs(validation_data[0])
        self._build_optimizer_before_tracing()
        with _checks.values_checked_upstream():  # checked above: no per-step host copies in the layers
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

    def evaluate(self, x=None, *args, **kwargs):
        self._check_token_inputs(x)
        with _checks.values_checked_upstream():
            return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self._check_token_inputs(x)
        with _checks.values_checked_upstream():
            return super().predict(x, *args, **kwargs)

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


def _is_dataset(x):
    """A data pipeline rather than arrays: a `tf.data.Dataset`, a `keras.utils.PyDataset`, a generator..."""
    return not isinstance(x, (tuple, list, dict)) and not hasattr(x, "__array__") and not hasattr(x, "shape")
