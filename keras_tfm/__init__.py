"""keras_tfm: Transformer building blocks on Keras 3, written to be read.

    import keras_tfm
    block = keras_tfm.EncoderBlock(num_heads=4, mlp_dim=256)
    model = keras_tfm.load_model("runs/reverse_digits/<timestamp>")  # a saved model, or a run's folder

`import keras_tfm` itself imports neither Keras nor TensorFlow: each part (`keras_tfm.layers`, `keras_tfm.models`,
...) is imported the first time it is used (PEP 562's module `__getattr__`), so a program that only reads plain
data, such as `keras_tfm.presets` (the recipes offer their `--preset` choices before TensorFlow loads), pays
nothing for the rest. A program that has imported Keras already gets every part that registers a class at once
(they cost it little more), and a program that imports Keras later gets them right after Keras loads (or, when
one of our modules imported it, right after that module), so `keras.saving.load_model` finds our classes whatever
the order of `import keras` and `import keras_tfm`, as with keras_hub (keras_tfm/_register.py).

Example:

>>> import keras_tfm
>>> sorted(keras_tfm.presets.SEQ2SEQ_PRESETS)
['base', 'small', 'tiny']
>>> keras_tfm.EncoderBlock.__name__  # the first use of a layer imports keras_tfm.layers, and Keras with it
'EncoderBlock'
"""

import ast
import importlib
import pathlib

from keras_tfm import _moved, _register

__version__ = "0.2.0"

_HERE = pathlib.Path(__file__).parent

# The package's parts (its modules and subpackages, as the folder holds them), each imported when first used:
# `keras_tfm.models`, `from keras_tfm import text`.
_PARTS = tuple(sorted(path.stem for path in _HERE.iterdir() if not path.name.startswith("_") and (
    path.suffix == ".py" or (path / "__init__.py").is_file())))


def _public_names(part):
    """The `__all__` list of `keras_tfm/<part>/__init__.py`, read from its source: importing the part to ask it
    would import Keras.

    Args:
        part: a subpackage of keras_tfm ("layers", "models").

    Returns:
        The names, in their order.

    Example:

    >>> "EncoderBlock" in _public_names("layers")
    True
    """
    path = _HERE / part / "__init__.py"
    for statement in ast.parse(path.read_text(), str(path)).body:
        if isinstance(statement, ast.Assign) and [getattr(t, "id", None) for t in statement.targets] == ["__all__"]:
            return list(ast.literal_eval(statement.value))
    raise ImportError(f"{path} must set `__all__` to a list of names (keras_tfm reads it without importing it)")


# Every name `from keras_tfm import X` offers besides the parts, and the part that defines it.
_DEFINED_IN = {
    "AttentionMap": "insight.attention_probe",
    "AttentionMaps": "insight.attention_probe",
    "attention_maps": "insight.attention_probe",
    "load_model": "saving",
    "TextClassifierPipeline": "text",
    "Translator": "text",
    **{name: "layers" for name in _public_names("layers")},
    **{name: "models" for name in _public_names("models")},
}

# What `from keras_tfm import *` binds: the names above and the parts a user works with. The others stay out (a
# `data` or `saving` name would shadow the user's own; `distribute` imports TensorFlow, which a JAX user may lack).
__all__ = [*_DEFINED_IN, "callbacks", "hardware", "insight", "layers", "metrics", "models", "presets", "schedules",
           "text"]


def __getattr__(name):
    """`keras_tfm.<name>`, imported on first use: a part, or a name one of the parts defines.

    Args:
        name: the attribute asked for.

    Returns:
        The part (a module), or the class or function of that name.

    Raises:
        AttributeError: neither a part nor a name of `__all__`.

    Example:

    >>> keras_tfm.schedules.__name__  # doctest: +SKIP
    'keras_tfm.schedules'
    """
    if name in _PARTS:
        return importlib.import_module(f"keras_tfm.{name}")  # the import also sets it as an attribute here
    if name in _DEFINED_IN:
        value = getattr(importlib.import_module(f"keras_tfm.{_DEFINED_IN[name]}"), name)
        globals()[name] = value  # the next look-up finds it without calling this function
        return value
    if f"keras_tfm.{name}" in _moved.MOVED:  # `keras_tfm.visualize`: warns, gives keras_tfm.insight.visualize
        return importlib.import_module(f"keras_tfm.{name}")
    raise AttributeError(f"module 'keras_tfm' has no attribute {name!r}")


def __dir__():
    """What `dir(keras_tfm)` lists: the parts and every name of `__all__`, imported or not yet."""
    return sorted({*globals(), *__all__, *_PARTS})


# Register our classes for `keras.saving.load_model`: now if Keras is loaded, else as soon as it is (_register.py).
_register.install()
# The names of the modules 0.2.0 moved into keras_tfm.insight still import, until 0.3; first in `sys.meta_path`.
_moved.install()
