"""What the in-`fit` checks of token ids and labels cost per training step, side by side in one process.

A ready model's `fit` on a `tf.data` pipeline maps its `data_checks` onto every batch
(`keras_tfm.checks.DataChecks.pipeline`): two reductions per id or label tensor and a `tf.cond`, in the pipeline's
threads (Python runs only for a bad batch). This trains the same model on
the same pipeline with the check (`checked`: `model.fit` as users call it) and without it (`unchecked`: the same
call with `DataChecks.pipeline` replaced by the identity for the run), in alternating rounds (ABAB after one
warm-up round each); one epoch of `--steps` batches per round, timed from the epoch's start to its end. The
smallest recipe models are the worst case: the cheaper the step, the larger the check's share. On two busy cores
the step times move by a few percent from round to round, so the table also gives the pipeline alone (drawing
every batch without training, best of 5): the check's own cost per batch, beside the step's.

* `imdb tiny`: the IMDB recipe's default `TextClassifier` ("tiny", 20,000 words), batch 64 x 256 tokens;
* `reverse_digits tiny`: the reverse-digits `Seq2SeqTransformer` ("tiny"), batch 64, strings of up to 10 digits
  (source ids, target ids and target labels: three checked tensors per batch).

A user's own model gets no check before its step; its `TokenEmbedding` checks the ids inside the compiled step
instead (`check_ids`, an assertion in TensorFlow's graph, a host callback under `jax.jit`). `--own` times that:

* `own model`: a functional model of `TokenEmbedding` (20,000 words, 256 positions) and two `EncoderBlock`s
  (dim 64), mean-pooled, batch 64 x 256, fitted on arrays; `check_ids=True` against a copy with `check_ids=False`
  and the same weights, alternating rounds as above.

    python benchmarks/data_checks.py                  # TensorFlow
    KERAS_BACKEND=jax python benchmarks/data_checks.py
    KERAS_BACKEND=jax python benchmarks/data_checks.py --own --steps 30 --rounds 6
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_tfm.data import digits  # noqa: E402
from keras_tfm.layers import EncoderBlock, TokenEmbedding  # noqa: E402
from keras_tfm import checks  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer, TextClassifier  # noqa: E402


class EpochTimer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.started


def imdb_setup(steps, batch=64, length=256, vocab=20000):
    rng = np.random.default_rng(0)
    x = rng.integers(1, vocab, (steps * batch, length)).astype("int32")
    y = rng.integers(0, 2, steps * batch)
    model = TextClassifier.from_preset("tiny", vocab_size=vocab, max_length=length, num_classes=2)
    model.compile(keras.optimizers.Adam(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(tf.data.AUTOTUNE)


def reverse_digits_setup(steps, batch=64):
    source, target = digits.make_dataset(steps * batch, 10, "reverse", seed=0)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                           target_vocab_size=digits.VOCAB_SIZE, max_length=12)
    model.compile_for_training()
    dataset = tf.data.Dataset.from_tensor_slices(((source, target[:, :-1]), target[:, 1:]))
    return model, dataset.batch(batch).prefetch(tf.data.AUTOTUNE)


SETUPS = {"imdb tiny": imdb_setup, "reverse_digits tiny": reverse_digits_setup}


def epoch_seconds(model, dataset, checked):
    timer = EpochTimer()
    original = checks.DataChecks.pipeline
    if not checked:
        checks.DataChecks.pipeline = lambda self, data: data
    try:
        model.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    finally:
        checks.DataChecks.pipeline = original
    return timer.seconds


def pipeline_microseconds(model, dataset, checked, repeats=5):
    """Microseconds per batch to draw the whole pipeline (no training): what the check itself adds per batch."""
    data = model.data_checks.pipeline(dataset) if checked else dataset
    best = float("inf")
    for _ in range(repeats):
        started, batches = time.perf_counter(), 0
        for _ in data:
            batches += 1
        best = min(best, (time.perf_counter() - started) / batches * 1e6)
    return best


def own_model(check_ids, vocab=20000, length=256, dim=64):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((length,), dtype="int32")
    x = TokenEmbedding(vocab, dim, max_length=length, check_ids=check_ids)(inputs)
    for _ in range(2):
        x = EncoderBlock(num_heads=2, mlp_dim=2 * dim)(x)
    outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def check_alone_microseconds(batch=64, length=256, vocab=20000, repeats=300):
    """Microseconds per call of a compiled function of one batch of ids, without and with the in-step check
    (best of `repeats`): the check's own cost, which the step times above cannot resolve."""
    ids = keras.ops.convert_to_tensor(np.random.default_rng(0).integers(1, vocab, (batch, length)).astype("int32"))

    def plain(x):
        return keras.ops.sum(x)

    def checked(x):
        return keras.ops.sum(checks.token_ids_in_step("inputs", x, vocab, "token_embedding", training=True))

    if keras.backend.backend() == "jax":
        import jax

        compile_, finish = jax.jit, lambda out: out.block_until_ready()
    else:
        compile_, finish = tf.function, lambda out: out.numpy()
    best = {}
    for name, function in (("plain", compile_(plain)), ("checked", compile_(checked))):
        finish(function(ids))  # compiles
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            finish(function(ids))
            times.append(time.perf_counter() - started)
        best[name] = min(times) * 1e6
    return best["plain"], best["checked"]


