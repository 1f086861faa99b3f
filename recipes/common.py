"""Shared plumbing for the recipes: output folder, distribution, schedules, callbacks, and the files a
finished run leaves behind (the flags are in `recipes.flags`, which parses them before TensorFlow loads). Each recipe reads top to bottom (args -> data -> model -> fit -> evaluate ->
pictures) and calls these helpers for everything that is the same between recipes.

A run writes into `runs/<recipe>/<timestamp>/` (or `--output-dir`):

    model.keras        the trained model            history.csv     one row per epoch
    curves.png         loss / metric curves         summary.json    final metrics, flags, wall time
    checkpoint.keras   the latest epoch's model     backup/         BackupAndRestore state (resume)
    attention/         AttentionMapCallback pictures

Start a killed run again with the same `--output-dir` and it resumes after the last finished epoch; a finished
run (one with `summary.json`) is never overwritten unless `--overwrite` says so.
"""

import csv
import json
import math
import os
import shutil
import sys
import time
from contextlib import contextmanager


def _import_tensorflow_quietly():
    """Imports TensorFlow with file descriptor 2 pointed at /dev/null: its C++ start-up lines (absl, oneDNN, CUDA
    probing) bypass Python and `TF_CPP_MIN_LOG_LEVEL`. Python errors still surface after the import."""
    if "tensorflow" in sys.modules or os.environ.get("KERAS_TFM_SHOW_TF_LOGS"):
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()  # the CUDA probe logs here, once
    except ImportError:
        pass  # another Keras backend without TensorFlow: nothing to quiet
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


_import_tensorflow_quietly()

import keras  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from keras_tfm.data import DataUnavailable  # noqa: E402
from recipes.flags import DISTRIBUTE  # noqa: E402

FINISHED = "summary.json"  # written last by `finish`: its presence means the run is complete


def fit_verbosity():
    """Keras' progress bar on a terminal (`verbose=1`), one line per epoch in a log file or pipe (`verbose=2`)."""
    return 1 if sys.stdout.isatty() else 2


def output_directory(recipe, requested=None, overwrite=False):
    """`requested`, or a new `runs/<recipe>/<timestamp>`; created.

    A folder holding a finished run (its `summary.json`) is never reused silently: the recipe says so and exits
    with status 0, touching nothing, unless `overwrite` (the `--overwrite` flag) asks to delete it and start
    again. A folder of an interrupted run is returned as it is, and training resumes there.
    """
    path = requested or os.path.join("runs", recipe, time.strftime("%Y%m%d-%H%M%S"))
    if os.path.exists(os.path.join(path, FINISHED)):
        if not overwrite:
            print(f"{path} holds a finished {recipe} run ({FINISHED} is there); nothing to do. To train again, "
                  "give a new --output-dir (or none, for a new timestamped folder), or add --overwrite to delete "
                  "this run and start from scratch.")
            raise SystemExit(0)
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    return path


def distribution_strategy(name):
    """The tf.distribute strategy for `--distribute` (requires the TensorFlow backend unless "none")."""
    if name not in DISTRIBUTE:
        raise ValueError(f"`distribute` must be one of {list(DISTRIBUTE)}. Received: {name!r}")
    if name == "none":
        return None
    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"--distribute {name} uses tf.distribute and needs KERAS_BACKEND=tensorflow.")
    import tensorflow as tf

    if name == "mirrored":
        # All local GPUs; on a machine without GPUs, every (logical) CPU device, so the strategy can be tried
        # on a laptop with `tf.config.set_logical_device_configuration`.
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    return tf.distribute.MultiWorkerMirroredStrategy()  # cluster from the TF_CONFIG environment variable


class _NoScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def strategy_scope(strategy):
    """`strategy.scope()`, or a do-nothing context without a strategy."""
    return strategy.scope() if strategy is not None else _NoScope()


