import numpy as np
import pytest

from keras_tfm.layers import attention_mask_from_torch, causal_mask
from tests.helpers import to_numpy


def test_causal_mask_is_lower_triangular():
    np.testing.assert_array_equal(to_numpy(causal_mask(4)), np.tril(np.ones((4, 4))))


def test_causal_mask_with_offset_sees_the_cached_prefix_only():
    # Two new queries at positions 3 and 4 of a 6-slot cache.
    expected = [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]]
    np.testing.assert_array_equal(to_numpy(causal_mask(2, 6, offset=3)), expected)


def test_torch_boolean_mask_is_inverted():
    blocked = np.array([[False, True, False], [True, False, False]])
    np.testing.assert_array_equal(to_numpy(attention_mask_from_torch(blocked)), ~blocked)


def test_torch_additive_mask_is_converted():
    additive = np.array([[0.0, -np.inf], [0.0, 0.0]], dtype="float32")
    np.testing.assert_array_equal(to_numpy(attention_mask_from_torch(additive)), [[1, 0], [1, 1]])


def test_torch_integer_mask_is_rejected():
    with pytest.raises(TypeError, match="dtype=int"):
        attention_mask_from_torch(np.array([[0, 1]], dtype="int32"))


def test_same_position_is_the_diagonal_shifted_by_the_offset():
    from keras_tfm.layers import same_position

    np.testing.assert_array_equal(to_numpy(same_position(2, 3)), [[1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(to_numpy(same_position(1, 4, offset=2)), [[0, 0, 1, 0]])