def own_model_table(steps, rounds, batch=64, length=256, vocab=20000):
    """Step rates of a user's own model with and without the in-step id check, and the cost per step."""
    rng = np.random.default_rng(0)
    x = rng.integers(1, vocab, (steps * batch, length)).astype("int32")
    y = rng.integers(0, 2, steps * batch)
    models = {flag: own_model(flag, vocab, length) for flag in (False, True)}

    def epoch_seconds_of(check_ids):
        timer = EpochTimer()
        models[check_ids].fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[timer])
        return timer.seconds

    times = timing.interleaved(epoch_seconds_of, (False, True), rounds)
    plain, checked = statistics.median(times[False]), statistics.median(times[True])
    print("| model | check_ids=False (steps/s) | check_ids=True (steps/s) | cost per step |")
    print("|---|---|---|---|")
    print(f"| own model, batch {batch} x {length} | {steps / plain:.2f} | {steps / checked:.2f} | "
          f"{checked / plain - 1:+.1%} |")
    print("rounds (s), unchecked:", [round(t, 2) for t in times[False]], "checked:", [round(t, 2) for t in times[True]])
    plain_us, checked_us = check_alone_microseconds(batch, length, vocab)
    share = (checked_us - plain_us) * 1e-6 / (plain / steps)  # of an unchecked step
    print(f"the check alone, one batch of ids in a compiled function (best of 300): {plain_us:.0f} µs without, "
          f"{checked_us:.0f} µs with: {checked_us - plain_us:+.0f} µs, {share:.2%} of a step")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="batches per timed epoch")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per setup (after one warm-up)")
    parser.add_argument("--models", nargs="+", choices=sorted(SETUPS), default=sorted(SETUPS))
    parser.add_argument("--own", action="store_true", help="time a user's own model's in-step id check instead")
    args = timing.parse_args(parser, argv, quick=dict(steps=2, rounds=1, models=["reverse_digits tiny"]))
    print(f"{keras.backend.backend()} backend, {args.steps} steps per epoch, {args.rounds} rounds, median")
    if args.own:
        own_model_table(args.steps, args.rounds)
        return
    print("| model | unchecked (steps/s) | checked (steps/s) | cost per step | pipeline alone: µs per batch, "
          "unchecked / checked |")
    print("|---|---|---|---|---|")
    for name in args.models:
        model, dataset = SETUPS[name](args.steps)
        times = timing.interleaved(lambda checked: epoch_seconds(model, dataset, checked), (False, True), args.rounds)
        plain, checked = statistics.median(times[False]), statistics.median(times[True])
        alone = [pipeline_microseconds(model, dataset, flag) for flag in (False, True)]
        print(f"| {name} | {args.steps / plain:.1f} | {args.steps / checked:.1f} | {checked / plain - 1:+.1%} | "
              f"{alone[0]:.0f} / {alone[1]:.0f} |")


if __name__ == "__main__":
    main()
