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

# Each part of keras_tfm and the parts it may import. "insight" = attention_probe, explorer, visualize, callbacks.
ALLOWED = {
    "layers": {"layers"},
    "metrics": set(),
    "models": {"layers", "metrics", "models", "presets", "_keras_workarounds"},
    "attention_probe": {"layers"},
    "attribution": {"layers"},  # occlusion: runs the model; finds its PatchEmbedding
    "explorer": {"explorer", "attention_probe", "patch_grid"},  # the package's parts; the records; infer_grid
    "visualize": {"visualize", "explorer", "patch_grid"},
    "patch_grid": set(),
    "callbacks": {"callbacks", "layers", "attention_probe", "attribution", "visualize", "explorer",
                  "_keras_workarounds"},
    "text": {"layers", "models", "attention_probe", "text", "data", "presets"},  # data: word_ids (the pipeline's words)
    "data": {"data"},
    "schedules": set(),
    "_keras_workarounds": set(),  # every use of a Keras private name: Keras only
    "presets": set(),  # plain dicts: the recipes read them before Keras loads
    "distribute": set(),
    "hardware": set(),  # thread pools and the precision to train in: imports a backend only to measure it
    "saving": {"layers", "metrics", "models", "callbacks", "text", "schedules"},  # registers all a file may name
    "__init__": {"layers", "metrics", "models", "attention_probe", "visualize", "callbacks", "text", "data",
                 "schedules", "saving"},
}
NEVER_AT_IMPORT_TIME = {"matplotlib", "argparse", "recipes", "IPython"}


def _part(path):
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


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
                if module == "keras_tfm":  # `from keras_tfm import visualize` names a part
                    found.extend((f"keras_tfm.{alias.name}", not in_function) for alias in child.names)
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
            target = module.split(".")[1]
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
    assert {f"keras_tfm/{path.name}/" for path in PACKAGE.iterdir()
            if path.is_dir() and (path / "__init__.py").exists()} | {"keras_tfm/"} == folders
