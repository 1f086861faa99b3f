import keras
import numpy as np
import pytest

from keras_tfm.layers import EncoderBlock, TokenEmbedding
from tests.helpers import assert_close, padded_ids, random_floats, to_numpy


def text_encoder(norm_first=True):
    ids = keras.Input((None,), dtype="int32")
    x = TokenEmbedding(30, 16)(ids)
    x = EncoderBlock(4, 32, norm_first=norm_first)(x)
    x = EncoderBlock(4, 32, norm_first=norm_first)(x)
    return keras.Model(ids, x)


@pytest.mark.parametrize("norm_first", [True, False])
def test_extra_padding_does_not_change_real_tokens(norm_first):
    model = text_encoder(norm_first)
    ids = padded_ids([5], 5, vocab_size=30)
    padded = np.concatenate([ids, np.zeros((1, 7), "int32")], axis=1)
    assert_close(to_numpy(model(padded))[:, :5], model(ids), atol=1e-5)


def test_a_sample_alone_equals_the_same_sample_in_a_padded_batch():
    model = text_encoder()
    batch = padded_ids([3, 8, 5], 8, vocab_size=30)
    out = to_numpy(model(batch))
    for row, length in enumerate([3, 8, 5]):
        assert_close(out[row, :length], to_numpy(model(batch[row : row + 1, :length]))[0], atol=1e-5)


def test_post_norm_normalises_the_output_and_pre_norm_does_not():
    x = random_floats(2, 6, 16) * 5 + 3
    post = to_numpy(EncoderBlock(4, 32, norm_first=False)(x))
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-4)
    np.testing.assert_allclose(post.std(-1), 1.0, atol=1e-2)
    pre = to_numpy(EncoderBlock(4, 32)(x))
    assert np.abs(pre.mean(-1)).max() > 0.5  # the residual stream keeps its offset


def test_returns_attention_scores():
    block = EncoderBlock(4, 32)
    x = random_floats(2, 6, 16)
    out, scores = block(x, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 4, 6, 6)
    np.testing.assert_allclose(to_numpy(scores).sum(-1), 1.0, atol=1e-5)
    assert_close(out, block(x))


def test_attention_mask_and_implicit_padding_mask_combine():
    ids = keras.Input((None,), dtype="int32")
    allowed = keras.Input((None, None), dtype="bool")
    x = TokenEmbedding(30, 16)(ids)
    out, scores = EncoderBlock(4, 32)(x, attention_mask=allowed, return_attention_scores=True)
    model = keras.Model([ids, allowed], scores)
    batch = padded_ids([4], 6, vocab_size=30)
    diagonal_band = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]) <= 1
    weights = to_numpy(model([batch, diagonal_band[None]]))[0, :, :4]  # the 4 real queries
    assert weights[:, ~diagonal_band[:4]].max() < 1e-6  # the explicit mask holds
    assert weights[:, :, 4:].max() < 1e-6  # and so does the padding mask of the embedded ids


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`dim` \(10\) must be divisible by `num_heads` \(4\)"):
        EncoderBlock(4, 32)(random_floats(2, 3, 10))
    with pytest.raises(ValueError, match=r"`x` must have rank 3.*\(2, 10\)"):
        EncoderBlock(2, 32)(random_floats(2, 10))
    with pytest.raises(ValueError, match=r"`mlp_dim` must be a positive integer.*mlp_dim=-4"):
        EncoderBlock(2, -4)
    with pytest.raises(ValueError, match=r"`drop_path` must be a number in \[0, 1\)"):
        EncoderBlock(2, 4, drop_path=2.0)


def test_locality_reaches_the_attention_and_a_misspelling_names_it():
    block = EncoderBlock(2, 16, locality=True)
    assert block.attention.locality and block.get_config()["locality"] is True
    _, scores = block(random_floats(2, 5, 8), return_attention_scores=True)
    assert np.all(np.diagonal(to_numpy(scores), axis1=-2, axis2=-1) == 0.0)
    with pytest.raises(TypeError, match=r"unexpected keyword argument `localty`.*Did you mean `locality`"):
        EncoderBlock(2, 16, localty=True)
