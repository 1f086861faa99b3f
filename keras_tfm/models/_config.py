"""A ready model's configuration: its constructor's arguments kept, `get_config`/`from_config`, and `from_preset`
(the named sizes of `keras_tfm.presets`).

A model's constructor builds its graph from keyword arguments. This mixin keeps those arguments: each is an
attribute of the same name, `get_config` returns exactly them (keras-hub's habit), and `from_preset` fills them
in from a named size. A misspelled keyword is a TypeError naming the closest valid one (`ViT(num_class=10)` must
not quietly build a 1000-class model); a renamed one still works for a release, with a FutureWarning
(`_checks.renamed`).
"""

import inspect

from keras_tfm.layers import _checks
from keras_tfm.presets import resolve_preset


class PresetMixin:
    """Presets and configuration for a functional `keras.Model` subclass whose constructor builds the graph.

    A subclass sets `PRESETS` (a dict of named sizes), calls `check_keywords(kwargs)` before building and
    `store_arguments(locals())` after `super().__init__`; every constructor argument is then an attribute of the
    same name and `get_config` returns exactly those arguments (plus `name`, `trainable` and `dtype` from Keras).

    Example:

    >>> class Tiny(PresetMixin, keras.Model):
    ...     PRESETS = {"small": dict(width=4)}
    ...     def __init__(self, width=8, **kwargs):
    ...         self.check_keywords(kwargs)
    ...         inputs = keras.Input((3,))
    ...         super().__init__(inputs, keras.layers.Dense(width)(inputs), **kwargs)
    ...         self.store_arguments(locals())
    >>> Tiny.from_preset("small").get_config()["width"]
    4
    """

    PRESETS = {}
    RENAMED_ARGUMENTS = {}  # old name -> new name: keywords `check_keywords` accepts for one release

    @classmethod
    def argument_names(cls):
        """The constructor's own argument names, in order (what `get_config` returns besides Keras' own)."""
        return [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")]

    @classmethod
    def check_keywords(cls, kwargs):
        """A TypeError for a keyword in `kwargs` the model does not take, naming the closest valid one."""
        _checks.known_keywords(cls, kwargs, _checks.MODEL_KEYWORDS | set(cls.RENAMED_ARGUMENTS))

    def store_arguments(self, arguments):
        """Keeps every constructor argument (from the constructor's `locals()`) as an attribute of that name."""
        _checks.booleans(type(self), arguments)  # `norm_first="yes"` is an error, not True
        for name in self.argument_names():
            setattr(self, name, arguments[name])

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """A model of a named size (`PRESETS`); keyword arguments override the preset's.

        Args:
            preset: a key of `PRESETS`.
            **kwargs: constructor arguments, winning over the preset's.

        Returns:
            The new model.
        """
        return cls(**resolve_preset(cls.PRESETS, preset, cls.__name__, kwargs))

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype
        config.update({name: getattr(self, name) for name in self.argument_names()})
        # The model is rebuilt from its arguments, not from its layers' configs: layers frozen for fine-tuning
        # (`freeze_lower_blocks`) are named here, or a loaded model would train them (and its saved optimizer,
        # which has no slots for them, would not load).
        frozen = [layer.name for layer in self.layers if not layer.trainable]
        if frozen:
            config["frozen_layers"] = frozen
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        frozen = config.pop("frozen_layers", ())
        return freeze_layers(cls(**config), frozen)


def freeze_layers(model, names):
    """Sets `trainable=False` on `model`'s layers of these names (a config's "frozen_layers"); returns the model."""
    for name in names:
        model.get_layer(name).trainable = False
    return model
