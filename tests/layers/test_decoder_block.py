import keras
import numpy as np
import pytest

from keras_tfm.layers import DecoderBlock, TokenEmbedding
from keras_tfm.layers.walk import iter_layers
from keras_tfm.models import TransformerLM
from tests.helpers import assert_close, random_floats, to_numpy

B, T, S, D = 2, 6, 5, 16


@pytest.mark.parametrize("norm_first", [True, False])
def test_changing_future_tokens_leaves_the_past_unchanged(norm_first):
    block = DecoderBlock(4, 32, norm_first=norm_first)
    x, context = random_floats(B, T, D), random_floats(B, S, D, seed=1)
    out = to_numpy(block(x, context))
    for t in range(1, T):
        changed = x.copy()
        changed[:, t:] = random_floats(B, T - t, D, seed=10 + t)
        assert_close(to_numpy(block(changed, context))[:, :t], out[:, :t], atol=1e-5)


def test_scores_self_lower_triangular_cross_ignores_padded_source():
    block = DecoderBlock(4, 32)
    x, context = random_floats(B, T, D), random_floats(B, S, D, seed=1)
    context_mask = np.array([[True] * S, [True, True, True, False, False]])
    out, self_scores, cross_scores = block(x, context, context_mask=context_mask, return_attention_scores=True)
    self_scores, cross_scores = to_numpy(self_scores), to_numpy(cross_scores)
    assert self_scores.shape == (B, 4, T, T) and cross_scores.shape == (B, 4, T, S)
    assert self_scores[:, :, np.triu(np.ones((T, T), bool), 1)].max() < 1e-6
    np.testing.assert_allclose(cross_scores.sum(-1), 1.0, atol=1e-5)
    assert cross_scores[1, :, :, 3:].max() < 1e-6
    assert_close(out, block(x, context, context_mask=context_mask))


def test_padding_of_the_source_does_not_change_the_output():
    source_ids = keras.Input((None,), dtype="int32")
    target = keras.Input((None, D))
    context = TokenEmbedding(20, D)(source_ids)  # implicit mask -> context_mask
    model = keras.Model([source_ids, target], DecoderBlock(4, 32)(target, context))
    x = random_floats(1, T, D)
    short, padded = np.array([[3, 4, 5]]), np.array([[3, 4, 5, 0, 0, 0]])
    assert_close(model([padded, x]), model([short, x]), atol=1e-5)


@pytest.mark.parametrize("with_context", [True, False], ids=["encoder-decoder", "decoder-only"])
def test_cached_steps_equal_one_full_causal_pass(with_context):
    block = DecoderBlock(4, 32)
    x, context = random_floats(B, T, D), random_floats(B, S, D, seed=1)
    context_mask = np.array([[True] * S, [True, True, False, False, False]])
    kwargs = dict(context_mask=context_mask) if with_context else {}
    full = to_numpy(block(x, context if with_context else None, **kwargs))
    cache = block.build_cache(B, T, context=context if with_context else None)
    assert set(cache) == ({"self", "cross"} if with_context else {"self"})
    for t in range(T):
        step, cache = block(x[:, t : t + 1], cache=cache, cache_index=t, **kwargs)
        assert_close(step[:, 0], full[:, t], atol=1e-5)


def test_cached_step_returns_scores_over_the_cache():
    block = DecoderBlock(4, 32)
    x, context = random_floats(B, T, D), random_floats(B, S, D, seed=1)
    block(x, context)
    cache = block.build_cache(B, T, context=context)
    _, self_scores, cross_scores, cache = block(x[:, :1], cache=cache, cache_index=0, return_attention_scores=True)
    assert tuple(self_scores.shape) == (B, 4, 1, T) and tuple(cross_scores.shape) == (B, 4, 1, S)
    np.testing.assert_allclose(to_numpy(self_scores)[..., 0], 1.0, atol=1e-6)  # only itself so far


def test_errors_about_context_and_cache():
    decoder_only = DecoderBlock(4, 32)
    decoder_only(random_floats(B, T, D))
    with pytest.raises(ValueError, match="built without cross-attention"):
        decoder_only(random_floats(B, T, D), random_floats(B, S, D))
    encoder_decoder = DecoderBlock(4, 32)
    encoder_decoder(random_floats(B, T, D), random_floats(B, S, D))
    with pytest.raises(ValueError, match="needs `context`"):
        encoder_decoder(random_floats(B, T, D))
    with pytest.raises(ValueError, match="`build_cache` needs the encoder output"):
        encoder_decoder.build_cache(B, T)
    with pytest.raises(ValueError, match="`cache_index`"):
        decoder_only(random_floats(B, 1, D), cache=decoder_only.build_cache(B, T))
    with pytest.raises(ValueError, match=r"`dim` \(18\) must be divisible by `num_heads` \(4\)"):
        DecoderBlock(4, 32)(random_floats(B, T, 18))
    with pytest.raises(ValueError, match=r"`context` must have rank 3"):
        DecoderBlock(4, 32)(random_floats(B, T, D), random_floats(B, D))


@pytest.mark.every_backend
def test_a_decoder_only_block_has_no_cross_attention_and_every_sublayer_is_built():
    # An unbuilt sublayer makes Keras trace the whole model again at every train_on_batch (and fit's start).
    decoder_only = DecoderBlock(num_heads=2, mlp_dim=16, seed=3)
    decoder_only(np.zeros((1, 4, 8), "float32"))
    assert not decoder_only.has_cross_attention and decoder_only.cross_attention is None
    assert all(layer.built for layer in iter_layers(decoder_only))
    encoder_decoder = DecoderBlock(num_heads=2, mlp_dim=16, seed=3)
    encoder_decoder(np.zeros((1, 4, 8), "float32"), np.zeros((1, 5, 8), "float32"))
    assert all(layer.built for layer in iter_layers(encoder_decoder))
    # Every sublayer keeps its seed: seed + 2, + 4, + 6 in the order self-attention, cross-attention, feed-forward.
    assert [encoder_decoder.self_attention.seed, encoder_decoder.cross_attention.seed] == [5, 7]
    assert encoder_decoder.feed_forward.seed == decoder_only.feed_forward.seed == 9
    lm = TransformerLM.from_preset("tiny", vocab_size=11, max_length=8)
    lm.compile_for_training()
    lm.train_on_batch(np.ones((2, 8), "int32"), np.ones((2, 8), "int32"))
    assert all(layer.built for layer in iter_layers(lm))
