import numpy as np
import pytest

from keras_tfm.layers import ClassToken
from tests.helpers import random_floats, to_numpy


def test_prepends_the_learned_token_to_every_sequence():
    layer = ClassToken(initializer="ones")
    x = random_floats(3, 4, 8)
    out = to_numpy(layer(x))
    assert out.shape == (3, 5, 8)
    np.testing.assert_array_equal(out[:, 0], np.ones((3, 8)))
    np.testing.assert_array_equal(out[:, 1:], x)


def test_mask_gets_a_true_for_the_token():
    mask = np.array([[True, True, False]])
    np.testing.assert_array_equal(to_numpy(ClassToken().compute_mask(np.zeros((1, 3, 4)), mask)), [[1, 1, 1, 0]])
    assert ClassToken().compute_mask(np.zeros((1, 3, 4)), None) is None


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"`x` must have rank 3.*\(2, 4\)"):
        ClassToken()(random_floats(2, 4))
