import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer
from keras_tfm.text import Translator, ValidationBLEU
from keras_tfm.text import SubwordTokenizer

pytestmark = pytest.mark.tensorflow_only(reason=(
    "SentencePiece and tf.data; the translate quick run drives the Translator on every backend"))

SENTENCES = ["A dog runs on the beach.", "Two men are talking.", "A girl with a red ball.", "The cat sleeps."]


@pytest.fixture(scope="module")
def translator():
    tokenizer = SubwordTokenizer.train(SENTENCES * 30, vocab_size=300)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=tokenizer.vocab_size,
                                           target_vocab_size=tokenizer.vocab_size, max_length=16, dropout=0.0)
    return Translator(model, tokenizer)


def test_generate_maps_strings_to_strings_in_batches_of_one_shape(translator):
    one_call = translator.generate(SENTENCES, batch_size=8)
    assert len(one_call) == 4 and all(isinstance(text, str) for text in one_call)
    # Three calls of 3 sentences (the last filled up with copies) give the same translations as one call.
    assert translator.generate(SENTENCES, batch_size=3) == one_call
    assert translator.generate(SENTENCES[2:3]) == one_call[2:3]
    tokens = translator.model.generate(translator.encode_source(SENTENCES), max_new_tokens=16, start_id=2, end_id=3)
    assert translator.target_tokenizer.decode(tokens) == one_call
    assert translator.generate([]) == []


def test_ids_beyond_the_tokenizers_vocabulary_decode_as_unknown():
    """A model's vocabulary may be larger than its tokenizer's: ids without a piece decode as unknown (a fresh
    model, whose output is arbitrary, made the README's example fail on one backend)."""
    tokenizer = SubwordTokenizer.train(SENTENCES * 30, vocab_size=300)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=tokenizer.vocab_size,
                                           target_vocab_size=tokenizer.vocab_size + 50, max_length=8, dropout=0.0)
    bias = model.get_layer("output_projection").bias
    bias.assign(np.where(np.arange(bias.shape[0]) == tokenizer.vocab_size + 10, 1e4, 0.0).astype("float32"))
    assert Translator(model, tokenizer).generate(["A dog runs."], max_new_tokens=3) == [" ⁇  ⁇  ⁇ "]


def test_source_is_padded_to_a_multiple_of_8_and_cut_at_max_length(translator):
    assert translator.encode_source(["A dog."]).shape[1] == 8
    assert translator.encode_source([" ".join(SENTENCES * 3)]).shape[1] == 16


def test_alignment_has_one_row_per_target_piece(translator):
    source_pieces, target_pieces, weights = translator.alignment(SENTENCES[0], SENTENCES[3])
    assert target_pieces[-1] == "</s>" and weights.shape == (len(target_pieces), len(source_pieces))
    assert "".join(target_pieces[:-1]).replace("▁", " ").strip() == SENTENCES[3]
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)


def test_save_and_load_round_trip(translator, tmp_path):
    translator.save(str(tmp_path / "translator"))
    loaded = Translator.load(str(tmp_path / "translator"))
    assert loaded.source_tokenizer == translator.source_tokenizer and loaded.target_tokenizer is loaded.source_tokenizer
    assert loaded.generate(SENTENCES) == translator.generate(SENTENCES)
    for a, b in zip(loaded.model.get_weights(), translator.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments(translator, tmp_path):
    with pytest.raises(TypeError, match="list of strings, not one string"):
        translator.generate("A dog.")
    with pytest.raises(TypeError, match="`model` must be a Seq2SeqTransformer"):
        Translator("model", translator.source_tokenizer)
    with pytest.raises(TypeError, match="`target_tokenizer` must be a SubwordTokenizer"):
        Translator(translator.model, translator.source_tokenizer, "tokenizer")
    small = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=50, target_vocab_size=50, max_length=8)
    with pytest.raises(ValueError, match=r"has \d+ tokens but the model's vocabulary has only 50"):
        Translator(small, translator.source_tokenizer)
    with pytest.raises(ValueError, match="has no translator.json"):
        Translator.load(str(tmp_path))


class _ScriptedTranslator:
    """Returns the references from the second call on, nonsense before: a model that learns after one epoch."""

    def __init__(self, references):
        self.references, self.calls = references, []

    def generate(self, texts, strategy="greedy", **kwargs):
        self.calls.append((len(texts), strategy, kwargs))
        return list(self.references) if len(self.calls) > 1 else ["xyz"] * len(texts)


def _fit(callbacks, epochs):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model.fit(np.zeros((8, 2)), np.zeros((8, 1)), epochs=epochs, verbose=0, callbacks=callbacks)


def test_validation_bleu_goes_into_the_logs_the_later_callbacks_read():
    import keras

    from keras_tfm.callbacks import CheckpointAverage

    references = ["Ein Hund läuft am Strand.", "Zwei Männer reden miteinander."]
    scripted = _ScriptedTranslator(references)
    bleu = ValidationBLEU(scripted, SENTENCES[:2], references, verbose=False)
    best = CheckpointAverage(1, monitor="val_bleu", apply=False, verbose=False)
    stop = keras.callbacks.EarlyStopping(monitor="val_bleu", mode="max", patience=1)
    history = _fit([bleu, best, stop], epochs=10)
    assert history.history["val_bleu"][0] == 0.0 and history.history["val_bleu"][1] == pytest.approx(100.0)
    assert len(history.history["val_bleu"]) == 3  # no gain after epoch 2: stopped after epoch 3
    assert best.kept == [(2, pytest.approx(100.0))]  # a tie goes to the later epoch
    assert bleu.scores[1] == pytest.approx(100.0)
    assert scripted.calls[0] == (2, "greedy", {})


def test_validation_bleu_every_n_epochs_and_after_the_last():
    references = ["Die Katze schläft."]
    scripted = _ScriptedTranslator(references)
    bleu = ValidationBLEU(scripted, ["The cat sleeps."], references, every_n_epochs=2, strategy="beam",
                          verbose=False, num_beams=3)
    history = _fit([bleu], epochs=5)
    assert sorted(bleu.scores) == [1, 3, 4]  # epochs 2 and 4, and the last one
    assert scripted.calls[0] == (1, "beam", {"num_beams": 3})
    assert "val_bleu" in history.history  # Keras' History keeps the epochs that had it


def test_validation_bleu_scores_a_real_translator(translator):
    from keras_tfm.text import corpus_bleu

    references = ["Ein Hund läuft am Strand.", "Zwei Männer reden.", "Ein Mädchen mit einem Ball.", "Die Katze."]
    expected = corpus_bleu(translator.generate(SENTENCES, strategy="beam", num_beams=2), references)[0]
    assert ValidationBLEU(translator, SENTENCES, references, strategy="beam", num_beams=2).score() == expected


@pytest.mark.parametrize("arguments, error, message", [
    (dict(translator=object()), TypeError, "`translator` must have a `generate"),
    (dict(sources="A dog."), TypeError, "`sources` must be a list of strings"),
    (dict(references=["one"]), ValueError, "1 references"),
    (dict(every_n_epochs=0), ValueError, "every_n_epochs=0"),
    (dict(name=""), ValueError, "`name` must be a non-empty string"),
])
def test_validation_bleu_bad_arguments(arguments, error, message):
    given = dict(translator=_ScriptedTranslator(["a", "b"]), sources=["a", "b"], references=["a", "b"]) | arguments
    with pytest.raises(error, match=message):
        ValidationBLEU(**given)
