import keras
import numpy as np
import pytest

from keras_tfm.layers.walk import iter_layers
from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from keras_tfm.models import Seq2SeqTransformer
from tests.helpers import END, MAX_DIGITS, START, VOCAB, reverse_digits, small_reverser, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the model contract (tests/models/test_model_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))

small_model = small_reverser


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_reverse_digits_reaches_99_percent_exact_match(trained_reverser):
    source, target = reverse_digits(500, seed=1)
    generated = trained_reverser.generate(source, max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END)
    exact = np.mean(np.all(generated == target[:, 1:], axis=1))
    assert exact >= 0.99, exact


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_greedy_equals_argmax_of_the_full_forward_pass_step_by_step(trained_reverser):
    source, _ = reverse_digits(16, seed=2)
    generated = trained_reverser.generate(source, max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END)
    prefix = np.full((16, 1), START, "int32")
    finished = np.zeros(16, bool)
    expected = np.zeros((16, MAX_DIGITS + 1), "int32")
    for step in range(MAX_DIGITS + 1):
        logits = to_numpy(trained_reverser((source, prefix)))[:, -1]  # uncached: the whole prefix again
        token = np.where(finished, 0, logits.argmax(-1)).astype("int32")
        expected[:, step] = token
        finished |= token == END
        prefix = np.concatenate([prefix, token[:, None]], axis=1)
    np.testing.assert_array_equal(generated, expected)
    uncached = trained_reverser.generate(source, max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END,
                                         use_cache=False)
    np.testing.assert_array_equal(uncached, generated)


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_beam_of_one_and_top_k_of_one_equal_greedy_and_sampling_is_seeded(trained_reverser):
    source, _ = reverse_digits(16, seed=3)
    kwargs = dict(max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END)
    greedy = trained_reverser.generate(source, **kwargs)
    np.testing.assert_array_equal(trained_reverser.generate(source, strategy="beam", num_beams=1, **kwargs), greedy)
    np.testing.assert_array_equal(trained_reverser.generate(source, strategy="top_k", k=1, seed=5, **kwargs), greedy)
    hot = dict(temperature=3.0, seed=7, **kwargs)
    first = trained_reverser.generate(source, strategy="top_p", p=0.9, **hot)
    np.testing.assert_array_equal(trained_reverser.generate(source, strategy="top_p", p=0.9, **hot), first)
    assert not np.array_equal(first, greedy)  # at temperature 3 sampling really samples
    np.testing.assert_array_equal(
        trained_reverser.generate(source, strategy="top_k", k=5, **hot), trained_reverser.generate(source, strategy="top_k", k=5, **hot)
    )


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_beam_search_output_format_and_scores(trained_reverser):
    source, target = reverse_digits(32, seed=4)
    tokens, scores = trained_reverser.generate(
        source, max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END, strategy="beam", num_beams=4,
        return_scores=True,
    )
    assert tokens.shape == (32, MAX_DIGITS + 1) and scores.shape == (32,)
    assert np.all(scores <= 0)
    np.testing.assert_array_equal(tokens, target[:, 1:])  # the trained model reverses perfectly with beams too
    for row in tokens:  # zeros only after the end token
        end = list(row).index(END)
        assert np.all(row[end + 1 :] == 0) and np.all(row[:end] != 0)


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_keras_file_round_trip_keeps_predictions_and_generation(trained_reverser, tmp_path):
    source, target = reverse_digits(8, seed=5)
    trained_reverser.save(tmp_path / "seq2seq.keras")
    loaded = keras.saving.load_model(tmp_path / "seq2seq.keras")
    assert isinstance(loaded, Seq2SeqTransformer)
    np.testing.assert_array_equal(
        to_numpy(loaded.predict((source, target[:, :-1]), verbose=0)),
        to_numpy(trained_reverser.predict((source, target[:, :-1]), verbose=0)),
    )
    kwargs = dict(max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END)
    np.testing.assert_array_equal(loaded.generate(source, **kwargs), trained_reverser.generate(source, **kwargs))
    np.testing.assert_array_equal(
        loaded.generate(source, strategy="beam", **kwargs), trained_reverser.generate(source, strategy="beam", **kwargs)
    )


@pytest.mark.parametrize("tie_embeddings,norm_first", [(True, True), (False, False)])
def test_overfits_a_tiny_batch_and_every_weight_gets_a_gradient(tie_embeddings, norm_first):
    source, target = reverse_digits(8, seed=6)
    model = small_model(tie_embeddings=tie_embeddings, norm_first=norm_first)
    before = [to_numpy(w) for w in model.trainable_weights]
    model.compile_for_training(optimizer=keras.optimizers.Adam(3e-3))
    repeat = lambda x: np.tile(x, (25, 1))  # the same 8 sequences, 25 steps per epoch  # noqa: E731
    history = model.fit((repeat(source), repeat(target[:, :-1])), repeat(target[:, 1:]), batch_size=8, epochs=6,
                        shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.05
    assert history.history["accuracy"][-1] == 1.0
    unchanged = [w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)]
    assert not unchanged


