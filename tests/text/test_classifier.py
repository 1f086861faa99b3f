"""TextClassifierPipeline: strings in, the probabilities the model gives the recipe's own token ids out; saved and
loaded exactly."""

import numpy as np
import pytest

from keras_tfm.data import word_ids
from keras_tfm.models import TextClassifier
from keras_tfm.text import TextClassifierPipeline
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason="TextVectorization runs on TensorFlow strings")

VOCABULARY = ["", "[UNK]", "great", "film", "dull", "a", "the", "plot"]
TEXTS = ["A GREAT film!<br /><br />Great.", "dull, dull plot", "Words it never saw", ""]


def classifier(**kwargs):
    return TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, num_classes=2, dim=16, depth=1, num_heads=2,
                                      mlp_dim=32, dropout=0.0, **kwargs)


def test_predict_gives_the_softmax_of_the_model_on_the_recipe_token_ids():
    model = classifier()
    pipeline = TextClassifierPipeline(model, VOCABULARY, ["negative", "positive"], sequence_length=6)
    vectorizer = word_ids.make_vectorizer(len(VOCABULARY), 6, vocabulary=VOCABULARY)  # how the recipe reads reviews
    ids = to_numpy(vectorizer(np.array(TEXTS))).astype("int32")
    np.testing.assert_array_equal(pipeline.token_ids(TEXTS), ids)
    np.testing.assert_array_equal(pipeline.token_ids(["GREAT film<br />unheard-of"]), [[2, 3, 1, 1, 0, 0]])
    logits = to_numpy(model(ids))
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    probabilities = pipeline.predict(TEXTS[:3])  # the last is blank: token ids, but nothing to classify
    assert probabilities.shape == (3, 2) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities, expected[:3], atol=1e-6)
    assert pipeline.classify(TEXTS[:3]) == [["negative", "positive"][i] for i in expected[:3].argmax(-1)]
    assert pipeline.predict([]).shape == (0, 2)
    # As the recipe's --predict says: a blank text is an error, not the model's prior read as an answer.
    with pytest.raises(ValueError, match=r"every text must hold at least one non-blank character .* Received: "
                                         r"texts\[3\]='' and 1 more blank"):
        pipeline.classify(TEXTS + ["  \n"])


@pytest.mark.every_backend  # TextVectorization needs TensorFlow installed, not as the backend
def test_text_beyond_ascii_is_read_on_every_backend():
    # On JAX and PyTorch, Keras' TextVectorization handed Python strings encodes them as ASCII and fails (found
    # on IMDB's unlabelled reviews, some of whose dashes are "\x97"); the pipeline hands it a string tensor.
    pipeline = TextClassifierPipeline(classifier(), VOCABULARY, ["negative", "positive"], sequence_length=6)
    np.testing.assert_array_equal(pipeline.token_ids(["A great\x97film", "The café plot"]),
                                  [[5, 1, 0, 0, 0, 0], [6, 1, 7, 0, 0, 0]])
    assert pipeline.predict(["A great\x97film"]).shape == (1, 2)


def test_a_softmax_model_is_not_softmaxed_twice():
    model = classifier(head_activation="softmax")
    pipeline = TextClassifierPipeline(model, VOCABULARY)
    np.testing.assert_allclose(pipeline.predict(TEXTS[:2]), to_numpy(model(pipeline.token_ids(TEXTS[:2]))), atol=1e-6)
    assert pipeline.class_names == ["0", "1"] and pipeline.sequence_length == 8


@pytest.mark.parametrize("standardize", ["recipe", "lower_and_strip_punctuation"])
def test_save_and_load_round_trip_exactly(tmp_path, standardize):
    keyword = {} if standardize == "recipe" else {"standardize": standardize}
    pipeline = TextClassifierPipeline(classifier(), VOCABULARY, ["neg", "pos"], sequence_length=5, **keyword)
    folder = pipeline.save(tmp_path / "classifier")
    assert sorted(p.name for p in folder.iterdir()) == ["classifier.json", "model.keras", "vocabulary.txt"]
    loaded = TextClassifierPipeline.load(folder)
    assert (loaded.class_names, loaded.sequence_length, loaded.vocabulary) == (["neg", "pos"], 5, VOCABULARY)
    assert loaded.standardize == (word_ids.standardize_review if standardize == "recipe" else standardize)
    np.testing.assert_array_equal(loaded.predict(TEXTS[:3]), pipeline.predict(TEXTS[:3]))


def test_bad_arguments_say_what_was_expected(tmp_path):
    model = classifier()
    with pytest.raises(TypeError, match="`model` must be a TextClassifier. Received: model of type str"):
        TextClassifierPipeline("model.keras", VOCABULARY)
    with pytest.raises(ValueError, match=r'`vocabulary` must start with "" \(padding\) and "\[UNK\]"'):
        TextClassifierPipeline(model, ["great", "film"])
    with pytest.raises(ValueError, match="`vocabulary` has 12 words but the model has only 10 token ids"):
        TextClassifierPipeline(model, VOCABULARY + ["x"] * 4)
    with pytest.raises(ValueError, match="`class_names` must name the model's 2 classes. Received 3"):
        TextClassifierPipeline(model, VOCABULARY, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"`sequence_length` must be an integer in \[1, 8\].*sequence_length=9"):
        TextClassifierPipeline(model, VOCABULARY, sequence_length=9)
    with pytest.raises(ValueError, match="`standardize` must be one of TextVectorization's names .* registered"):
        TextClassifierPipeline(model, VOCABULARY, standardize=lambda text: text)
    pipeline = TextClassifierPipeline(model, VOCABULARY)
    with pytest.raises(TypeError, match="`texts` must be a list of strings, not one string"):
        pipeline.predict("A great film")
    with pytest.raises(TypeError, match=r"`texts` must be a list of strings. Received items of type \['int'\]"):
        pipeline.predict([3])
    with pytest.raises(ValueError, match="is not a saved TextClassifierPipeline: it has no classifier.json"):
        TextClassifierPipeline.load(tmp_path)


def test_a_truncated_model_file_is_named_by_load_and_by_the_recipes_predict(tmp_path, capsys):
    from recipes import imdb_classifier

    folder = TextClassifierPipeline(classifier(), VOCABULARY).save(tmp_path / "classifier")
    model_file = folder / "model.keras"
    model_file.write_bytes(model_file.read_bytes()[:20_000])  # what a crash during the write leaves
    with pytest.raises(ValueError, match=r"model\.keras' is not a complete \.keras file \(20,000 bytes"):
        TextClassifierPipeline.load(folder)
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.predict(str(tmp_path), ["A great film."])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: --predict: ") and "is not a complete .keras file" in error
    assert "\n" not in error and "File not found" not in error


def test_the_pipeline_says_what_it_could_not_read(capsys, tmp_path):
    pipeline = TextClassifierPipeline(classifier(), VOCABULARY, sequence_length=4)
    assert pipeline.reading_note("a great film") is None
    assert pipeline.reading_note("the plot a great dull film") == "read 4 of its 6 words (the first of them)"
    assert "unknown to the vocabulary ([UNK]): the score says nothing" in pipeline.reading_note("🎬 🍿 never seen")
    # The recipe's --predict: one line per text, shortened, and the note under it.
    from recipes import imdb_classifier

    pipeline.save(tmp_path / "classifier")
    imdb_classifier.predict(str(tmp_path), ["a great film " * 400, "🎬🍿"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and len(lines[0]) < 160 and lines[0].endswith("…")
    assert lines[1] == "    note: read 4 of its 1,200 words (the first of them)"
    assert "[UNK]" in lines[3]
