"""keras_tfm.data.word_ids: the standardiser, `TextVectorization` and the vocabulary file."""

import numpy as np
import pytest

from keras_tfm.data import imdb, word_ids

pytestmark = pytest.mark.tensorflow_only(reason="TextVectorization runs on TensorFlow strings")


def test_standardize_lowercases_and_strips_line_breaks_and_punctuation():
    vectorizer = word_ids.make_vectorizer(vocab_size=100, sequence_length=6)
    vectorizer.adapt(np.array(["Great film.<br /><br />GREAT, acting!", "a dull film"]))
    vocabulary = vectorizer.get_vocabulary()
    assert vocabulary[:2] == ["", "[UNK]"] and "great" in vocabulary and "br" not in vocabulary
    assert not any(mark in token for token in vocabulary for mark in ".,!<>/")
    ids = np.asarray(vectorizer(np.array(["GREAT film<br />unheard-of"])))
    words = [vocabulary[i] for i in ids[0]]
    assert words == ["great", "film", "[UNK]", "[UNK]", "", ""]  # "unheard-of" is two unknown words, then padding


def test_vocabulary_round_trip(tmp_path):
    vocabulary = ["", "[UNK]", "great", "film", "dull"]
    path = word_ids.save_vocabulary(vocabulary, tmp_path / "vocabulary.txt")
    assert word_ids.load_vocabulary(path) == vocabulary
    vectorizer = word_ids.make_vectorizer(10, 4, vocabulary=word_ids.load_vocabulary(path))
    np.testing.assert_array_equal(vectorizer(np.array(["Dull, dull film"])), [[4, 4, 3, 0]])


def test_the_imdb_module_keeps_the_names_code_imported_from_it():
    assert imdb.make_vectorizer is word_ids.make_vectorizer and imdb.standardize_review is word_ids.standardize_review
