"""Shared test helpers (backend-agnostic: NumPy and keras.ops only)."""

import numpy as np
from keras import ops


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x)).astype("float64")


def assert_close(actual, expected, atol=1e-5, rtol=1e-5):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=atol, rtol=rtol)


def random_floats(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def padded_ids(lengths, max_length, vocab_size=20, seed=0):
    """Random token ids in [1, vocab_size) with 0-padding after each row's length."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(len(lengths), max_length)).astype("int32")
    for row, length in enumerate(lengths):
        ids[row, length:] = 0
    return ids
