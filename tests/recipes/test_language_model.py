import json
import os

import numpy as np
import pytest

from keras_tfm.data import DataUnavailable, text_corpus
from recipes import common, language_model
from tests.helpers import Interrupt, InterruptAfterFirstEpoch, epochs_in
from tests.recipes.saved_models import KeepModel


def write_text(path, characters=30_000):
    """A generated corpus with structure to learn: words from a small list, in lines."""
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it"]
    lines, size = [], 0
    while size < characters:
        line = " ".join(rng.choice(words, size=rng.integers(3, 9))).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def test_character_vocabulary_and_windows():
    vocabulary = text_corpus.CharacterVocabulary.from_text("hello world\n")
    assert vocabulary.vocab_size == 10  # 9 distinct characters (newline included) + padding
    ids = vocabulary.encode("hello world\n")
    assert ids.min() == 1 and vocabulary.decode(ids) == "hello world\n"
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        vocabulary.encode("zebra")
    train, validation = text_corpus.split(np.arange(100))
    assert len(train) == 90 and validation[0] == 90  # file order, as nanoGPT
    x, y = text_corpus.consecutive_windows(np.arange(1, 22), 5)
    assert x.shape == (4, 5) and np.array_equal(y, x + 1)
    batch_x, batch_y = next(iter(text_corpus.random_windows(np.arange(1, 50), 8, batch_size=3, seed=1)))
    assert batch_x.shape == (3, 8) and np.array_equal(np.asarray(batch_y), np.asarray(batch_x) + 1)
    # The pictures' tick labels: one per id, none blank (a space is ␣, a newline \n).
    labels = language_model.labels_of(vocabulary)
    assert len(labels) == vocabulary.vocab_size and all(label.strip() for label in labels)
    assert [labels[i] for i in vocabulary.encode("o w\n")] == ["o", "\u2423", "w", "\\n"]


def test_a_missing_text_file_is_data_unavailable(tmp_path):
    with pytest.raises(DataUnavailable, match="--text-file PATH"):
        text_corpus.load_text(str(tmp_path / "missing.txt"))
    with pytest.raises(DataUnavailable, match="tiny_shakespeare.*nothing is downloaded into a folder you name"):
        text_corpus.load_text(data_dir=str(tmp_path / "empty_tfds"))  # a folder without the prepared data set
    with pytest.raises(SystemExit) as exit_info:
        language_model.main(["--quick", "--text-file", str(tmp_path / "missing.txt"), "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 2


def test_without_a_text_file_or_network_the_recipe_answers_at_once(network_unreachable, tmp_path, capsys):
    """One connection attempt, then the instructions (it retried tfds' download for 210 s before)."""
    with pytest.raises(SystemExit) as exit_info:
        language_model.main(["--quick", "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "cannot connect to raw.githubusercontent.com" in message and "--text-file PATH" in message
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []  # no run folder, no tensorflow-datasets folder


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_run_learns_writes_samples_and_resumes(tmp_path, loads_without_recipes):
    text_file = write_text(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    args = ["--quick", "--text-file", text_file, "--output-dir", str(run), "--prompt", "The cat"]
    with pytest.raises(Interrupt):
        language_model.main(args, extra_callbacks=[InterruptAfterFirstEpoch()])
    assert epochs_in(run) == [0]
    keep = KeepModel()
    summary = language_model.main(args, extra_callbacks=[keep])
    assert epochs_in(run) == [0, 1]  # resumed: epoch 0 was not repeated
    loads_without_recipes(run / "model.keras", keep.trained)  # where only keras_tfm is installed

    history = common.read_history(str(run))
    assert history["loss"][1] < history["loss"][0] and history["val_loss"][1] < history["val_loss"][0]
    saved = json.loads((run / "summary.json").read_text())
    loss = saved["metrics"]["validation_loss"]
    assert loss == pytest.approx(summary["metrics"]["validation_loss"])
    assert loss < np.log(saved["vocab_size"]) - 0.3  # well below guessing uniformly among the characters
    assert saved["metrics"]["validation_perplexity"] == pytest.approx(np.exp(loss), rel=1e-4)
    samples = (run / "samples.txt").read_text(encoding="utf-8")
    assert samples.startswith("--- sample 0\nThe cat")
    body = samples.split("\n", 1)[1]
    assert set(body) <= set(open(text_file, encoding="utf-8").read())  # the corpus's characters only
    for name in ("model.keras", "curves.png", "heads_block_0.png", "heads_block_1.png", "vocabulary.json"):
        assert os.path.getsize(run / name) > 0, name
    # --sample RUN_DIR: the finished run continues new prompts, as seeded as the run's own samples.
    again = language_model.main(["--sample", str(run), "The cat", "A dog", "--sample-tokens", "80", "--num-samples", "1"])
    assert len(again["samples"]) == 2 and again["samples"][0] == samples.split("--- sample 0\n", 1)[1][:-1]  # less the newline after it
    assert again["samples"][1].startswith("A dog") and len(again["samples"][1]) == len("A dog") + 80
    with pytest.raises(SystemExit) as refused:
        language_model.main(["--sample", str(run), "€uro"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit) as refused:
        language_model.main(["--sample", str(tmp_path), "The cat"])
    assert refused.value.code == 2


@pytest.mark.slow
def test_subword_tokenizer_run(tmp_path):
    text_file = write_text(tmp_path / "corpus.txt")
    summary = language_model.main(["--quick", "--no-attention-maps", "--tokenizer", "subword", "--vocab-size", "300",
                                   "--text-file", text_file, "--output-dir", str(tmp_path / "run")])
    assert os.path.getsize(tmp_path / "run" / "tokenizer.model") > 0
    assert summary["vocab_size"] == 300 and np.isfinite(summary["metrics"]["validation_loss"])
    sample = (tmp_path / "run" / "samples.txt").read_text(encoding="utf-8")
    assert sample.startswith("--- sample 0\n\n") and len(sample) > 20
