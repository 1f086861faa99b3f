"""The package's imports run one way: layers <- models <- (text, insight) <- recipes.

Read from the source (the AST), not from `sys.modules`: Keras itself imports matplotlib and TensorFlow imports
argparse, so only our own `import` statements say which way our code depends.
"""

import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.tensorflow_only(reason="the source's import rules: no backend code")

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_tfm"

# Each part of keras_tfm and the parts it may import. The parts of keras_tfm/insight/ ("seeing inside") count one
# by one, as "insight.<module>".
ALLOWED = {
    "checks": set(),  # the data checks: Keras and NumPy only
    "layers": {"layers", "checks", "_keras_workarounds"},  # walk: a layer's sublayers
    "metrics": set(),
    "models": {"layers", "metrics", "models", "presets", "checks", "_keras_workarounds"},
    "insight.__init__": {"insight.attention_map_callback", "insight.attention_probe", "insight.attribution",
                         "insight.explorer", "insight.patch_grid", "insight.position_encoding_plot",
                         "insight.visualize"},
    "insight.attention_probe": {"layers"},
    "insight.attribution": {"layers"},  # occlusion: runs the model; finds its PatchEmbedding
    "insight.patch_grid": set(),
    # the package's parts; the records; infer_grid
    "insight.explorer": {"insight.explorer", "insight.attention_probe", "insight.patch_grid", "files"},
    "insight.visualize": {"insight.visualize", "insight.explorer", "insight.patch_grid", "files"},
    "insight.attention_map_callback": {"layers", "insight.attention_probe", "insight.attribution",
                                       "insight.visualize", "insight.explorer"},
    "insight.position_encoding_plot": {"layers", "insight.visualize"},
    "callbacks": {"callbacks", "insight.attention_map_callback", "insight.position_encoding_plot",
                  "_keras_workarounds", "files"},
    "text": {"layers", "models", "insight.attention_probe", "text", "data", "presets", "files"},  # data: word_ids
    "data": {"data"},
    "schedules": set(),
    "_keras_workarounds": set(),  # every use of a Keras private name: Keras only
    "presets": set(),  # plain dicts: the sizes of every preset
    "distribute": set(),
    "files": set(),  # atomic writes: plain Python
    "hardware": set(),  # thread pools and the precision to train in: imports a backend only to measure it
    "saving": set(),  # `import keras_tfm` has registered every class before it runs
    "__init__": {"callbacks", "checks", "files", "hardware", "insight", "insight.attention_probe", "layers", "metrics",
                 "models", "presets", "schedules", "saving", "text"},
}
NEVER_AT_IMPORT_TIME = {"matplotlib", "argparse", "recipes", "IPython"}


def _part(path):
    """"layers" for keras_tfm/layers/attention.py, "insight.visualize" for keras_tfm/insight/visualize/images.py."""
    parts = [part.removesuffix(".py") for part in path.relative_to(PACKAGE).parts]
    return ".".join(parts[:2]) if parts[0] == "insight" else parts[0]


def _target(module):
    """The part an import of `keras_tfm.<...>` reaches, named as `_part` names it."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if parts[0] == "insight" and len(parts) > 1 else parts[0]


def _imports(tree):
    """(module name, at import time?) for every import in a module; 'at import time' = not inside a function."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, not in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    raise AssertionError("relative imports are not used in keras_tfm")
                module = child.module or ""
                if module in ("keras_tfm", "keras_tfm.insight"):  # `from keras_tfm.insight import visualize`
                    found.extend((f"{module}.{alias.name}", not in_function) for alias in child.names)
                else:
                    found.append((module, not in_function))
            visit(child, inside)

    visit(tree, False)
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_is_covered():
    assert {_part(path) for path in SOURCES} <= set(ALLOWED)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_one_way(path):
    part = _part(path)
    for module, at_import_time in _imports(ast.parse(path.read_text(), str(path))):
        top = module.split(".")[0]
        if at_import_time:
            assert top not in NEVER_AT_IMPORT_TIME, f"{path.name} imports {module} at import time"
        if top == "recipes":
            raise AssertionError(f"{path.name} imports {module}: keras_tfm never depends on the recipes")
        if top == "keras_tfm" and "." in module:
            target = _target(module)
            assert target in ALLOWED[part], f"{path.name} ({part}) must not import {module}"
            assert at_import_time, f"{path.name} hides `import {module}` inside a function"


def test_the_checker_sees_a_wrong_import():
    tree = ast.parse("from keras_tfm.models import ViT\n\ndef f():\n    import matplotlib\n")
    assert _imports(tree) == [("keras_tfm.models", True), ("matplotlib", False)]


def _layout_block():
    text = (PACKAGE.parent / "docs" / "developing.md").read_text(encoding="utf-8")
    section = text[text.index("## Layout\n"):]
    return section[section.index("```") + 3: section.index("```", section.index("```") + 3)]


def test_the_layout_in_developing_md_names_every_module_and_only_modules_that_exist():
    """docs/developing.md's map of the package stays true: every module and folder of keras_tfm is named in it,
    and every `keras_tfm/...` folder it names exists."""
    block = _layout_block()
    words = set(re.findall(r"\w+", block))
    missing = sorted(str(path.relative_to(PACKAGE)) for path in SOURCES
                     if path.stem != "__init__" and path.stem not in words)
    assert missing == [], f"modules the Layout in docs/developing.md does not name: {missing}"
    folders = {line.split()[0] for line in block.splitlines() if line.startswith("keras_tfm/")}
    assert {f"keras_tfm/{path.parent.relative_to(PACKAGE).as_posix()}/" for path in PACKAGE.rglob("__init__.py")
            if path.parent != PACKAGE} | {"keras_tfm/"} == folders
