import gzip
import json
import os

import numpy as np
import pytest

from keras_tfm.data import translation
from keras_tfm.text import Translator
from recipes import translate
from tests.helpers import epochs_in

# A made-up language pair: every English word has one "German" word, and adjectives follow their noun.
WORDS = {"a": "ein", "the": "der", "big": "gross", "small": "klein", "red": "rot", "dog": "Hund", "cat": "Katze",
         "man": "Mann", "runs": "rennt", "sleeps": "schläft", "eats": "isst", "fast": "schnell"}


def make_corpus(samples, seed):
    rng = np.random.default_rng(seed)
    source, target = [], []
    for _ in range(samples):
        article, adjective, noun = rng.choice(["a", "the"]), rng.choice(["big", "small", "red"]), rng.choice(["dog", "cat", "man"])
        verb = rng.choice(["runs", "sleeps", "eats"])
        english = [article, adjective, noun, verb] + (["fast"] if rng.random() < 0.5 else [])
        german = [WORDS[article], WORDS[noun], WORDS[adjective]] + [WORDS[w] for w in english[3:]]
        source.append(" ".join(english).capitalize() + ".")
        target.append(" ".join(german).capitalize() + ".")
    return source, target


def write(path, lines):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as file:
        file.writelines(line + "\n" for line in lines)
    return str(path)


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    paths = {}
    for split, stem, samples in (("train", "train", 600), ("validation", "val", 40), ("test", "test_2016_flickr", 20)):
        source, target = make_corpus(samples, seed=len(stem))
        suffix = ".gz" if split == "train" else ""  # both kinds of file
        paths[split] = (write(folder / f"{stem}.en{suffix}", source), write(folder / f"{stem}.de{suffix}", target))
    return folder, paths


def test_loaders_read_aligned_files_and_the_multi30k_layout(corpus_files):
    folder, paths = corpus_files
    corpus = translation.load_files(translation.multi30k_files(str(folder), "en", "de"))
    assert sorted(corpus) == ["test", "train", "validation"]
    assert len(corpus["train"][0]) == 600 and corpus["train"] == make_corpus(600, seed=5)
    assert translation.load_files(paths) == corpus
    with pytest.raises(translation.DataUnavailable, match="no train file for language 'fr'"):
        translation.multi30k_files(str(folder), "en", "fr")
    short = write(folder / "short.de", ["eins"])
    with pytest.raises(ValueError, match="same number of lines"):
        translation.load_pair(paths["train"][0], short)


def test_missing_splits_are_filled_without_testing_on_training_pairs():
    pairs = ([f"s{i}" for i in range(50)], [f"t{i}" for i in range(50)])
    corpus = translation.fill_missing_splits({"train": pairs})
    assert len(corpus["train"][0]) == 45 and corpus["test"] == corpus["validation"] == (pairs[0][45:], pairs[1][45:])
    corpus = translation.fill_missing_splits({"train": pairs, "test": (["a"], ["b"])})
    assert corpus["validation"] == (["a"], ["b"]) and corpus["train"] == pairs


def test_keep_fitting_and_batches_cut_to_the_longest_row():
    source, target, dropped = translation.keep_fitting([[5, 6], [5] * 9, [7]], [[2, 8, 3], [2, 3], [2, 9, 9, 3]], 5)
    assert dropped == 1 and source.shape == (2, 5) and target.tolist() == [[2, 8, 3, 0, 0], [2, 9, 9, 3, 0]]
    (x, y_in), y_out = next(iter(translation.make_dataset(source, target, batch_size=2, multiple=1)))
    assert x.shape == (2, 2) and y_in.shape == (2, 3) and y_out.numpy().tolist() == [[8, 3, 0], [9, 9, 3]]
    (x, y_in), y_out = next(iter(translation.make_dataset(source, target, batch_size=2, multiple=2)))
    assert x.shape == (2, 2) and y_in.shape == (2, 4) and y_out.numpy().tolist() == [[8, 3, 0, 0], [9, 9, 3, 0]]


@pytest.mark.tensorflow_only
def test_tfds_translation_sets_load_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=6):
        corpus = translation.load_tfds("ted_hrlr_translate/pt_to_en")
    assert {split: len(pair[0]) for split, pair in corpus.items()} == {"train": 6, "validation": 6, "test": 6}
    assert all(isinstance(text, str) for text in corpus["train"][0] + corpus["train"][1])


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


@pytest.mark.slow
def test_quick_run_writes_every_promised_file(corpus_files, tmp_path):
    folder, _ = corpus_files
    summary = translate.main(["--quick", "--data-dir", str(folder), "--output-dir", str(tmp_path)])
    assert epochs_in(tmp_path) == [0, 1]
    for name in ("model.keras", "checkpoint.keras", "history.csv", "curves.png", "summary.json", "translations.txt",
                 "alignment_0.png", "translator/translator.json", "translator/source.model"):
        assert os.path.getsize(tmp_path / name) > 0, name
    assert any(name.endswith("_alignment_0.png") for name in os.listdir(tmp_path / "attention"))
    assert '"epochs":["1","2"]' in (tmp_path / "attention" / "attention.html").read_text(encoding="utf-8")
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["metrics"] == summary["metrics"] and saved["metrics"]["test_sentences"] == 16
    assert 0.0 <= saved["metrics"]["bleu_beam"] <= 100.0 and "tok:13a" in saved["bleu_signature"]
    translations = (tmp_path / "translations.txt").read_text(encoding="utf-8")
    assert translations.count("reference: ") == 16 and translations.count("beam:      ") == 16
    # The saved translator reproduces the run's greedy translations from raw strings.
    test_source = translation.read_lines(str(folder / "test_2016_flickr.en"))[:3]
    greedy_lines = [line.removeprefix("greedy:    ") for line in translations.splitlines() if line.startswith("greedy:")]
    assert Translator.load(str(tmp_path / "translator")).generate(test_source) == greedy_lines[:3]


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
                                   ["--max-length", "2"], ["--train-src", "a.txt"],
                                   ["--data-dir", "x", "--tfds", "ted_hrlr_translate/pt_to_en"]])
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate.main(flags)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err
