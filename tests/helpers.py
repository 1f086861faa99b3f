"""Shared test helpers (backend-agnostic: NumPy and keras.ops only)."""

import csv
import importlib.util
import os
import pathlib
import sys

import keras
import numpy as np
from keras import ops

from keras_tfm.data import digits

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(path):
    """A script of the repository that is not in a package (`benchmarks/fast_path.py`, `docs/make_pictures.py`),
    imported afresh from its file, `path` relative to the repository root. It is registered in `sys.modules` under
    its file's stem: tf.data's AutoGraph reads a module's source through it."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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


# The reverse-digits task (keras_tfm.data.digits): a seq2seq model must output the source digits reversed.
START, END, VOCAB, MAX_DIGITS = digits.START, digits.END, digits.VOCAB_SIZE, 8


def reverse_digits(samples, seed):
    """Sources: 1..MAX_DIGITS digits, 0-padded; targets: start, the digits reversed, end, 0-padding."""
    return digits.make_dataset(samples, MAX_DIGITS, "reverse", seed=seed)


def small_reverser(**kwargs):
    from keras_tfm.models import Seq2SeqTransformer

    args = dict(source_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=MAX_DIGITS + 2, dropout=0.0)
    return Seq2SeqTransformer.from_preset("tiny", **{**args, **kwargs})


# Recipe runs: interrupting one after its first epoch, and reading the epochs its history.csv logged.


class Interrupt(Exception):
    pass


class InterruptAfterFirstEpoch(keras.callbacks.Callback):
    """Behaves like a process killed right after epoch 1 has been backed up and logged."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            raise Interrupt()


def greedy_without_cache(model, prompt, steps):
    """Greedy decoding the slow way, the reference for the cached loop: the whole sequence through the language
    model for every new token. The sequence is kept at its final length, zeros after the tokens so far, so every
    call has the same shape (JAX compiles each new shape anew); the causal mask keeps those zeros out of the
    logits at the last real position. Returns the prompt and `steps` new tokens (padding, id 0, is never chosen)."""
    ids = np.zeros((1, len(prompt) + steps), "int32")
    ids[0, : len(prompt)] = prompt
    for position in range(len(prompt), len(prompt) + steps):
        logits = to_numpy(model(ids))[0, position - 1, 1:]
        ids[0, position] = 1 + np.argmax(logits)
    return ids[0]


def epochs_in(output_dir):
    with open(os.path.join(output_dir, "history.csv")) as file:
        return [int(row["epoch"]) for row in csv.DictReader(file)]


def never_waits(callback):
    """Keras' rule for asynchronous dispatch (`keras.callbacks.CallbackList`): a callback that says it is
    `async_safe`, or has no batch-end hook, lets the step run on without waiting for it."""
    base = keras.callbacks.Callback
    return bool(getattr(callback, "async_safe", False)) or all(
        getattr(type(callback), hook) is getattr(base, hook) for hook in ("on_batch_end", "on_train_batch_end"))
