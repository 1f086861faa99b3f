"""A recipe's start and end: `setup` (the shared flags applied), the run folder (`start_run`), and the files a
finished run leaves behind (`finish`). Each recipe reads top to bottom (args -> data -> model -> fit -> evaluate
-> pictures) and calls these for what is the same between recipes. The rest of the recipes' plumbing has a module
per job: `flags` (argparse), `devices` (devices, `--distribute`, feeding `fit`),
`fast_paths` (the measured fastest policy, compile options), `fitting` (AdamW, the standard callbacks), `runs`
(a run's record: start, stop, resume) and `progress`. What a saved model or your own training needs is library
code, in `keras_tfm`.

A run writes into `runs/<recipe>/<timestamp>/` (or `--output-dir`):

    model.keras        the trained model            history.csv     one row per epoch
    curves.png         loss / metric curves         summary.json    final metrics, flags, wall time
    checkpoint.keras   the latest epoch's model     backup/         BackupAndRestore state (resume)
    attention/         AttentionMapCallback pictures

Start a killed run again with the same `--output-dir` and it resumes after the last finished epoch; a finished
run (one with `summary.json`) is never overwritten unless `--overwrite` says so.

With `--distribute multiworker` every worker runs the same command (TF_CONFIG tells each one its part) and
trains on its share of every global batch; only the chief writes the run folder. Every other worker writes the
same files, as it must (saving may need every worker), into a folder of its own beside it,
`<run folder>.worker_<index>`: that folder holds its `backup/` while the run is unfinished, and `finish`
deletes it at the end (the TensorFlow multi-worker guide's `workertemp_` folders).
"""

import csv
import os
import shutil
import sys
import time
from contextlib import contextmanager

import keras
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from keras_tfm import files, hardware
from keras_tfm.data import DataUnavailable
from keras_tfm.insight.visualize import save_figure
from recipes import devices, fast_paths, runs

FINISHED = runs.FINISHED  # written last by `finish`: its presence means the run is complete


def output_directory(recipe, requested=None, overwrite=False):
    """`requested`, or a new `runs/<recipe>/<timestamp>`; created.

    A folder holding a finished run (its `summary.json`) is never reused silently: the recipe says so and exits
    with status 0, touching nothing, unless `overwrite` (the `--overwrite` flag) asks to delete it and start
    again. A folder of an interrupted run is returned as it is, and training resumes there. A non-chief worker
    of a multi-worker run gets its own temporary folder beside it (see the module docstring).
    """
    path = requested or os.path.join("runs", recipe, time.strftime("%Y%m%d-%H%M%S"))
    finished = os.path.exists(os.path.join(path, FINISHED))
    if finished and not overwrite:
        owner = runs.finished_recipe(path) or recipe  # runs finished before summaries named their recipe
        hint = "" if owner == recipe else f" (not a {recipe} one)"
        print(f"{path} holds a finished {owner} run{hint} ({FINISHED} is there); nothing to do. To train again, "
              "give a new --output-dir (or none, for a new timestamped folder), or add --overwrite to delete "
              "this run and start from scratch.")
        raise SystemExit(0)
    worker = devices.non_chief_worker()
    if worker is not None:
        task_type, index = worker
        path = f"{os.path.normpath(path)}.{task_type}_{index}"  # the chief alone deletes (and writes) the run
    if finished and os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    return path


def start_run(recipe, args, model_flags=()):
    """The run folder of `args` (`output_directory`), opened as a `runs.Run`: it prints the folder and the command
    that resumes it, refuses a resume whose `model_flags` (names of `args` attributes that shape the weights)
    differ from the run's, and records this start. Returns the folder."""
    output_dir = output_directory(recipe, args.output_dir, args.overwrite)
    if devices.non_chief_worker() is None:  # the chief keeps the run's record; the others' folders are temporary
        runs.Run.start(recipe, output_dir, args, model_flags)
    return output_dir


def setup(args, recipe=None):
    """Applies the shared flags: thread pools, seed, the fast path (`--mixed-precision`, `--jit`) and the
    distribution. Prints the backend, the devices and the path chosen, with the reason. Returns the distribution
    strategy (or None).

    Args:
        args: the parsed flags; `args.mixed_precision` and `args.jit` are resolved in place ("auto" becomes what
            was chosen), so summary.json records the path the run took.
        recipe: the recipe's name, a key of FAST_PATHS' tables (its measured fast paths).
    """
    threads = hardware.set_threads()  # before the backend starts its thread pools
    devices.hide_gpus_from_tensorflow()  # before the first tf.data operation starts TensorFlow's devices
    keras.utils.set_random_seed(args.seed)
    strategy = devices.distribution_strategy(args.distribute)  # first: a multi-worker strategy must start TensorFlow
    backend = keras.backend.backend()
    policy, why = fast_paths.fast_path(args, recipe, backend)
    args.mixed_precision = None if policy == "float32" else policy.removeprefix("mixed_")
    keras.config.set_dtype_policy(policy)
    print(f"{backend} backend, training on {', '.join(devices.training_devices())}, {threads} threads per pool")
    print(f"{policy}, jit_compile={args.jit!r}: {why}")
    hint = fast_paths.faster_backend_hint(recipe, backend, args.distribute, args.quick)
    if hint:
        print(hint)
    if devices.is_tf_distribute(strategy):
        print(f"training on {strategy.num_replicas_in_sync} replicas ({args.distribute})")
    elif strategy is not None:
        print(f"training on {len(strategy.device_mesh.devices.flatten())} devices ({args.distribute})")
    return strategy


