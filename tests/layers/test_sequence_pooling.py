import keras
import numpy as np
import pytest

from keras_tfm.layers import SequencePooling, TokenEmbedding
from tests.helpers import padded_ids, random_floats, to_numpy


def test_output_is_the_softmax_weighted_sum_of_the_tokens():
    pool = SequencePooling()
    x = random_floats(2, 5, 8)
    pooled, weights = pool(x, return_weights=True)
    kernel, bias = to_numpy(pool.score.kernel), to_numpy(pool.score.bias)
    scores = (x @ kernel)[..., 0] + bias  # (2, 5)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(weights), expected, atol=1e-5)
    np.testing.assert_allclose(to_numpy(pooled), np.einsum("bl,bld->bd", expected, x), atol=1e-5)
    assert tuple(pooled.shape) == (2, 8)


def test_padded_tokens_get_no_weight_and_change_nothing():
    ids = padded_ids([6, 3], 6, vocab_size=12)
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, SequencePooling()(TokenEmbedding(12, 8)(inputs)))
    pooled = to_numpy(model(ids))
    changed = ids.copy()
    changed[1, 3:] = 7  # other tokens where sample 1 is padded, masked out by hand below
    embed, pool = model.layers[1], model.layers[2]
    _, weights = pool(embed(ids), mask=ids != 0, return_weights=True)
    assert to_numpy(weights)[1, 3:].max() == 0.0
    np.testing.assert_allclose(to_numpy(pool(embed(changed), mask=ids != 0)), pooled, atol=1e-6)


def test_a_sample_with_no_real_token_gets_uniform_weights():
    _, weights = SequencePooling()(random_floats(1, 4, 8), mask=np.zeros((1, 4), bool), return_weights=True)
    np.testing.assert_allclose(to_numpy(weights), 0.25, atol=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match=r"`tokens` must have rank 3"):
        SequencePooling()(random_floats(2, 8))
    with pytest.raises(TypeError, match=r"unexpected keyword argument `dim`"):
        SequencePooling(dim=8)