def setup(args):
    """Applies the shared flags: seed and dtype policy. Returns the distribution strategy (or None)."""
    keras.utils.set_random_seed(args.seed)
    keras.config.set_dtype_policy(f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32")
    return distribution_strategy(args.distribute)


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


def adamw(args, total_steps, **kwargs):
    """AdamW from the recipe flags: warm-up + cosine decay to `--learning-rate` over `total_steps` batches,
    `--weight-decay`, `--clipnorm`, `--accumulate-steps`; `kwargs` (e.g. `beta_2`) go to `keras.optimizers.AdamW`."""
    return keras.optimizers.AdamW(
        warmup_cosine(args.learning_rate, total_steps, args.warmup_fraction), weight_decay=args.weight_decay,
        **optimizer_options(args), **kwargs,
    )


def standard_callbacks(output_dir, extra=()):
    """Resume, checkpoint, log and stop-on-NaN callbacks, in the order that keeps `history.csv` free of
    repeated epochs: the backup is written before the epoch's CSV row."""
    return [
        keras.callbacks.BackupAndRestore(os.path.join(output_dir, "backup")),
        keras.callbacks.ModelCheckpoint(os.path.join(output_dir, "checkpoint.keras")),
        keras.callbacks.CSVLogger(os.path.join(output_dir, "history.csv"), append=True),
        keras.callbacks.TerminateOnNaN(),
        *extra,
    ]


def read_history(output_dir):
    """`history.csv` as {column: list of floats} (all epochs, including those before a resume)."""
    path = os.path.join(output_dir, "history.csv")
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    return {key: [float(row[key]) for row in rows] for key in (rows[0] if rows else {})}


def plot_curves(history, path):
    """Loss and metric curves (train and validation) from a {name: values} history; saved as PNG."""
    names = sorted({name.removeprefix("val_") for name in history if name != "epoch" and name != "learning_rate"})
    figure = Figure(figsize=(5 * max(len(names), 1), 3.5))
    axes = np.atleast_1d(figure.subplots(1, max(len(names), 1)))
    epochs = history.get("epoch", list(range(len(next(iter(history.values()), [])))))
    for ax, name in zip(axes, names):
        for key, label in ((name, "train"), (f"val_{name}", "validation")):
            if key in history:
                ax.plot(np.asarray(epochs) + 1, history[key], marker="o", label=label)
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def finish(model, output_dir, args, metrics, started, extra=None):
    """Saves `model.keras`, `curves.png` and `summary.json` (metrics, flags, wall time and the `extra` dict);
    returns the summary dict."""
    model.save(os.path.join(output_dir, "model.keras"))
    plot_curves(read_history(output_dir), os.path.join(output_dir, "curves.png"))
    summary = {
        "metrics": {name: float(value) for name, value in metrics.items()},
        "flags": {name: value for name, value in vars(args).items()},
        "wall_time_seconds": round(time.time() - started, 1),
        "backend": keras.backend.backend(),
        **(extra or {}),
    }
    with open(os.path.join(output_dir, "summary.json"), "w") as file:
        json.dump(summary, file, indent=2, default=str)
    return summary


def steps_per_epoch(samples, batch_size):
    return max(1, math.ceil(samples / batch_size))


@contextmanager
def exit_when_data_unavailable():
    """Inside a recipe's `main`: a `DataUnavailable` raised in the block is printed, argparse-style, and the
    process exits with status 2."""
    try:
        yield
    except DataUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


# --------------------------------------------------------------------------------------------------------------
# A time budget (`--time-budget MINUTES`): train as many epochs as fit, with a learning-rate schedule planned for
# exactly those epochs, so that a one-hour run is a proper short schedule, not the first hour of a long one.


@keras.saving.register_keras_serializable(package="recipes")
class PlannedWarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """`warmup_cosine` whose length can be changed during training: `plan(total_steps)`.

    The number of steps is a Keras variable that the schedule reads at every step, so a new plan reaches the
    compiled training step (a Python number would be frozen into it when it is traced): on TensorFlow, with or
    without XLA, and on JAX without `jit_compile` (a jitted JAX step sees only model and optimizer variables,
    so `TimeBudget` refuses that combination). Warm-up is
    `warmup_fraction` of the planned steps, then cosine decay to 0 at the last planned step; past it, 0.

    A `.keras` file saved with this schedule loads where `recipes.common` is imported (or with `compile=False`).
    """

    def __init__(self, peak, total_steps, warmup_fraction=0.1):
        self.peak = float(peak)
        self.warmup_fraction = float(warmup_fraction)
        self.total_steps = keras.Variable(max(int(total_steps), 1), dtype="int64", trainable=False,
                                          name="planned_total_steps")

    def plan(self, total_steps):
        """Sets the number of steps the schedule runs for (at least 1)."""
        self.total_steps.assign(max(int(total_steps), 1))

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        total = keras.ops.cast(self.total_steps, "float32")
        warmup = keras.ops.floor(total * self.warmup_fraction)
        rising = self.peak * step / keras.ops.maximum(warmup, 1.0)
        progress = keras.ops.clip((step - warmup) / keras.ops.maximum(total - warmup, 1.0), 0.0, 1.0)
        falling = 0.5 * self.peak * (1.0 + keras.ops.cos(math.pi * progress))
        return keras.ops.where(step < warmup, rising, falling)

    def get_config(self):
        return {"peak": self.peak, "total_steps": int(keras.ops.convert_to_numpy(self.total_steps)),
                "warmup_fraction": self.warmup_fraction}


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the epoch that reaches `minutes`, and plans `schedule` for the epochs that fit.

    After the first epoch (of this `fit`), the epochs that still fit in the budget are estimated from its
    duration; training is planned to end after them (at most `fit`'s `epochs`), and `schedule.plan` gets that
    many steps, so the learning rate reaches 0 at the planned end. The budget counts `fit` from its start:
    training and validation, not data loading or model building. The first training step, which traces and
    compiles the step function, is left out of the estimate (its time is replaced by that of an average step);
    validation's own tracing is not, so the estimate is on the safe side. If later epochs turn out slower,
    training still stops at the end of the epoch that reaches the budget. The first epoch itself runs on the schedule made before
    (`--epochs` long), which only makes its warm-up slower. A resumed run gets the whole budget again.

    Args:
        minutes: the budget.
        schedule: a `PlannedWarmupCosine` (or anything with `plan(total_steps)`), or None to only stop.
        clock: a function returning seconds (tests pass a fake one).
        verbose: whether to print the plan.
    """

    def __init__(self, minutes, schedule=None, clock=time.monotonic, verbose=True):
        super().__init__()
        if not minutes > 0:
            raise ValueError(f"`minutes` must be a positive number. Received: minutes={minutes!r}")
        self.minutes = minutes
        self.schedule = schedule
        self.clock = clock
        self.verbose = verbose
        self.planned_epochs = None

    def on_train_begin(self, logs=None):
        if self.schedule is not None and keras.backend.backend() == "jax" and getattr(self.model, "jit_compile", False):
            # JAX passes only the model's and optimizer's variables into a jitted step; the schedule's own
            # variable would be frozen at its first value there.
            raise ValueError("TimeBudget cannot re-plan the learning rate inside a jit-compiled JAX training step. "
                             "Compile with jit_compile=False (no --jit) or use the TensorFlow backend.")
        self.started = self.clock()
        self.planned_epochs = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_started = self.clock()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.planned_epochs is None:
            self.last_step_ended = self.clock()
            if self.steps == 1:
                self.first_step_ended = self.last_step_ended

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        elapsed, budget = now - self.started, 60.0 * self.minutes
        if self.planned_epochs is None:
            seconds = now - self.epoch_started
            if self.steps > 1:  # the first step, with tracing and compilation, counted as an average one
                average_step = (self.last_step_ended - self.first_step_ended) / (self.steps - 1)
                seconds -= (self.first_step_ended - self.epoch_started) - average_step
            seconds = max(seconds, 1e-9)
            more = max(int((budget - elapsed) // seconds), 0)  # whole epochs of this length still fitting
            most = self.params.get("epochs") if self.params else None
            self.planned_epochs = min(epoch + 1 + more, most) if most else epoch + 1 + more
            if self.schedule is not None:
                self.schedule.plan(self.planned_epochs * self.steps)
            if self.verbose:
                print(f"time budget {self.minutes:g} min: {elapsed:.0f} s used by the first epoch, about "
                      f"{seconds:.0f} s per epoch from now on, so training is planned for {self.planned_epochs} "
                      f"epochs of {self.steps} steps")
        if elapsed >= budget or epoch + 1 >= self.planned_epochs:
            self.model.stop_training = True
