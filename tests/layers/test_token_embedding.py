import math
import re
import warnings

import keras
import numpy as np
import pytest

from keras_tfm.layers import TokenEmbedding, sinusoidal_position_encoding
from tests.helpers import assert_close, padded_ids, to_numpy


def test_scaled_lookup_plus_sinusoidal_positions():
    embed = TokenEmbedding(20, 8)
    ids = padded_ids([5, 3], 5)
    out = to_numpy(embed(ids))
    table = to_numpy(embed.embeddings)
    expected = table[ids] * math.sqrt(8) + to_numpy(sinusoidal_position_encoding(5, 8))[None]
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("dim, token_norm", [(64, 1.85), (256, 7.39)])
def test_at_initialisation_the_scaled_tokens_are_smaller_than_the_positions(dim, token_norm):
    """What the learning path says about adding: even scaled by √d_model, a token vector drawn from the default
    uniform(-0.05, 0.05) table has norm √d·0.05·√(d/3) = 0.029·d, against √(d/2) for the sinusoidal code (each
    sin² + cos² pair is 1): 1.85 vs 5.66 at d = 64, 7.39 vs 11.31 at d = 256. The positions start out larger
    below d ≈ 600; the scaling does not stop them from outweighing the tokens at these widths."""
    keras.utils.set_random_seed(0)
    embedding = TokenEmbedding(2000, dim, max_length=8)
    ids = np.arange(1, 2000).reshape(-1, 1)  # every token at position 0
    tokens = to_numpy(embedding(ids))[:, 0] - to_numpy(sinusoidal_position_encoding(1, dim))[0]
    assert np.linalg.norm(tokens, axis=-1).mean() == pytest.approx(token_norm, rel=0.02)
    positions = to_numpy(sinusoidal_position_encoding(50, dim))
    np.testing.assert_allclose(np.linalg.norm(positions, axis=-1), math.sqrt(dim / 2), rtol=1e-5)


def test_no_scale_no_position():
    embed = TokenEmbedding(20, 8, position=None, scale=False)
    ids = padded_ids([4], 4)
    assert_close(embed(ids), to_numpy(embed.embeddings)[ids])


def test_learned_positions_add_their_table_row():
    embed = TokenEmbedding(20, 8, max_length=6, position="learned", scale=False)
    ids = padded_ids([4], 4)
    out = to_numpy(embed(ids))
    expected = to_numpy(embed.embeddings)[ids] + to_numpy(embed.position_embeddings)[:4][None]
    np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_concatenated_positions_get_their_own_channels(position):
    embed = TokenEmbedding(20, 8, max_length=6, position=position, combine="concat")
    ids = padded_ids([5, 3], 5)
    out = to_numpy(embed(ids))
    assert out.shape == (2, 5, 8) and tuple(embed.embeddings.shape) == (20, 4)
    np.testing.assert_allclose(out[..., :4], to_numpy(embed.embeddings)[ids] * 2.0, atol=1e-5)  # x √4
    table = to_numpy(sinusoidal_position_encoding(5, 4) if position == "sinusoidal" else embed.position_embeddings[:5])
    np.testing.assert_allclose(out[..., 4:], np.broadcast_to(table, (2, 5, 4)), atol=1e-6)
    # Tied logits read the token channels only.
    logits = to_numpy(embed(keras.ops.convert_to_tensor(out.astype("float32")), reverse=True))
    np.testing.assert_allclose(logits, out[..., :4] @ to_numpy(embed.embeddings).T, atol=1e-4)


def test_padding_mask_marks_real_tokens():
    embed = TokenEmbedding(20, 8)
    ids = np.array([[3, 4, 0, 0], [1, 2, 3, 4]])
    np.testing.assert_array_equal(to_numpy(embed.compute_mask(ids)), ids != 0)
    assert TokenEmbedding(20, 8, mask_zero=False).compute_mask(ids) is None


