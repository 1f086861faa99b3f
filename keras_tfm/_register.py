"""Registers every keras_tfm class with Keras as soon as both are loaded, whatever the order of the imports.

`keras.saving.load_model` finds a class of ours only once the module that defines it has run, and `import
keras_tfm` imports no Keras (each part is imported when first used). So the registration (importing
`keras_tfm.saving`, which imports every part that registers a class) happens:

* at `import keras_tfm`, if Keras is loaded already;
* right after `import keras`, if keras_tfm came first (`_RegisterOnceKerasLoads`);
* but when it is one of our own modules that imports Keras (`from keras_tfm.layers import EncoderBlock` as a
  program's first import), only once that outermost keras_tfm import has finished: registering in the middle of
  it would import modules that need the half-run one, and fail (`_CountOurImports`).
"""

import importlib
import importlib.abc
import sys
import warnings

_state = {"depth": 0, "pending": False}  # keras_tfm modules running now, nested; registration waiting for them


def register():
    """Imports `keras_tfm.saving` (every class a saved model may name), or says why it could not."""
    _state["pending"] = False
    try:
        importlib.import_module("keras_tfm.saving")
    except Exception as error:  # Keras itself loaded: let the user's import succeed, and say what failed
        warnings.warn(f"keras_tfm could not register its classes with Keras: {error!r}. "
                      "`import keras_tfm.saving` shows the whole error.", ImportWarning, stacklevel=2)


def _spec_run_through(skip, fullname, path, target, run):
    """The spec the finders after ours in `sys.meta_path` give for `fullname` (Python's own, or an editable
    install's), with its loader running the module as `run(exec_module, module)`: the loader's own `exec_module`
    plus what we do around it. Only this spec's loader object changes."""
    spec = None
    for finder in list(sys.meta_path):
        if not isinstance(finder, skip) and hasattr(finder, "find_spec"):
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
    exec_module = spec.loader.exec_module
    spec.loader.exec_module = lambda module: run(exec_module, module)
    return spec


class _RegisterOnceKerasLoads(importlib.abc.MetaPathFinder):
    """Registers our classes right after `keras` itself is imported (or, when one of our modules imported it,
    once that module has finished). It wraps the loader Python's own finders choose for `keras`, and removes itself
    at its first use."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)  # once: the look-up below must not come back here
        return _spec_run_through((), fullname, path, target, self._run_keras)

    @staticmethod
    def _run_keras(exec_module, module):
        exec_module(module)
        if _state["depth"]:
            _state["pending"] = True  # `_CountOurImports` registers when our outermost import ends
        else:
            register()


class _CountOurImports(importlib.abc.MetaPathFinder):
    """Counts the keras_tfm modules being imported, nested, and registers a waiting registration when the outermost
    one ends. It wraps the loader the other finders choose for each `keras_tfm.*` module."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("keras_tfm."):
            return None
        return _spec_run_through(_CountOurImports, fullname, path, target, self._run_ours)

    @staticmethod
    def _run_ours(exec_module, module):
        _state["depth"] += 1
        try:
            exec_module(module)
        finally:
            _state["depth"] -= 1
        if not _state["depth"] and _state["pending"]:
            register()


def install():
    """At `import keras_tfm`: register now if Keras is loaded, else as soon as it is (once, however often keras_tfm
    is imported)."""
    if "keras" in sys.modules:
        register()
        return
    for finder in (_CountOurImports, _RegisterOnceKerasLoads):
        if not any(isinstance(installed, finder) for installed in sys.meta_path):
            sys.meta_path.insert(0, finder())
