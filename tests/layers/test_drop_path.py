import numpy as np
import pytest

from keras_tfm.layers import DropPath
from tests.helpers import to_numpy


def test_identity_at_inference():
    x = np.random.rand(8, 3, 4).astype("float32")
    np.testing.assert_array_equal(to_numpy(DropPath(0.5)(x)), x)
    np.testing.assert_array_equal(to_numpy(DropPath(0.0)(x, training=True)), x)


def test_drops_whole_samples_and_rescales_the_rest():
    x = np.ones((400, 3, 4), "float32")
    out = to_numpy(DropPath(0.25, seed=0)(x, training=True))
    per_sample = out.reshape(400, -1)
    assert np.all((per_sample == 0).all(1) | np.isclose(per_sample, 1 / 0.75).all(1))  # all-or-nothing per sample
    dropped = (per_sample == 0).all(1).mean()
    assert 0.15 < dropped < 0.35
    assert abs(out.mean() - 1.0) < 0.1  # expectation preserved


def test_bad_rate():
    with pytest.raises(ValueError, match=r"`rate` must be a number in \[0, 1\).*rate=1.0"):
        DropPath(1.0)