def test_mask_reaches_downstream_layers_in_a_functional_model():
    ids = keras.Input((None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(TokenEmbedding(20, 8)(ids))  # averages real tokens only
    model = keras.Model(ids, pooled)
    assert_close(model(np.array([[5, 6, 0, 0, 0]])), model(np.array([[5, 6]])), atol=1e-6)


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_start_position_embeds_a_suffix_like_the_full_sequence(position):
    embed = TokenEmbedding(20, 8, max_length=10, position=position)
    ids = padded_ids([6], 6)
    full = to_numpy(embed(ids))
    assert_close(embed(ids[:, 4:], start_position=4), full[:, 4:], atol=1e-6)
    assert_close(embed(ids[:, 4:], start_position=keras.ops.convert_to_tensor(4)), full[:, 4:], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(vocab_size=0, dim=8), r"`vocab_size` must be a positive integer.*vocab_size=0"),
        (dict(vocab_size=10, dim=7), r"sinusoidal encoding needs an even width: dim=7"),
        (dict(vocab_size=10, dim=6, combine="concat"), r"dim=6 gives 3 position channels.*divisible by 4"),
        (dict(vocab_size=10, dim=8, combine="sum"), r"`combine` must be one of.*combine='sum'"),
        (dict(vocab_size=10, dim=8, position="learned"), r"`max_length` is required.*max_length=None"),
        (dict(vocab_size=10, dim=8, position="rotary"), r"`position` must be one of.*position='rotary'"),
        (dict(vocab_size=10, dim=8, dropout=-0.1), r"`dropout` must be a number in \[0, 1\)"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenEmbedding(**kwargs)


def test_sequence_longer_than_max_length():
    embed = TokenEmbedding(20, 8, max_length=4, position="learned")
    with pytest.raises(ValueError, match=r"longer than `max_length` \(4\).*length 6"):
        embed(padded_ids([6], 6))
    with pytest.raises(ValueError, match=r"length 2 starting at position 3"):
        embed(padded_ids([2], 2), start_position=3)


def test_token_id_out_of_range():
    embed = TokenEmbedding(10, 8)
    with pytest.raises(ValueError, match=r"\[0, 10\).*an id of 10"):
        embed(np.array([[1, 10, 3]]))
    with pytest.raises(ValueError, match=r"an id of -1"):
        embed(np.array([[1, -1, 3]]))


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"`inputs` must have rank 2.*\(2, 3, 4\)"):
        TokenEmbedding(10, 8)(np.ones((2, 3, 4), "int32"))


def test_float_ids_are_a_type_error_and_integral_floats_are_accepted():
    embed = TokenEmbedding(10, 4)
    with pytest.raises(TypeError, match=r"`inputs` must hold integer token ids.*5\.7"):
        embed(np.array([[1.0, 5.7]]))
    np.testing.assert_array_equal(to_numpy(embed(np.array([[1.0, 5.0]]))), to_numpy(embed(np.array([[1, 5]]))))


def test_a_float_keras_input_is_warned_about_when_the_model_is_built():
    """Inside `fit` a float input's values are never seen (5.7 would be looked up as 5 at every step): building a
    model on one says so; an integer input does not warn."""
    with pytest.warns(UserWarning, match=r"symbolic float32 input.*keras.Input\(\(None,\), dtype='int32'\)"):
        TokenEmbedding(10, 4)(keras.Input((None,)))  # keras.Input's default dtype is float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = keras.Model(ids := keras.Input((None,), dtype="int32"), TokenEmbedding(10, 4)(ids))
    assert model.predict(np.array([[1, 2, 3]]), verbose=0).shape == (1, 3, 4)


def _own_model(check_ids=True):
    """A model of the user's own: our layers in a plain `keras.Model`, none of the ready models' checks in `fit`."""
    from keras_tfm.layers import EncoderBlock

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), dtype="int32")
    x = TokenEmbedding(30, 16, max_length=8, check_ids=check_ids)(inputs)
    x = EncoderBlock(num_heads=2, mlp_dim=32)(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(x)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _ids_with(bad):
    ids = np.random.default_rng(0).integers(1, 30, (16, 8)).astype("int32")
    ids[9, 2] = bad  # in the third batch of 4: the first steps have run
    return ids


@pytest.mark.parametrize("bad", [35, -2])
def test_a_users_own_model_stops_at_an_id_out_of_range_inside_fit(bad):
    """TensorFlow without it: "Graph execution error" about a GatherV2 node; JAX: a NaN loss, training on. With it
    the error says which layer, the range and the id: TensorFlow's InvalidArgumentError and JAX's JaxRuntimeError
    end with it, PyTorch raises the eager ValueError. On JAX the model in memory loses its weights all the same:
    Keras' compiled step was given their buffers, and its failure deletes them (with the NaN they were lost too)."""
    model = _own_model()
    with pytest.raises(Exception) as raised:
        model.fit(_ids_with(bad), np.zeros(16), batch_size=4, epochs=1, verbose=0)
    message = str(raised.value)
    assert "Token ids in `inputs`" in message and "must lie in [0, vocab_size) = [0, 30)" in message, message[-800:]
    assert re.search(rf"an id of\]? \[?{bad}\b", message), message[-800:]
    if keras.backend.backend() != "jax":
        assert all(np.isfinite(w).all() for w in model.get_weights())  # the model keeps its weights


def test_check_ids_false_turns_it_off():
    model = _own_model(check_ids=False)
    assert model.get_layer("token_embedding").get_config()["check_ids"] is False
    try:
        history = model.fit(_ids_with(35), np.zeros(16), batch_size=4, epochs=1, verbose=0)
    except Exception as error:  # TensorFlow's gather error, PyTorch's IndexError: not ours
        assert "Token ids in" not in str(error)
    else:  # JAX looks up NaN for an id past the table
        assert keras.backend.backend() == "jax" and np.isnan(history.history["loss"][-1])


def _count_in_step_checks(monkeypatch):
    """Counts the checks compiled into steps: TensorFlow's graph assertions, JAX's host callbacks."""
    compiled = []
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        assertion = tf.debugging.Assert
        monkeypatch.setattr(tf.debugging, "Assert", lambda *a, **k: compiled.append(1) or assertion(*a, **k))
    else:
        import jax

        callback = jax.debug.callback
        monkeypatch.setattr(jax.debug, "callback", lambda *a, **k: compiled.append(1) or callback(*a, **k))
    return compiled


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="PyTorch runs eagerly: the values are checked")
def test_only_a_users_own_model_compiles_the_check_into_its_steps(monkeypatch):
    from keras_tfm.models import TextClassifier, TransformerLM

    ids, labels = _ids_with(1), np.zeros(16, "int32")
    own, unchecked = _own_model(), _own_model(check_ids=False)
    ready = TextClassifier.from_preset("tiny", vocab_size=30, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32)
    ready.compile_for_training()
    language_model = TransformerLM(vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32)
    compiled = _count_in_step_checks(monkeypatch)  # counted from here: building a model traces `call` once too
    own.fit(ids, labels, batch_size=4, epochs=1, verbose=0)
    assert compiled
    del compiled[:]
    unchecked.fit(ids, labels, batch_size=4, epochs=1, verbose=0)
    ready.fit(ids, labels, batch_size=4, epochs=1, verbose=0)  # checked before its step: nothing compiled in
    ready.predict(ids, verbose=0)
    language_model.generate(ids[:2, :4], max_new_tokens=4)  # the prompt checked on the host, each step unchecked
    assert compiled == []


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="Keras exports SavedModels from TensorFlow and JAX")
def test_a_users_own_model_with_the_check_still_exports(tmp_path):
    """JAX's export cannot serialize a host callback ("std::bad_cast"): the check stays out of inference steps."""
    model = _own_model()
    model.export(str(tmp_path / "saved"), verbose=False)
    import tensorflow as tf

    served = tf.saved_model.load(str(tmp_path / "saved"))
    ids = _ids_with(1)[:2]
    np.testing.assert_allclose(served.serve(ids).numpy(), model.predict(ids, verbose=0), atol=1e-5)
