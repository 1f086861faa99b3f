"""The old names of the modules that 0.2.0 moved into `keras_tfm.insight`.

`import keras_tfm.visualize` (or `from keras_tfm.visualize import plot_alignment`, `keras_tfm.visualize` after
`import keras_tfm`) still works until 0.3: it gives the very module at the new name, and a `DeprecationWarning`
that names the new one. Not a copy: a second copy of a module would hold its own classes, and `isinstance` would
fail between the two.

Example:

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     import keras_tfm.patch_grid
>>> keras_tfm.patch_grid.__name__
'keras_tfm.insight.patch_grid'
>>> str(caught[0].message)
'`keras_tfm.patch_grid` moved to `keras_tfm.insight.patch_grid` in keras_tfm 0.2.0; the old name goes in 0.3'
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

MOVED = {  # old name: new name (a package's modules move with it: keras_tfm.visualize.plots, ...)
    "keras_tfm.attention_probe": "keras_tfm.insight.attention_probe",
    "keras_tfm.attribution": "keras_tfm.insight.attribution",
    "keras_tfm.patch_grid": "keras_tfm.insight.patch_grid",
    "keras_tfm.visualize": "keras_tfm.insight.visualize",
    "keras_tfm.explorer": "keras_tfm.insight.explorer",
    "keras_tfm.callbacks.attention_maps": "keras_tfm.insight.attention_map_callback",
    "keras_tfm.callbacks.position_encoding_plot": "keras_tfm.insight.position_encoding_plot",
}


def new_name(name):
    """The name a moved module has now, or None if `name` did not move.

    >>> new_name("keras_tfm.visualize.plots")
    'keras_tfm.insight.visualize.plots'
    >>> new_name("keras_tfm.layers") is None
    True
    """
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


def _callers_stacklevel():
    """The `stacklevel` at which `warnings.warn`, called by `create_module`, names the user's `import` line: the
    first frame outside the import machinery (`importlib`, `importlib.import_module`) and keras_tfm's own import
    code. Python shows a `DeprecationWarning` by default when that line is in `__main__`."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = {os.path.join(here, name) for name in ("__init__.py", "_moved.py", "_register.py")}
    importlib_folder = os.path.dirname(os.path.abspath(importlib.__file__))

    def machinery(filename):
        return (filename.startswith("<frozen importlib") or os.path.abspath(filename) in ours
                or os.path.dirname(os.path.abspath(filename)) == importlib_folder)

    def skipped_by_warnings(filename):  # what `warnings` itself steps over without counting a level
        return "importlib" in filename and "_bootstrap" in filename

    frame, level = sys._getframe(1), 1  # create_module's frame: level 1
    while machinery(frame.f_code.co_filename):
        frame = frame.f_back
        while frame is not None and skipped_by_warnings(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            break
        level += 1
    return level


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of an old name with the module at its new name. It sits first in `sys.meta_path`: the
    finders after it would load the file a second time, as a new module, under a moved package's old name."""

    def __init__(self):
        self._spec_of = {}  # old name -> the spec of the module at its new name, from create_module to exec_module

    def find_spec(self, fullname, path=None, target=None):
        if new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = new_name(spec.name)
        warnings.warn(f"`{spec.name}` moved to `{new}` in keras_tfm 0.2.0; the old name goes in 0.3",
                      DeprecationWarning, stacklevel=_callers_stacklevel())
        module = importlib.import_module(new)
        self._spec_of[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # The import machinery has set the alias' spec on the module: give it back its own.
        module.__spec__ = self._spec_of.pop(module.__spec__.name)


def install():
    """Puts one `MovedModuleFinder` first in `sys.meta_path`, before `_register`'s finders, which would otherwise
    wrap its loader (once, however often keras_tfm is imported)."""
    installed = [finder for finder in sys.meta_path if isinstance(finder, MovedModuleFinder)]
    for finder in installed:
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, installed[0] if installed else MovedModuleFinder())
