"""docs/learning_path.md maps the article our users learn from onto keras_tfm; everything it names must exist.

Every `code span` in the map is one of four kinds, and each is checked:
- a file (`keras_tfm/layers/attention.py`, `docs/attention_by_hand.md`): it exists in the repository;
- a name (`keras_tfm.insight.visualize.plot_alignment`, `recipes.experiments.residual`): it imports;
- a test (`tests/layers/test_attention.py::test_bad_arguments`, a `[param]` allowed): the file defines it;
- a command (`python -m recipes.NAME --flags`): the recipe's parser accepts the flags.
A span of any other form fails the test, so nothing in the map goes unchecked.
"""

import importlib
import pathlib
import re
import shlex

import pytest

pytestmark = pytest.mark.tensorflow_only(reason="the docs' links and figures: no backend code")

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAP = (ROOT / "docs" / "learning_path.md").read_text(encoding="utf-8")
SPANS = sorted(set(re.findall(r"`([^`\n]+)`", MAP)))

FILE = re.compile(r"^[\w./-]+\.(py|md|png|txt|ipynb)$")
NAME = re.compile(r"^(keras_tfm|recipes)(\.\w+)+$")
TEST = re.compile(r"^(tests/[\w/]+\.py)::(\w+)(\[[\w.-]+\])?$")
COMMAND = re.compile(r"^python -m recipes\.(\w+)(\s.*)?$")
KINDS = {"file": FILE, "name": NAME, "test": TEST, "command": COMMAND}


def _kind(span):
    return next((kind for kind, pattern in KINDS.items() if pattern.match(span)), None)


def _rows(section):
    """The table rows of one `## ` section of the map, as lists of cells."""
    text = MAP.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("|---")][1:]  # without the header


def test_every_code_span_is_a_file_name_test_or_command():
    unknown = [span for span in SPANS if _kind(span) is None]
    assert not unknown, f"spans the test cannot check (write them as plain text): {unknown}"


@pytest.mark.parametrize("path", [s for s in SPANS if _kind(s) == "file"])
def test_named_files_exist(path):
    assert (ROOT / path).is_file(), path


@pytest.mark.parametrize("name", [s for s in SPANS if _kind(s) == "name"])
def test_named_functions_and_classes_import(name):
    parts = name.split(".")
    for split in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            target = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            target = getattr(target, attribute)  # AttributeError names what is missing
        return
    pytest.fail(f"nothing of {name} imports")


@pytest.mark.parametrize("test_id", [s for s in SPANS if _kind(s) == "test"])
def test_named_tests_exist(test_id):
    path, function, _ = TEST.match(test_id).groups()
    source = (ROOT / path).read_text(encoding="utf-8")
    assert re.search(rf"^def {function}\(", source, flags=re.M), f"{path} has no test {function}"


@pytest.mark.parametrize("command", [s for s in SPANS if _kind(s) == "command"])
def test_named_commands_parse(command):
    recipe, rest = COMMAND.match(command).groups()
    module = importlib.import_module(f"recipes.{recipe}")
    module.parse_args(shlex.split(rest or ""))  # argparse exits (status 2) on an unknown flag or value


def test_every_part_of_the_article_has_a_row_with_code_a_test_and_a_command():
    path = _rows("The path")
    assert [row[0] for row in path] == ["4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "5.1", "5.2", "5.3", "5.4", "5.5",
                                        "6.1", "6.2", "6.3"]
    questions, pitfalls = _rows("Self-check questions"), _rows("Pitfalls")
    assert [row[0] for row in questions] == ["4.1", "4.2", "4.2", "4.3", "4.3", "4.4", "4.4", "4.5"]
    assert len(pitfalls) == 6
    for row in path + questions + pitfalls:
        spans = [_kind(span) for span in re.findall(r"`([^`\n]+)`", " | ".join(row))]
        assert {"test", "command"} <= set(spans) and {"file", "name"} & set(spans), row[:2]


def test_the_preset_depths_quoted_are_the_codes():
    from keras_tfm.presets import SEQ2SEQ_PRESETS

    quoted = re.findall(r"\b(tiny|small|base) (\d+)\+(\d+)", MAP)
    assert {name for name, _, _ in quoted} == {"tiny", "small", "base"}
    for name, encoder, decoder in quoted:
        preset = SEQ2SEQ_PRESETS[name]
        assert (int(encoder), int(decoder)) == (preset["encoder_depth"], preset["decoder_depth"]), name


def test_every_row_that_names_a_picture_shows_one_and_every_picture_shown_exists():
    shown = re.findall(r'<img src="([^"]+)"', MAP)
    assert len(set(shown)) >= 7
    for path in shown:
        assert (ROOT / "docs" / path).is_file(), path
    for section in ("The path", "Self-check questions", "Pitfalls"):
        for row in _rows(section):
            names_a_picture = any(re.search(r"\b\w+\.png\b", cell) for cell in row[1:] if "<img" not in cell)
            if names_a_picture:
                assert "<img " in " | ".join(row), row[:2]


def test_every_item_of_the_shorter_article_has_a_row_and_every_pitfall_a_measured_answer():
    rows = _rows("The shorter article: a minimal Transformer after 3blue1brown")
    items = [row[0] for row in rows]
    assert len(items) == 11 and sum(item.startswith("pitfall:") for item in items) == 3
    assert items[0].startswith("obstacle 1") and items[-1].startswith("extension: image patches")
    for row in rows:
        spans = [_kind(span) for span in re.findall(r"`([^`\n]+)`", " | ".join(row))]
        assert {"test", "command"} <= set(spans) and {"file", "name"} & set(spans), row[0]
    for row in rows:
        if row[0].startswith("pitfall:"):  # the answer quotes what the experiment measured: mean ± sd
            assert re.search(r"\d\.\d{3} ± \d\.\d{3}", row[2]), row[0]
    assert "_ANSWER" not in MAP


def test_every_three_seed_figure_quoted_is_in_a_saved_table():
    """A mean ± sd the map quotes (0.011 ± 0.012) is one the experiments wrote: a table in docs/experiments/ (the
    runs behind this page's answers, kept with their JSON and plot) or a row of results.md."""
    saved = (ROOT / "docs" / "results.md").read_text(encoding="utf-8") + "".join(
        path.read_text(encoding="utf-8") for path in (ROOT / "docs" / "experiments").glob("*.md"))
    quoted = set(re.findall(r"\d\.\d{3} ± \d\.\d{3}", MAP))
    assert len(quoted) >= 10
    assert sorted(figure for figure in quoted if figure not in saved) == []
