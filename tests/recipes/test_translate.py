import json
import os
import re

import keras
import numpy as np
import pytest

from keras_tfm.data import translation
from keras_tfm.text import Translator, corpus_bleu
from keras_tfm.schedules import InverseSquareRootWarmup
from recipes import fitting, translate
from recipes.common import read_history
from tests.data.samples import make_corpus, write_multi30k_folder
from tests.helpers import epochs_in
from tests.recipes.saved_models import KeepModel


class SnapshotsAtTheEnd(keras.callbacks.Callback):
    """The files in `folder` when training ends (the averaging snapshots, before the recipe cleans up)."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def on_train_end(self, logs=None):
        self.files = sorted(os.listdir(self.folder))


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    return folder, write_multi30k_folder(folder)


def test_a_resumed_run_reuses_its_saved_tokenizers(tmp_path):
    source, target = make_corpus(200, seed=1)
    args = translate.parse_args(["--vocab-size", "300"])
    first = translate.tokenizers(args, source, target, str(tmp_path))
    assert first[0] is first[1]  # one shared vocabulary
    other_text = ["Completely different words here."] * 50
    again = translate.tokenizers(args, other_text, other_text, str(tmp_path))  # read back, not learned anew
    assert again[0] == first[0] and again[1] == first[1]
    separate = translate.tokenizers(translate.parse_args(["--vocab-size", "300", "--separate-vocab"]), source, target,
                                    str(tmp_path / "separate"))
    pieces = [{t.id_to_piece(i) for i in range(t.vocab_size)} for t in separate]
    assert "ä" in pieces[1] and "ä" not in pieces[0]  # each language has its own vocabulary ("schläft")


def test_schedule_flag_picks_the_learning_rate_schedule():
    assert translate.learning_rate_schedule(translate.parse_args([]), 1000) is None  # fitting.adamw's cosine
    args = translate.parse_args(["--schedule", "inverse_sqrt", "--learning-rate", "2e-3", "--warmup-fraction", "0.04"])
    schedule = translate.learning_rate_schedule(args, 1000)
    assert isinstance(schedule, InverseSquareRootWarmup) and schedule.get_config() == {"peak": 2e-3, "warmup_steps": 40}
    optimizer = fitting.adamw(args, 1000, schedule=schedule)
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == pytest.approx(2e-3 / 40)  # update 1 of 40


@pytest.mark.parametrize("flags", [[], ["--tokens-per-batch", "96"]])
def test_the_schedule_is_planned_for_the_batches_an_epoch_has(flags):
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 30, 200)
    source = np.array([[5] * n + [0] * (32 - n) for n in lengths])
    target = np.array([[1] + [6] * (n - 1) + [2] + [0] * (32 - n - 1) for n in lengths[::-1]])
    args = translate.parse_args(["--batch-size", "16", *flags])
    dataset, per_epoch = translate.training_batches(args, source, target)
    sizes = [len(x) for (x, _), _ in dataset]
    assert per_epoch == len(sizes) and sum(sizes) == 200
    if flags:  # batches counted in tokens: of 3 to 12 pairs (96 tokens of the longer side), and more of them
        assert max(sizes) == 12 and min(sizes) <= 3 and per_epoch > 13
    else:
        assert sizes == [16] * 12 + [8]


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_run_writes_every_promised_file(corpus_files, tmp_path, capsys, loads_without_recipes):
    folder, _ = corpus_files
    keep, snapshots = KeepModel(), SnapshotsAtTheEnd(tmp_path / "averaging" / "last")
    summary = translate.main(["--quick", "--data-dir", str(folder), "--output-dir", str(tmp_path)],
                             extra_callbacks=[keep, snapshots])
    loads_without_recipes(tmp_path / "model.keras", keep.trained)  # where only keras_tfm is installed
    assert epochs_in(tmp_path) == [0, 1]
    for name in ("model.keras", "history.csv", "curves.png", "summary.json", "translations.txt",
                 "alignment_0.png", "translator/translator.json", "translator/source.model"):
        assert os.path.getsize(tmp_path / name) > 0, name
    assert any(name.endswith("_alignment_0.png") for name in os.listdir(tmp_path / "attention"))
    assert '"epochs":["0","1","2"]' in (tmp_path / "attention" / "attention.html").read_text(encoding="utf-8")
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["metrics"] == summary["metrics"] and saved["metrics"]["test_sentences"] == 16
    assert "tok:13a" in saved["bleu_signature"]
    # The reported BLEU is the written translations' against their references.
    blocks = (tmp_path / "translations.txt").read_text(encoding="utf-8").strip().split("\n\n")
    rows = [dict(line.split(":", 1) for line in block.splitlines()[1:]) for block in blocks]
    assert len(rows) == 16
    for kind in ("greedy", "beam"):
        score, _ = corpus_bleu([row[kind].strip() for row in rows], [row["reference"].strip() for row in rows])
        assert saved["metrics"][f"bleu_{kind}"] == pytest.approx(score)
    # The model is chosen on the validation set: val_bleu in every epoch's row, the last 2 epochs averaged, and
    # the average kept unless the best epoch's val_bleu beats it.
    history = read_history(str(tmp_path))
    assert len(history["val_bleu"]) == 2
    chosen = saved["weights_chosen"]
    assert chosen["averaged_epochs"] == [1, 2] and chosen["best_epoch"] in (1, 2)
    assert chosen["val_bleu_best_epoch"] == max(history["val_bleu"])
    assert chosen["chosen"] == ("average" if chosen["val_bleu_average"] >= max(history["val_bleu"])
                                else f"epoch {chosen['best_epoch']}")
    # The epochs' weights were on disk while training (a resumed run averages them too), and are gone once
    # model.keras is saved: a finished run keeps one model.
    assert snapshots.files == ["epoch_001.npz", "epoch_002.npz", "snapshots.json"]
    assert not (tmp_path / "averaging").exists() and not (tmp_path / "checkpoint.keras").exists()
    translations = (tmp_path / "translations.txt").read_text(encoding="utf-8")
    assert translations.count("reference: ") == 16 and translations.count("beam:      ") == 16
    # The saved translator reproduces the run's greedy translations from raw strings.
    test_source = translation.read_lines(str(folder / "test_2016_flickr.en"))[:3]
    greedy_lines = [line.removeprefix("greedy:    ") for line in translations.splitlines() if line.startswith("greedy:")]
    translator = Translator.load(str(tmp_path / "translator"))
    assert translator.generate(test_source) == greedy_lines[:3]
    # --translate RUN_DIR: the run's beam translations of new sentences, nothing trained.
    beam = translator.generate(test_source[:2], strategy="beam", num_beams=2)
    assert translate.main(["--translate", str(tmp_path), *test_source[:2], "--num-beams", "2"]) == {"translations": beam}
    out = capsys.readouterr().out
    assert f"{test_source[0]}\n  -> {beam[0]}" in out
    # The start's count of validation pairs and the BLEU lines' count of sentences agree: BLEU translates every
    # validation sentence, the loss only the pairs that fit in max_length.
    scored = {int(n) for n in re.findall(r"val_bleu [\d.]+ \(greedy, (\d+) sentences", out)}
    fitting, of = re.search(r"training pairs \(.*?\), (\d+)(?: of the (\d+))? validation", out).groups()
    assert scored == {int(of or fitting)} and int(fitting) <= int(of or fitting)


def test_translate_on_a_folder_without_a_translator_says_where_it_looks(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--translate", str(tmp_path), "A dog."])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "has no translator.json" in message and "RUN_DIR/translator" in message


def test_file_flags_load_the_splits_they_name(corpus_files):
    _, paths = corpus_files
    args = translate.parse_args(["--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
                                 "--test-src", paths["test"][0], "--test-tgt", paths["test"][1]])
    corpus = translate.load_corpus(args)
    assert sorted(corpus) == ["test", "train"] and len(corpus["test"][0]) == 20
    args = translate.parse_args(["--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
                                 "--valid-src", paths["validation"][0]])
    with pytest.raises(SystemExit, match="--valid-src and --valid-tgt go together"):
        translate.load_corpus(args)


def test_missing_data_gives_the_offline_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "no train file for language 'en'" in message and "--train-src" in message and "--tfds NAME" in message


@pytest.mark.parametrize("flags", [["--epochs", "0"], ["--preset", "huge"], ["--tokenizer", "wordpiece"],
                                   ["--tokens-per-batch", "500", "--distribute", "mirrored"],
                                   ["--max-length", "2"], ["--train-src", "a.txt"],
                                   ["--data-dir", "x", "--tfds", "ted_hrlr_translate/pt_to_en"]])
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate.main(flags)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_tfds_without_a_network_answers_at_once(network_unreachable, tmp_path, capsys):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--tfds", "ted_hrlr_translate/pt_to_en", "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "cannot connect to" in message and "--tfds-dir FOLDER" in message
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []
