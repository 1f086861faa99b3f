"""Training steps/s of the small recipe models, the old way and the new: what per-step host syncs, callback
dispatch and `steps_per_execution` cost, side by side in one process.

Setups of the same model train in alternating rounds (ABAB, after a warm-up round each), one epoch of
`--steps` batches per round, with the recipes' own callbacks writing into a temporary folder; the time from the
start of an epoch to its end is measured (the steps and whatever they wait for, not the checkpoint after them):

* `before`: what the recipes did until 2026-12: Keras' `BackupAndRestore`, `ModelCheckpoint` (batch hooks that
  do nothing at save_freq="epoch" but turn off Keras' asynchronous callback dispatch) and `TerminateOnNaN` (reads
  the loss after every step), the old per-step `TimeBudget` hook, one step per call into the compiled function,
  `jit_compile=False`;
* `after`: the defaults now: `common.standard_callbacks` (async-safe checkpoints, `keras_tfm.callbacks.
  TerminateOnNaN` at epoch ends), the async-safe `TimeBudget`, `steps_per_execution` = `--steps-per-execution`
  (1 on PyTorch, which supports nothing else) and
  `jit_compile="auto"` (jax.jit on JAX; a TensorFlow graph without XLA on a CPU; eager on PyTorch).
* `after, jit as before`: the same but `jit_compile=False`, to separate the compiler from the rest.

Models: the reverse-digits `Seq2SeqTransformer` ("tiny", batch 64, strings of up to 10 digits) and the CIFAR-10
ViT (`--preset cifar10_cpu`, batch 128, random 32x32 images), both at their recipes' shapes.

    python benchmarks/step_overhead.py                      # TensorFlow
    KERAS_BACKEND=jax python benchmarks/step_overhead.py
    KERAS_BACKEND=torch python benchmarks/step_overhead.py --models reverse_digits
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from recipes import common  # noqa: E402  (imports TensorFlow quietly)
from recipes import cifar10_vit  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm.callbacks import GradientNormCallback  # noqa: E402
from keras_tfm.data import digits  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer  # noqa: E402


class EpochTimer(keras.callbacks.Callback):
    """Seconds from the start of the epoch to its end, before any other callback's end-of-epoch work (listed
    first): the training steps and what they wait for, not the checkpoint written after them."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.started


class PerStepBudget(keras.callbacks.Callback):
    """The old `TimeBudget`'s per-step hook: a clock read after every step (not async-safe)."""

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.monotonic()


def reverse_digits_setup(jit, steps_per_execution, steps, batch=64):
    keras.utils.set_random_seed(0)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                           target_vocab_size=digits.VOCAB_SIZE, max_length=12, dropout=0.0)
    model.compile_for_training(optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0), jit_compile=jit,
                               steps_per_execution=steps_per_execution)
    x, y = digits.make_dataset(steps * batch, 10, seed=0)
    return model, ((x, y[:, :-1]), y[:, 1:]), batch


def vit_setup(jit, steps_per_execution, steps, batch=128):
    keras.utils.set_random_seed(0)
    args = cifar10_vit.parse_args(["--preset", "cifar10_cpu"])
    model = cifar10_vit.build_model(args, 10)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1),
                  metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")], jit_compile=jit,
                  steps_per_execution=steps_per_execution)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (steps * batch, 32, 32, 3)).astype("float32")
    labels = keras.utils.to_categorical(rng.integers(0, 10, steps * batch), 10)
    return model, (images, labels), batch


SETUPS = {"reverse_digits": reverse_digits_setup, "vit_cifar10_cpu": vit_setup}


def callbacks_for(variant, folder):
    os.makedirs(folder)
    if variant == "before":  # Keras' own: each has a batch hook, which turns asynchronous dispatch off
        return [GradientNormCallback(), keras.callbacks.BackupAndRestore(os.path.join(folder, "backup")),
                keras.callbacks.ModelCheckpoint(os.path.join(folder, "checkpoint.keras")),
                keras.callbacks.CSVLogger(os.path.join(folder, "history.csv"), append=True),
                keras.callbacks.TerminateOnNaN(), PerStepBudget()]
    return [GradientNormCallback(), *common.standard_callbacks(folder), common.TimeBudget(10_000, verbose=False)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    parser.add_argument("--steps", type=int, default=160, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per setup, after one warm-up round")
    parser.add_argument("--steps-per-execution", type=int, default=None,
                        help="for the `after` setups; default: the recipes' (common.steps_per_execution)")
    args = parser.parse_args(argv)
    backend = keras.backend.backend()
    spe = args.steps_per_execution or common.default_steps_per_execution()
    variants = {"before": (False, 1), "after": ("auto", spe), "after, jit as before": (False, spe)}
    print(f"{backend} backend, {os.cpu_count()} CPU cores visible, steps_per_execution {spe} in `after`")
    for name in args.models:
        runs = {}
        for variant, (jit, steps_per_execution) in variants.items():
            model, (x, y), batch = SETUPS[name](jit, steps_per_execution, args.steps)
            runs[variant] = (model, x, y, batch, tempfile.mkdtemp())
        seconds = {variant: [] for variant in variants}
        for round_ in range(args.rounds + 1):
            for variant, (model, x, y, batch, folder) in runs.items():
                timer = EpochTimer()
                callbacks = [timer] + callbacks_for(variant, os.path.join(folder, str(round_)))
                model.fit(x, y, batch_size=batch, epochs=1, callbacks=callbacks, verbose=0)
                if round_:  # round 0 traces and compiles
                    seconds[variant].append(timer.seconds)
        base = statistics.median(seconds["before"])
        print(f"\n{name}: {args.steps} steps per round, median of {args.rounds} rounds")
        for variant, times in seconds.items():
            median = statistics.median(times)
            print(f"  {variant:<22s} {args.steps / median:7.1f} steps/s   {base / median:4.2f}x before")


if __name__ == "__main__":
    main()