def test_tied_embeddings_share_the_target_table():
    model = small_model(tie_embeddings=True)
    assert not any("output_projection" in w.path for w in model.weights)
    source, target = reverse_digits(2, seed=7)
    table = to_numpy(model.get_layer("target_embedding").embeddings)
    logits = to_numpy(model((source, target[:, :-1])))
    assert logits.shape == (2, MAX_DIGITS + 1, VOCAB) and table.shape[0] == VOCAB


def test_masked_loss_and_accuracy_ignore_padding():
    labels = np.array([[3, 4, 0, 0]])
    logits = np.random.default_rng(0).normal(size=(1, 4, 5)).astype("float32")
    changed = logits.copy()
    changed[:, 2:] = 100.0  # anything at padded positions
    loss = MaskedSparseCategoricalCrossentropy()
    assert float(to_numpy(loss(labels, logits))) == pytest.approx(float(to_numpy(loss(labels, changed))))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_probs[0, 0, 3] + log_probs[0, 1, 4]) / 2
    assert float(to_numpy(loss(labels, logits))) == pytest.approx(expected, rel=1e-5)
    accuracy = MaskedAccuracy()
    right = np.zeros((1, 4, 5), "float32")
    right[0, 0, 3] = right[0, 1, 4] = 1.0  # both real tokens right, padded positions "predict" 0 wrongly
    accuracy.update_state(labels, right)
    assert float(to_numpy(accuracy.result())) == 1.0


def test_bad_generation_arguments():
    model = small_model()
    source, _ = reverse_digits(2, seed=8)
    with pytest.raises(ValueError, match=r"`strategy` must be one of.*strategy='sampling'"):
        model.generate(source, strategy="sampling")
    with pytest.raises(ValueError, match=r"`num_beams` must be a positive integer.*num_beams=0"):
        model.generate(source, strategy="beam", num_beams=0)
    for p in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"`p` must be a number in \(0, 1\]"):
            model.generate(source, strategy="top_p", p=p)
    with pytest.raises(ValueError, match=r"`max_new_tokens` \(50\) must not exceed the model's max_length \(10\)"):
        model.generate(source, max_new_tokens=50)
    with pytest.warns(FutureWarning, match="`max_length` is deprecated, use `max_new_tokens`"):
        np.testing.assert_array_equal(model.generate(source, max_length=4), model.generate(source, max_new_tokens=4))
    with pytest.raises(TypeError, match="unexpected keyword argument `max_new_token`"):
        model.generate(source, max_new_token=4)
    with pytest.raises(ValueError, match=r"`temperature` must be a positive number"):
        model.generate(source, temperature=0)
    with pytest.raises(ValueError, match=r"`end_id` must be a token id in \[1, 13\)"):
        model.generate(source, end_id=13)
    with pytest.raises(ValueError, match=r"`source_ids` must be an int array"):
        model.generate(source.astype("float32"))


def test_target_longer_than_max_length_is_rejected():
    model = small_model()
    source, _ = reverse_digits(2, seed=9)
    with pytest.raises(ValueError, match=r"longer than `max_length` \(10\).*length 12"):
        model((source, np.ones((2, 12), "int32")))


def test_unknown_preset():
    with pytest.raises(ValueError, match=r"Unknown Seq2SeqTransformer preset 'huge'.*Available presets"):
        Seq2SeqTransformer.from_preset("huge", source_vocab_size=5, target_vocab_size=5)


def test_tied_model_keras_file_round_trip(tmp_path):
    model = small_model(tie_embeddings=True, norm_first=False)
    source, target = reverse_digits(4, seed=10)
    model.save(tmp_path / "tied.keras")
    loaded = keras.saving.load_model(tmp_path / "tied.keras")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(loaded((source, target[:, :-1]))), to_numpy(model((source, target[:, :-1]))))
    np.testing.assert_array_equal(loaded.generate(source, max_new_tokens=6), model.generate(source, max_new_tokens=6))


def test_ablation_options_reach_every_layer_and_keep_the_cache_exact():
    # The switches of `recipes.experiments`: concatenated positions (with tied logits) and unscaled attention.
    model = small_model(tie_embeddings=True, position_combine="concat", attention_scale=1.0)
    attentions = [layer for layer in iter_layers(model) if type(layer).__name__ == "MultiHeadAttention"]
    assert len(attentions) == 6 and all(layer.logit_scale == 1.0 for layer in attentions)
    assert model.get_layer("target_embedding").combine == "concat"
    source, _ = reverse_digits(4, seed=11)
    cached = model.generate(source, max_new_tokens=6)
    np.testing.assert_array_equal(cached, model.generate(source, max_new_tokens=6, use_cache=False))
    assert Seq2SeqTransformer.from_config(model.get_config()).get_config() == model.get_config()
