"""The ready models' named sizes (`keras_tfm.presets`, where the dicts live, Keras-free) and how a model
looks one up."""

from keras_tfm.presets import LANGUAGE_MODEL_PRESETS, SEQ2SEQ_PRESETS, TEXT_CLASSIFIER_PRESETS, VIT_PRESETS

__all__ = ["LANGUAGE_MODEL_PRESETS", "SEQ2SEQ_PRESETS", "TEXT_CLASSIFIER_PRESETS", "VIT_PRESETS", "resolve_preset"]


def resolve_preset(presets, name, kind, overrides):
    """The preset's arguments updated with `overrides`; a clear error for an unknown name."""
    if name not in presets:
        raise ValueError(f"Unknown {kind} preset {name!r}. Available presets: {sorted(presets)}")
    return {**presets[name], **overrides}
