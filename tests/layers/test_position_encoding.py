import math

import numpy as np
import pytest

from keras_tfm.layers import sincos_2d_position_encoding, sinusoidal_encoding_at, sinusoidal_position_encoding
from tests.helpers import assert_close, to_numpy


def paper_formula(length, dim, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^(2i/dim)), PE(pos, 2i+1) = cos(pos / base^(2i/dim)), element by element."""
    pe = np.zeros((length, dim))
    for pos in range(length):
        for i in range(dim // 2):
            angle = pos / base ** (2 * i / dim)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize("length,dim,base", [(50, 16, 10000.0), (7, 2, 10000.0), (33, 64, 100.0)])
def test_sinusoidal_matches_the_paper_formula(length, dim, base):
    pe = sinusoidal_position_encoding(length, dim, base=base)
    assert tuple(pe.shape) == (length, dim)
    assert_close(pe, paper_formula(length, dim, base), atol=2e-5)


def offset_map(k, dim, base=10000.0):
    """The (dim, dim) matrix M_k with PE(p + k) = M_k · PE(p) for every p: one 2x2 rotation by the angle
    k / base^(2i/dim) per (sin, cos) channel pair, from sin(a + b) = sin a cos b + cos a sin b and
    cos(a + b) = cos a cos b - sin a sin b. It depends on the offset k only, never on p."""
    m = np.zeros((dim, dim))
    for i in range(dim // 2):
        angle = k / base ** (2 * i / dim)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = math.cos(angle), math.sin(angle)
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -math.sin(angle), math.cos(angle)
    return m


@pytest.mark.parametrize("k", [1, 5, 40])
def test_a_relative_offset_is_one_linear_map_for_every_position(k):
    """The paper's reason for sinusoids (§3.5): "for any fixed offset k, PE(pos+k) can be represented as a linear
    function of PE(pos)", so attention can learn to look k tokens back. Checked over 64 positions and beyond."""
    dim, length = 32, 64
    pe = np.asarray(to_numpy(sinusoidal_position_encoding(length + k, dim)), "float64")
    np.testing.assert_allclose(offset_map(0, dim), np.eye(dim), atol=0)  # no offset: the identity
    np.testing.assert_allclose(pe[:length] @ offset_map(k, dim).T, pe[k:], atol=2e-5)
    # A learned (random) table has no such map: the best linear fit leaves a large error.
    rng = np.random.default_rng(0).normal(size=(length + k, dim))
    fit, *_ = np.linalg.lstsq(rng[:length], rng[k:], rcond=None)
    assert np.abs(rng[:length] @ fit - rng[k:]).max() > 0.5


def test_encoding_at_shifted_positions_is_a_slice_of_the_table():
    table = sinusoidal_position_encoding(20, 8)
    assert_close(sinusoidal_encoding_at(np.arange(5, 9), 8), to_numpy(table)[5:9], atol=1e-6)


def test_sinusoidal_dtype():
    assert "float16" in str(sinusoidal_position_encoding(4, 8, dtype="float16").dtype)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(length=4, dim=7), r"`dim` must be even.*dim=7"),
        (dict(length=4, dim=0), r"`dim` must be a positive integer.*dim=0"),
        (dict(length=0, dim=8), r"`length` must be a positive integer.*length=0"),
        (dict(length=4, dim=8, base=1.0), r"`base` must be a number greater than 1.*base=1.0"),
    ],
)
def test_sinusoidal_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_position_encoding(**kwargs)


def test_2d_layout_rows_then_columns_in_row_major_order():
    height, width, dim = 3, 5, 16
    pe = to_numpy(sincos_2d_position_encoding(height, width, dim))
    assert pe.shape == (height * width, dim)
    row_table, column_table = paper_formula(height, dim // 2), paper_formula(width, dim // 2)
    for r in range(height):
        for c in range(width):
            patch = pe[r * width + c]
            np.testing.assert_allclose(patch[: dim // 2], row_table[r], atol=2e-5)
            np.testing.assert_allclose(patch[dim // 2 :], column_table[c], atol=2e-5)


@pytest.mark.parametrize("height,width,dim", [(4, 4, 64), (2, 7, 8), (1, 3, 4), (14, 14, 4)])
def test_2d_rows_are_distinct_finite_and_bounded(height, width, dim):
    pe = to_numpy(sincos_2d_position_encoding(height, width, dim))
    assert np.all(np.isfinite(pe))
    assert pe.min() >= -1.0 and pe.max() <= 1.0
    distances = np.linalg.norm(pe[:, None, :] - pe[None, :, :], axis=-1)
    off_diagonal = distances[~np.eye(len(pe), dtype=bool)]
    assert off_diagonal.min() > 1e-3  # every patch has its own code


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(height=4, width=4, dim=6), r"divisible by 4.*dim=6"),
        (dict(height=0, width=4, dim=8), r"`height` must be a positive integer.*height=0"),
        (dict(height=4, width=-1, dim=8), r"`width` must be a positive integer.*width=-1"),
    ],
)
def test_2d_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sincos_2d_position_encoding(**kwargs)
