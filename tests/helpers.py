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


# The reverse-digits task: a seq2seq model must output the source digits in reverse order.
START, END, VOCAB, MAX_DIGITS = 1, 2, 13, 8  # digits are ids 3..12


def reverse_digits(samples, seed):
    """Sources: 1..MAX_DIGITS random digits, 0-padded. Targets: START, the digits reversed, END, 0-padding."""
    rng = np.random.default_rng(seed)
    source = np.zeros((samples, MAX_DIGITS), "int32")
    target = np.zeros((samples, MAX_DIGITS + 2), "int32")
    for row in range(samples):
        digits = rng.integers(3, VOCAB, size=rng.integers(1, MAX_DIGITS + 1))
        source[row, : len(digits)] = digits
        target[row, 0], target[row, 1 : len(digits) + 1], target[row, len(digits) + 1] = START, digits[::-1], END
    return source, target


def small_reverser(**kwargs):
    from keras_tfm.models import Seq2SeqTransformer

    args = dict(source_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=MAX_DIGITS + 2, dropout=0.0)
    return Seq2SeqTransformer.from_preset("tiny", **{**args, **kwargs})
