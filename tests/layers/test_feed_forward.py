import numpy as np
import pytest

from keras_tfm.layers import FeedForward
from tests.helpers import random_floats, to_numpy


def test_is_the_same_mlp_at_every_position():
    ffn = FeedForward(32, activation="relu")
    x = random_floats(2, 5, 8)
    out = to_numpy(ffn(x))
    (w1, b1), (w2, b2) = ((to_numpy(v) for v in layer.weights) for layer in (ffn.hidden, ffn.output_projection))
    expected = np.maximum(x @ w1 + b1, 0.0) @ w2 + b2
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_output_dim():
    assert tuple(FeedForward(32, output_dim=3)(random_floats(2, 5, 8)).shape) == (2, 5, 3)


def test_dropout_only_in_training():
    ffn = FeedForward(32, dropout=0.5, seed=0)
    x = random_floats(2, 5, 8)
    np.testing.assert_array_equal(to_numpy(ffn(x)), to_numpy(ffn(x, training=False)))
    assert not np.allclose(to_numpy(ffn(x, training=True)), to_numpy(ffn(x)))


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`mlp_dim` must be a positive integer.*mlp_dim=0"):
        FeedForward(0)
    with pytest.raises(ValueError, match=r"`dropout` must be a number in \[0, 1\).*dropout=1"):
        FeedForward(4, dropout=1)


def test_activation_dropout_zero_drops_only_after_the_output_projection_as_bert():
    """With `activation_dropout=0.0` each output is either dropped or the inference output scaled by 1/(1-p): no
    unit inside was dropped. With the default (the same rate inside) that no longer holds."""
    x = random_floats(4, 6, 8)
    bert_like = FeedForward(32, dropout=0.5, activation_dropout=0.0, seed=0)
    expected, out = to_numpy(bert_like(x)), to_numpy(bert_like(x, training=True))
    dropped = out == 0.0
    assert 0.2 < dropped.mean() < 0.8
    np.testing.assert_allclose(out[~dropped], 2.0 * expected[~dropped], rtol=1e-5, atol=1e-6)
    vit_like = FeedForward(32, dropout=0.5, seed=0)
    expected, out = to_numpy(vit_like(x)), to_numpy(vit_like(x, training=True))
    assert not np.allclose(out[out != 0.0], 2.0 * expected[out != 0.0], rtol=1e-3, atol=1e-4)
    config = bert_like.get_config()
    assert config["activation_dropout"] == 0.0 and FeedForward.from_config(config).hidden_dropout.rate == 0.0
    assert FeedForward(4, dropout=0.3).hidden_dropout.rate == 0.3  # None: the same rate inside, as before
    with pytest.raises(ValueError, match=r"`activation_dropout` must be a number in \[0, 1\).*activation_dropout=2"):
        FeedForward(4, activation_dropout=2)
