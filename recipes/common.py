"""Shared plumbing for the recipes: flags, output folder, distribution, schedules, callbacks, and the files a
finished run leaves behind. Each recipe reads top to bottom (args -> data -> model -> fit -> evaluate ->
pictures) and calls these helpers for everything that is the same between recipes.

A run writes into `runs/<recipe>/<timestamp>/` (or `--output-dir`):

    model.keras        the trained model            history.csv     one row per epoch
    curves.png         loss / metric curves         summary.json    final metrics, flags, wall time
    checkpoint.keras   the latest epoch's model     backup/         BackupAndRestore state (resume)
    attention/         AttentionMapCallback pictures

Start a killed run again with the same `--output-dir` and it resumes after the last finished epoch.
"""

import argparse
import csv
import json
import math
import os
import sys
import time
from contextlib import contextmanager

import keras
import numpy as np
from matplotlib.figure import Figure

from keras_tfm.data import DataUnavailable

DISTRIBUTE = ("none", "mirrored", "multiworker")


def _argument_type(name, convert, accept, expected):
    """An argparse `type`: `convert(text)`, rejected with "must be {expected}" unless `accept(value)`."""

    def parse(text):
        value = convert(text)
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text}")
        return value

    parse.__name__ = name  # argparse names the type in its "invalid ... value" message
    return parse


# argparse types for the recipes' flags (argparse turns the errors into usage errors).
positive_int = _argument_type("positive_int", int, lambda v: v >= 1, "a positive integer")
positive_float = _argument_type("positive_float", float, lambda v: v > 0, "a positive number")
non_negative_float = _argument_type("non_negative_float", float, lambda v: not v < 0, ">= 0")
fraction = _argument_type("fraction", float, lambda v: 0.0 <= v < 1.0, "in [0, 1)")


def recipe_parser(description, epochs, batch_size, learning_rate):
    """An ArgumentParser with the flags every recipe shares."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=positive_int, default=epochs, help="training epochs")
    parser.add_argument("--batch-size", type=positive_int, default=batch_size, help="global batch size")
    parser.add_argument("--learning-rate", type=positive_float, default=learning_rate, help="peak learning rate")
    parser.add_argument("--warmup-fraction", type=fraction, default=0.1,
                        help="fraction of the steps with a linear learning-rate warm-up (then cosine decay)")
    parser.add_argument("--clipnorm", type=float, default=1.0, help="gradient clipping norm (0 turns it off)")
    parser.add_argument("--output-dir", default=None,
                        help="where to write the run (default runs/<recipe>/<timestamp>); an existing run resumes")
    parser.add_argument("--quick", action="store_true", help="a tiny run that finishes in well under a minute on CPU")
    parser.add_argument("--mixed-precision", nargs="?", const="float16", choices=("float16", "bfloat16"), default=None,
                        help="compute in float16 (GPU; the flag alone) or bfloat16 (recent GPUs, TPUs, CPUs with "
                             "AVX512-BF16), keeping float32 weights")
    parser.add_argument("--jit", action="store_true", help="compile training steps with XLA (jit_compile=True)")
    parser.add_argument("--distribute", choices=DISTRIBUTE, default="none",
                        help="tf.distribute strategy: mirrored = all local GPUs, multiworker = read TF_CONFIG")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--no-attention-maps", dest="attention_maps", action="store_false",
                        help="do not draw attention maps during training")
    return parser


def output_directory(recipe, requested=None):
    """`requested`, or a new `runs/<recipe>/<timestamp>`; created."""
    path = requested or os.path.join("runs", recipe, time.strftime("%Y%m%d-%H%M%S"))
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


def adamw(args, total_steps, **kwargs):
    """AdamW from the recipe flags: warm-up + cosine decay to `--learning-rate`, `--weight-decay`, `--clipnorm`
    (0 = no clipping); `kwargs` (e.g. `beta_2`) go to `keras.optimizers.AdamW`."""
    return keras.optimizers.AdamW(
        warmup_cosine(args.learning_rate, total_steps, args.warmup_fraction), weight_decay=args.weight_decay,
        clipnorm=args.clipnorm or None, **kwargs,
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
