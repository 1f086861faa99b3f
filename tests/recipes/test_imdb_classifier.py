import json
import os

import keras
import numpy as np
import pytest

from keras_tfm.data import imdb
from keras_tfm.models import TextClassifier
from recipes import imdb_classifier

pytestmark = pytest.mark.tensorflow_only  # the loaders and TextVectorization run on tf.data

POSITIVE = ["great", "wonderful", "loved", "brilliant", "superb", "moving"]
NEGATIVE = ["awful", "boring", "hated", "terrible", "dull", "waste"]
NEUTRAL = ["the", "film", "movie", "plot", "actors", "story", "was", "and", "a", "it"]


def write_acl_imdb(root, per_class=16, seed=0):
    """A tiny folder with the aclImdb layout: {train,test}/{pos,neg}/*.txt, short reviews whose sentiment words
    give the label away (with the `<br />` tags and punctuation of the real reviews)."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for label, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            os.makedirs(root / split / label)
            for i in range(per_class):
                review = list(rng.choice(NEUTRAL, 8)) + list(rng.choice(words, 3))
                rng.shuffle(review)
                text = " ".join(review[:6]).capitalize() + ".<br /><br />" + " ".join(review[6:]) + "!"
                (root / split / label / f"{i}_{rng.integers(1, 11)}.txt").write_text(text)
    return root


def test_standardize_lowercases_and_strips_line_breaks_and_punctuation():
    vectorizer = imdb.make_vectorizer(vocab_size=100, sequence_length=6)
    vectorizer.adapt(np.array(["Great film.<br /><br />GREAT, acting!", "a dull film"]))
    vocabulary = vectorizer.get_vocabulary()
    assert vocabulary[:2] == ["", "[UNK]"] and "great" in vocabulary and "br" not in vocabulary
    assert not any(mark in token for token in vocabulary for mark in ".,!<>/")
    ids = np.asarray(vectorizer(np.array(["GREAT film<br />unheard-of"])))
    words = [vocabulary[i] for i in ids[0]]
    assert words == ["great", "film", "[UNK]", "[UNK]", "", ""]  # "unheard-of" is two unknown words, then padding


def test_vocabulary_round_trip(tmp_path):
    vocabulary = ["", "[UNK]", "great", "film", "dull"]
    path = imdb.save_vocabulary(vocabulary, tmp_path / "vocabulary.txt")
    assert imdb.load_vocabulary(path) == vocabulary
    vectorizer = imdb.make_vectorizer(10, 4, vocabulary=imdb.load_vocabulary(path))
    np.testing.assert_array_equal(vectorizer(np.array(["Dull, dull film"])), [[4, 4, 3, 0]])


def test_folder_loader_reads_texts_and_labels(tmp_path):
    train, test = imdb.load_folder(str(write_acl_imdb(tmp_path / "aclImdb", per_class=3)))
    pairs = [(text.numpy().decode(), int(label)) for text, label in train]
    assert len(pairs) == 6 and sorted(label for _, label in pairs) == [0, 0, 0, 1, 1, 1]
    for text, label in pairs:  # 1 = pos: the positive words are in the positive reviews
        assert any(word in text.lower() for word in (POSITIVE if label else NEGATIVE))
    assert len(list(test)) == 6


@pytest.mark.slow
def test_quick_run_on_a_folder_writes_every_promised_file(tmp_path):
    folder = write_acl_imdb(tmp_path / "aclImdb")
    output_dir = tmp_path / "run"
    summary = imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(output_dir)])

    for name in ("model.keras", "checkpoint.keras", "history.csv", "curves.png", "summary.json", "vocabulary.txt"):
        assert os.path.getsize(output_dir / name) > 0, name
    reviews = sorted(name for name in os.listdir(output_dir) if name.startswith("review_"))
    assert reviews == ["review_0.png", "review_1.png", "review_2.png", "review_3.png"]
    attention = os.listdir(output_dir / "attention")
    assert {f"epoch_001_tokens_{i}.png" for i in range(4)} <= set(attention)
    assert '"views":["head","model"]' in (output_dir / "attention" / "attention.html").read_text(encoding="utf-8")

    saved = json.loads((output_dir / "summary.json").read_text())
    assert saved["metrics"] == summary["metrics"] and 0.0 <= saved["metrics"]["test_accuracy"] <= 1.0
    assert saved["flags"]["quick"] is True and saved["flags"]["epochs"] == 1

    # The saved model and vocabulary are enough to classify new text.
    vocabulary = imdb.load_vocabulary(output_dir / "vocabulary.txt")
    assert vocabulary[:2] == ["", "[UNK]"] and "great" in vocabulary and "awful" in vocabulary
    model = keras.saving.load_model(output_dir / "model.keras")
    assert isinstance(model, TextClassifier) and model.vocab_size == len(vocabulary)
    vectorizer = imdb.make_vectorizer(len(vocabulary), model.max_length, vocabulary=vocabulary)
    assert tuple(model.predict(vectorizer(np.array(["A great, moving film."])), verbose=0).shape) == (1, 2)


@pytest.mark.slow
def test_quick_run_on_mocked_tensorflow_datasets(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=24):
        summary = imdb_classifier.main(
            ["--quick", "--no-attention-maps", "--data-dir", str(tmp_path / "tfds"), "--output-dir", str(tmp_path / "run")]
        )
    assert 0.0 <= summary["metrics"]["test_accuracy"] <= 1.0
    assert os.path.exists(tmp_path / "run" / "model.keras") and os.path.exists(tmp_path / "run" / "review_0.png")


@pytest.mark.parametrize("flags", [["--data-dir", "{empty}"], ["--imdb-dir", "{empty}"]])
def test_missing_data_is_explained_without_a_traceback(flags, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    flags = [flag.format(empty=tmp_path / "empty") for flag in flags]
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--quick", "--output-dir", str(tmp_path / "run"), *flags])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "--imdb-dir path/to/aclImdb" in message and "--data-dir" in message and "aclImdb_v1.tar.gz" in message
    assert "Traceback" not in message
    assert not os.path.exists(tmp_path / "run")  # nothing written for a run that could not start


@pytest.mark.parametrize(
    "flags", [["--epochs", "-1"], ["--preset", "huge"], ["--pool", "max"], ["--vocab-size", "0"], ["--dropout", "1.5"]]
)
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(flags)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err