def read_history(output_dir):
    """`history.csv` as {column: list of floats} (all epochs, including those before a resume)."""
    path = os.path.join(output_dir, "history.csv")
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    return {key: [_number(row[key]) for row in rows] for key in (rows[0] if rows else {})}


def _number(text):
    """A `history.csv` cell as a float: Keras' CSVLogger writes "NA" where an epoch has no value (validation run
    only every few epochs, `validation_freq`), read as NaN, which the curves leave out."""
    return float("nan") if text in ("NA", "") else float(text)


def plot_curves(history, path, parts_per_epoch=1):
    """Loss and metric curves (train and validation) from a {name: values} history (`curves_figure`), saved as
    PNG at `path`; returns `path`."""
    return save_figure(curves_figure(history, parts_per_epoch), path)


def curves_figure(history, parts_per_epoch=1):
    """The figure of `plot_curves`. With `parts_per_epoch` > 1 each row of the history is that share of an epoch
    (imdb_classifier's `--parts-per-epoch`), and the axis counts epochs: 0.25, 0.5, ... as the explorer does."""
    names = sorted({name.removeprefix("val_") for name in history if name != "epoch" and name != "learning_rate"})
    figure = Figure(figsize=(5 * max(len(names), 1), 3.5))
    axes = np.atleast_1d(figure.subplots(1, max(len(names), 1)))
    epochs = history.get("epoch", list(range(len(next(iter(history.values()), [])))))
    for ax, name in zip(axes, names):
        for key, label in ((name, "train"), (f"val_{name}", "validation")):
            if key in history:
                values = np.asarray(history[key], dtype="float64")
                shown = ~np.isnan(values)  # epochs without validation are left out, not drawn as gaps
                ax.plot((np.asarray(epochs, dtype="float64")[shown] + 1) / parts_per_epoch, values[shown],
                        marker="o", label=label)
        ax.set_xlabel("epoch")
        if len(epochs) <= 12:  # every row marked, also when there is only one
            ticks = (np.asarray(epochs, dtype="float64") + 1) / parts_per_epoch
            ax.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name)
        ax.legend()
    figure.tight_layout()
    return figure


def finish(model, output_dir, args, metrics, started, extra=None, scratch=(), save_model=True):
    """Saves `model.keras`, `curves.png` and `summary.json` (the recipe, metrics, flags, wall time, the run's
    segments from run.json and the `extra` dict); returns the summary dict. Each is written whole or not at all
    (`keras_tfm.files`). Once `model.keras` has been loaded back and the summary written, the per-epoch
    `checkpoint.keras`, the `backup/` of the epochs and the `scratch` folders under `output_dir` (weights kept only
    for training, such as translate's averaging snapshots) are deleted: a finished run keeps one model. Until
    then a crash leaves them, and the run resumes with every epoch trained. A non-chief worker's folder is deleted
    afterwards. `save_model=False`: the recipe saved the model elsewhere already (one model file per run)."""
    if save_model:
        path = os.path.join(output_dir, "model.keras")
        with runs.uninterrupted(), files.atomic_path(path) as partial:
            model.save(partial)
        keras.saving.load_model(path)  # raises if the file cannot be read back: the checkpoint is kept then
    plot_curves(read_history(output_dir), os.path.join(output_dir, "curves.png"),
                parts_per_epoch=getattr(args, "parts_per_epoch", 1))
    run = runs.current(output_dir)
    summary = {
        "recipe": run.recipe if run else None,
        "metrics": {name: float(value) for name, value in metrics.items()},
        "flags": {name: value for name, value in vars(args).items() if name != "argv"},
        "wall_time_seconds": round(time.time() - started, 1),
        "backend": keras.backend.backend(),
        "segments": run.segments() if run else [],
        **(extra or {}),
    }
    files.write_json(os.path.join(output_dir, FINISHED), summary, indent=2, default=str)
    checkpoint = os.path.join(output_dir, "checkpoint.keras")
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    for folder in (runs.BACKUP, *scratch):
        shutil.rmtree(os.path.join(output_dir, folder), ignore_errors=True)
    if devices.non_chief_worker() is not None:
        shutil.rmtree(output_dir)  # a non-chief worker's own folder: the chief's run folder is the run
    else:
        runs.unlock(output_dir)
    return summary


@contextmanager
def exit_when_data_unavailable():
    """Inside a recipe's `main`: a `DataUnavailable` raised in the block is printed, argparse-style, and the
    process exits with status 2."""
    try:
        yield
    except DataUnavailable as error:
        exit_with_error(error)


def exit_with_error(message):
    """Ends a recipe that cannot start as argparse does: "error: MESSAGE" on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2) from None
