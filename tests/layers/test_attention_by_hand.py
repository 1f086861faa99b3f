"""docs/attention_by_hand.md: the worked example's numbers are what MultiHeadAttention computes."""

import math
import pathlib
import re

import numpy as np
import pytest

from keras_tfm.layers import MultiHeadAttention
from tests.helpers import to_numpy

PAGE = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "attention_by_hand.md").read_text(encoding="utf-8")

# The page's inputs (rows = tokens) and the numbers it works out by hand, rounded to 3 decimals as printed.
Q = np.array([[2, 0, 2, 0], [0, 1, 0, 1], [1, 1, 1, 1]], "float32")
K = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], "float32")
V = np.array([[1, 0], [0, 1], [1, 1]], "float32")
HAND_SCORES = [[4, 0, 2], [0, 2, 1], [2, 2, 2]]
HAND_WEIGHTS = [[0.665, 0.090, 0.245], [0.186, 0.506, 0.307], [0.333, 0.333, 0.333]]
HAND_OUTPUT = [[0.910, 0.335], [0.494, 0.814], [0.667, 0.667]]


def _matrix_on_page(name):
    """The numbers of the ```-block on the page that starts with `name =`."""
    block = re.search(rf"^{re.escape(name)} = (\[\[.*?\]\])", PAGE, flags=re.S | re.M).group(1)
    return np.array([[float(v) for v in re.findall(r"[-\d.]+", row)] for row in block.split("],")])


def hand_layer():
    """One head whose projections are the page's Q, K and V (the tokens are one-hot) and whose output
    projection is the identity, so the layer's output is the attention output itself."""
    layer = MultiHeadAttention(num_heads=1, key_dim=4, value_dim=2, output_dim=2, use_bias=False)
    tokens = np.eye(3, dtype="float32")[None]  # (1 sample, 3 tokens, width 3)
    layer(tokens, return_attention_scores=True)  # builds it
    layer.set_weights([Q[:, None, :], K[:, None, :], V[:, None, :], np.eye(2, dtype="float32")[None]])
    return layer, tokens


def test_the_page_shows_the_numbers_this_test_checks():
    assert _matrix_on_page("QKᵀ").tolist() == HAND_SCORES
    np.testing.assert_array_equal(_matrix_on_page("weights"), HAND_WEIGHTS)
    np.testing.assert_array_equal(_matrix_on_page("output"), HAND_OUTPUT)
    np.testing.assert_array_equal(Q @ K.T, HAND_SCORES)


def test_multi_head_attention_computes_the_hand_worked_example():
    layer, tokens = hand_layer()
    output, weights = layer(tokens, return_attention_scores=True)  # the explicit path
    np.testing.assert_allclose(to_numpy(weights)[0, 0], HAND_WEIGHTS, atol=5e-4)
    np.testing.assert_allclose(to_numpy(output)[0], HAND_OUTPUT, atol=5e-4)
    # Without the 1/√d_k the weights would be sharper: the scaling is really applied.
    unscaled = MultiHeadAttention(num_heads=1, key_dim=4, value_dim=2, output_dim=2, use_bias=False,
                                  attention_scale=1.0)
    unscaled(tokens, return_attention_scores=True)
    unscaled.set_weights(layer.get_weights())
    _, sharp = unscaled(tokens, return_attention_scores=True)
    assert to_numpy(sharp)[0, 0, 0, 0] > 0.8 > HAND_WEIGHTS[0][0]


def test_the_call_without_weights_gives_the_same_output():
    # value_dim (2) differs from key_dim (4): the layer then takes the explicit path, as the fused kernel of some
    # backends (JAX's) wants one head size.
    layer, tokens = hand_layer()
    np.testing.assert_allclose(to_numpy(layer(tokens))[0], HAND_OUTPUT, atol=5e-4)  # no weights requested


@pytest.mark.parametrize("key_dim", [4, 16, 128])
def test_unscaled_logits_have_variance_d_k(key_dim):
    rng = np.random.default_rng(key_dim)
    q = rng.standard_normal((20000, key_dim))  # unit-variance queries and keys
    k = rng.standard_normal((20000, key_dim))
    logits = np.sum(q * k, axis=-1)  # one q·k per pair
    assert logits.var() == pytest.approx(key_dim, rel=0.05)
    # The layer's factor brings them back to variance 1 whatever the head size.
    layer = MultiHeadAttention(num_heads=2, key_dim=key_dim)
    layer(np.zeros((1, 2, 8), "float32"))
    assert layer.logit_scale == pytest.approx(1 / math.sqrt(key_dim))
    assert (logits * layer.logit_scale).var() == pytest.approx(1.0, rel=0.05)
