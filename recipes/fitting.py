"""How every recipe trains: AdamW with warm-up and cosine decay from the shared flags, and the standard callbacks
(resume, checkpoint, log, stop on NaN) that keep a run folder consistent when a run is interrupted.
"""

import math
import os
import sys

import keras

from keras_tfm.callbacks import BackupAndRestore, CSVLogger, LatestCheckpoint, TerminateOnNaN
from recipes import runs
from recipes.runs import BACKUP


def warmup_cosine(peak, total_steps, warmup_fraction=0.1):
    """Linear warm-up to `peak` over the first `warmup_fraction` of the steps, then cosine decay to 0."""
    warmup = int(total_steps * warmup_fraction)
    return keras.optimizers.schedules.CosineDecay(
        0.0 if warmup else peak, decay_steps=max(total_steps - warmup, 1), warmup_target=peak if warmup else None,
        warmup_steps=warmup,
    )


def optimizer_options(args):
    """The keyword arguments every recipe's optimizer takes from the shared flags: `--clipnorm` (0 = none) and
    `--accumulate-steps` (1 = none)."""
    return {"clipnorm": args.clipnorm or None,
            "gradient_accumulation_steps": args.accumulate_steps if args.accumulate_steps > 1 else None}


def adamw(args, total_steps, model=None, schedule=None, **kwargs):
    """AdamW from the recipe flags: warm-up + cosine decay to `--learning-rate` over `total_steps` batches (or
    `schedule`), `--weight-decay`, `--clipnorm`, `--accumulate-steps`; `kwargs` (e.g. `beta_2`) go to
    `keras.optimizers.AdamW`.

    Weight decay skips the model's exempt weights (`model.weight_decay_exempt_variables()`: biases, norms, the
    tables `model.no_weight_decay()` names), unless `--decay-all-weights`."""
    if schedule is None:
        schedule = warmup_cosine(args.learning_rate, total_steps, args.warmup_fraction)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=args.weight_decay, **optimizer_options(args), **kwargs)
    if model is not None and not getattr(args, "decay_all_weights", False):
        model.exclude_from_weight_decay(optimizer)
    return optimizer


# An epoch's files are written together, in this order: its history.csv row, its backup, the latest model. Each is
# written under a temporary name and renamed (keras_tfm.files), so a crash (even SIGKILL) leaves every file whole;
# a crash between two of them leaves the row of an epoch whose backup is not complete, which the resumed run drops
# and writes again (CSVLogger). A Ctrl-C or SIGTERM arriving meanwhile takes effect after the last (`runs.hold`).


class _EpochCSVLogger(CSVLogger):
    def on_epoch_end(self, epoch, logs=None):
        runs.hold()  # released by _EpochModelCheckpoint, the last of the three
        try:
            super().on_epoch_end(epoch, logs)
        except BaseException:
            runs.release()
            raise


class _EpochModelCheckpoint(LatestCheckpoint):
    def on_epoch_end(self, epoch, logs=None):
        try:
            super().on_epoch_end(epoch, logs)
        finally:
            runs.release()


class _EpochBackupAndRestore(BackupAndRestore):
    def on_epoch_end(self, epoch, logs=None):
        try:
            super().on_epoch_end(epoch, logs)
        except BaseException:
            runs.release()
            raise


class _PlannedProgress(keras.callbacks.ProgbarLogger):
    """Keras' progress display, counting the epochs `params` hold at each epoch's start: once a `TimeBudget` has
    planned the run, "Epoch 2/7" says the plan's 7, not `fit`'s upper bound.

    `async_safe`, as Keras' own progress bar is: `fit` adds that one after choosing asynchronous dispatch, so its
    batch hook runs on the helper thread. A `ProgbarLogger` in the list itself would otherwise turn the dispatch off
    on JAX and PyTorch, and the loop would wait for every step."""

    async_safe = True

    def set_params(self, params):
        super().set_params(params)
        self.shared_params = params  # Keras' ProgbarLogger copies what it needs and keeps no reference

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs = self.shared_params.get("epochs", self.epochs)
        super().on_epoch_begin(epoch, logs)


def standard_callbacks(output_dir, extra=()):
    """Log, resume, checkpoint and stop-on-NaN callbacks (keras_tfm's: every file written whole), in the order
    that keeps `history.csv` and the backup in step: an epoch's row is written before its backup. The backup
    stays after `fit` (`common.finish` deletes it once the run's summary is written), so a crash while the
    recipe scores the model resumes with every epoch trained.

    None of them looks at a batch: the training loop never waits for a step to finish, and on JAX and PyTorch
    Keras keeps its asynchronous callback dispatch on (Keras' BackupAndRestore and ModelCheckpoint turn it off
    by having a batch hook at all, even one that does nothing at save_freq="epoch"; TerminateOnNaN by reading the
    loss after every step)."""
    return [
        _EpochCSVLogger(os.path.join(output_dir, "history.csv")),
        _EpochBackupAndRestore(os.path.join(output_dir, BACKUP), delete_backup=False),
        _EpochModelCheckpoint(os.path.join(output_dir, "checkpoint.keras")),
        TerminateOnNaN(),  # at epoch ends: not Keras' own, which waits for every step to finish
        *extra,
        _PlannedProgress(),  # the last: it reads a plan made at the epoch end before
    ]


def compile_for_scoring(model, jit="auto"):
    """Lets `model.predict` compile with XLA where that scored faster: TensorFlow in float32 on a CPU (Keras' "auto"
    keeps XLA off there, for training). The IMDB recipe's scoring in its length buckets ran 1.45x and 2.0x as fast
    (two runs) with XLA as with the graph, which takes the buckets' varying lengths as unknown dimensions
    (benchmarks/imdb_scoring.py, docs/results.md). The bf16 paths keep the graph they trained with (their XLA not
    measured), and so does an explicit `--no-jit` (`jit=False`). Returns whether it switched."""
    if jit != "auto" or keras.backend.backend() != "tensorflow" or model.jit_compile:
        return False
    if model.dtype_policy.name != "float32":
        return False
    model.jit_compile = True
    model.predict_function = None  # made again, now with XLA, by the next predict
    return True


def steps_per_epoch(samples, batch_size):
    return max(1, math.ceil(samples / batch_size))


def fit_verbosity():
    """Keras' progress bar on a terminal (`verbose=1`), one line per epoch in a log file or pipe (`verbose=2`)."""
    return 1 if sys.stdout.isatty() else 2
