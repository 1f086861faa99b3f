"""What the ready models share: presets, storing their arguments, `get_config`/`from_config`, and a clear
error for a misspelled keyword (`ViT(num_class=10)` must not quietly build a 1000-class model)."""

import inspect

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
