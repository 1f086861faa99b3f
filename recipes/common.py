"""Shared plumbing for the recipes: the run folder, distribution, optimizer options, the standard callbacks, and
the files a finished run leaves behind. The flags are in `recipes.flags`, which parses them before TensorFlow
loads. What a saved model or your own training needs is library code, in `keras_tfm`: the time budget
(`keras_tfm.callbacks.TimeBudget`), its learning-rate schedule (`keras_tfm.schedules.PlannedWarmupCosine`) and
the multi-worker strategy (`keras_tfm.distribute`). Each recipe reads top to bottom (args -> data -> model -> fit
-> evaluate -> pictures) and calls these helpers for everything that is the same between recipes.

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
import json
import math
import os
import shutil
import sys
import time
from contextlib import contextmanager, nullcontext

import keras
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from keras_tfm import hardware
from keras_tfm.callbacks import TerminateOnNaN, TimeBudget  # noqa: F401  (TimeBudget: recipes.common.TimeBudget too)
from keras_tfm.data import DataUnavailable
from keras_tfm.distribute import MultiWorkerMirroredStrategy
from keras_tfm.schedules import PlannedWarmupCosine  # noqa: F401  (recipes.common.PlannedWarmupCosine, as before)
from recipes import runs
from recipes.flags import DISTRIBUTE


def hide_gpus_from_tensorflow():
    """On JAX and PyTorch, TensorFlow only runs the `tf.data` input pipelines, on the CPU. A TensorFlow that sees
    a GPU reserves most of its memory at its first operation, taking it from the backend that trains. `setup`
    calls it first; importing this module changes nothing."""
    if keras.backend.backend() == "tensorflow" or "tensorflow" not in sys.modules:
        return
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow already started its devices (it was used before `setup`)
        print("warning: TensorFlow already holds the GPUs; call recipes.common.setup before using tf.data",
              file=sys.stderr)


STEPS_PER_EXECUTION = 8  # see default_steps_per_execution
FINISHED = runs.FINISHED  # written last by `finish`: its presence means the run is complete

# Set by `distribution_strategy`: this process's (task type, index) when it is a worker of a multi-worker
# cluster other than the chief, else None. `output_directory` and `finish` read it.
_non_chief_worker = None


def fit_verbosity():
    """Keras' progress bar on a terminal (`verbose=1`), one line per epoch in a log file or pipe (`verbose=2`)."""
    return 1 if sys.stdout.isatty() else 2


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
    if _non_chief_worker is not None:
        task_type, index = _non_chief_worker
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
    if _non_chief_worker is None:  # the chief keeps the run's record; the others' folders are temporary
        runs.Run.start(recipe, output_dir, args, model_flags)
    return output_dir


def distribution_strategy(name):
    """What `--distribute` asks for: None for "none"; a `tf.distribute` strategy for "mirrored" and
    "multiworker" (TensorFlow backend); for "data_parallel" (JAX backend), `keras.distribution.DataParallel`
    over the local devices, made the global distribution. Another backend gets a ValueError naming the flag
    that fits it."""
    global _non_chief_worker
    if name not in DISTRIBUTE:
        raise ValueError(f"`distribute` must be one of {list(DISTRIBUTE)}. Received: {name!r}")
    _non_chief_worker = None
    if name == "none":
        return None
    backend = keras.backend.backend()
    wanted = "jax" if name == "data_parallel" else "tensorflow"
    if backend != wanted:
        fits = {"jax": "--distribute data_parallel", "tensorflow": "--distribute mirrored or multiworker"}
        instead = f"; on {backend} use {fits[backend]}" if backend in fits else f"; {backend} has none, use none"
        raise ValueError(f"`--distribute {name}` needs KERAS_BACKEND={wanted}, but the backend is {backend}{instead}.")
    if name == "data_parallel":
        distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
        keras.distribution.set_distribution(distribution)
        return distribution
    import tensorflow as tf

    if name == "mirrored":
        # All local GPUs; on a machine without GPUs, every (logical) CPU device, so the strategy can be tried
        # on a laptop with `tf.config.set_logical_device_configuration`.
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    # TensorFlow's, with the reductions Keras 3 needs (keras_tfm.distribute); the cluster comes from TF_CONFIG.
    strategy = MultiWorkerMirroredStrategy()
    if not strategy.extended.should_checkpoint:  # the chief (or worker 0 without one) alone keeps the run
        resolver = strategy.cluster_resolver
        _non_chief_worker = (resolver.task_type, resolver.task_id)
    return strategy


def is_tf_distribute(strategy):
    """True for a `tf.distribute` strategy (`--distribute mirrored` or `multiworker`)."""
    return strategy is not None and not isinstance(strategy, keras.distribution.DataParallel)


def sharded(dataset, strategy):
    """`dataset` (a `tf.data` pipeline of global batches) set to be split by data under a `tf.distribute`
    strategy: every worker reads the same batches and keeps its replicas' share of each (`DATA` auto-sharding;
    the default would try to split by input file first). Without a strategy, `dataset` as it is."""
    if not is_tf_distribute(strategy):
        return dataset
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def fit_data(strategy, x, y=None, batch_size=None, validation_data=None, validation_batch_size=None, seed=0):
    """The data keyword arguments of `model.fit`. `x` (and `y`) and `validation_data` are in-memory arrays, or
    `tf.data` pipelines of global batches (no `y`; they shuffle themselves, hence `shuffle=False`).

    Without a `tf.distribute` strategy, arrays go to `fit` as they are, with `batch_size` (and
    `validation_batch_size`): `fit` shuffles and batches them. With one, they become `tf.data` pipelines of
    global batches of that size (Keras splits each over the replicas), the training one shuffled with `seed`,
    in the same order on every worker. Every pipeline is `sharded`.
    """
    distributed = is_tf_distribute(strategy)
    if y is None:
        data = {"x": sharded(x, strategy), "shuffle": False}
    elif distributed:
        data = {"x": _global_batches(strategy, x, y, batch_size, shuffle_seed=seed), "shuffle": False}
    else:
        data = {"x": x, "y": y, "batch_size": batch_size}
    if validation_data is None:
        return data
    if not isinstance(validation_data, (tuple, list)):
        data["validation_data"] = sharded(validation_data, strategy)
    elif distributed:
        data["validation_data"] = _global_batches(strategy, *validation_data, validation_batch_size or batch_size)
    else:
        data.update(validation_data=validation_data, validation_batch_size=validation_batch_size)
    return data


def _global_batches(strategy, x, y, batch_size, shuffle_seed=None):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle_seed is not None:
        dataset = dataset.shuffle(len(y), seed=shuffle_seed, reshuffle_each_iteration=True)
    return sharded(dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE), strategy)


def strategy_scope(strategy):
    """`strategy.scope()`, or a do-nothing context without a strategy."""
    return strategy.scope() if strategy is not None else nullcontext()


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
    hide_gpus_from_tensorflow()  # before the first tf.data operation starts TensorFlow's devices
    keras.utils.set_random_seed(args.seed)
    strategy = distribution_strategy(args.distribute)  # first: a multi-worker strategy must start TensorFlow
    backend = keras.backend.backend()
    policy, why = fast_path(args, recipe, backend)
    args.mixed_precision = None if policy == "float32" else policy.removeprefix("mixed_")
    keras.config.set_dtype_policy(policy)
    print(f"{backend} backend, training on {', '.join(training_devices())}, {threads} threads per pool")
    print(f"{policy}, jit_compile={args.jit!r}: {why}")
    hint = faster_backend_hint(recipe, backend)
    if hint:
        print(hint)
    if is_tf_distribute(strategy):
        print(f"training on {strategy.num_replicas_in_sync} replicas ({args.distribute})")
    elif strategy is not None:
        print(f"training on {len(strategy.device_mesh.devices.flatten())} devices ({args.distribute})")
    return strategy


FAST_PATHS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_paths.json")


def read_fast_paths(path=FAST_PATHS_FILE):
    """`{bf16 units: {recipe: {backend: (policy, jit_compile, examples/s)}}}` from `fast_paths.json`: the fastest
    path of each recipe's default model on each backend, on 2 cores, by the CPU's bf16 units
    (`keras_tfm.hardware.bf16_units`), measured by benchmarks/fast_path.py (docs/results.md; the file says on which
    CPU and when). No rule of thumb predicts them: bfloat16 on the matrix units (oneDNN's kernels: TensorFlow
    without XLA, PyTorch) pays for some wide models, XLA's fusion for others, and the same model's fastest path
    differs between the two kinds of units. To measure again: `python benchmarks/fast_path.py --output run.json`,
    then `--table run.json` prints the machine's entry for the file."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    return {units: {recipe: {backend: (found["policy"], found["jit_compile"], found["examples_per_second"])
                             for backend, found in paths.items()}
                    for recipe, paths in entry["paths"].items()}
            for units, entry in data.items() if units != "about"}


FAST_PATHS = read_fast_paths()

UNITS_IN_WORDS = {"amx_bf16": "AMX-BF16 units", "avx512_bf16": "AVX512-BF16 instructions"}


def measured_paths(recipe, distribute="none"):
    """`{backend: (policy, jit_compile, examples/s)}` measured for `recipe` on a CPU with this machine's bf16 units
    (FAST_PATHS), where that applies: on a CPU with such units and without a `tf.distribute` strategy; else {}."""
    if distribute in ("mirrored", "multiworker") or on_gpu():
        return {}
    return FAST_PATHS.get(hardware.bf16_units(), {}).get(recipe, {})


def measured_fast_path(recipe, backend, distribute="none"):
    """`(policy, jit_compile, examples/s)` of `measured_paths(recipe, distribute)` on `backend`, or None."""
    return measured_paths(recipe, distribute).get(backend)


def fast_path(args, recipe, backend):
    """The dtype policy to train in and why; resolves `args.jit` in place. Flags given explicitly are kept. With
    "auto": the path measured fastest for the recipe's model on this backend (`measured_fast_path`), else
    Keras' own `jit_compile="auto"` and `mixed_bfloat16` where this backend's bfloat16 products, run as the step
    runs them, are measured at least twice as fast as float32 ones (`keras_tfm.hardware.choose_precision`)."""
    measured = measured_fast_path(recipe, backend, args.distribute)
    if measured and args.jit == "auto":
        args.jit = measured[1]
    requested = {"auto": None, "off": "float32"}.get(args.mixed_precision, f"mixed_{args.mixed_precision}")
    if measured and requested is None and args.jit == measured[1]:
        return measured[0], (f"the fastest path measured for this model on {backend} with "
                             f"{UNITS_IN_WORDS[hardware.bf16_units()]} (benchmarks/fast_path.py)")
    policy, why = hardware.choose_precision(requested, compiled=args.jit is True)
    return policy, why


def on_gpu():
    """True when the backend computes on a GPU."""
    return not training_devices()[0].startswith(("cpu", "/device:CPU"))


def faster_backend_hint(recipe, backend, at_least=1.1):
    """A line saying that another backend trains `recipe`'s model at least `at_least` times as fast here and how
    to get it, or None. Said only where measured (FAST_PATHS, on a CPU with bf16 units); the run
    itself stays on `backend`."""
    here = measured_fast_path(recipe, backend)
    if here is None:
        return None
    fastest, (policy, jit, speed) = max(measured_paths(recipe).items(), key=lambda item: item[1][2])
    if speed < at_least * here[2]:
        return None
    return (f"note: KERAS_BACKEND={fastest} trains this model {speed / here[2]:.1f}x as fast as {backend} does on "
            f"this CPU ({policy}, jit_compile={jit}; benchmarks/fast_path.py); this run stays on {backend}, as set")


def training_devices():
    """The devices the backend computes on, as names (`["cpu:0"]`, `["cuda:0", "cuda:1"]`): a missing CUDA then
    shows at the start of a run instead of as a slow run."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        gpus = [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
        return gpus or [f"cpu ({torch.get_num_threads()} threads)"]
    if backend == "jax":
        import jax

        return [f"{d.platform}:{d.id}" + (f" ({d.device_kind})" if d.platform != "cpu" else "") for d in jax.devices()]
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        return [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return [backend]


def default_steps_per_execution(distribute="none"):
    """Training steps per call into the compiled step function when `--steps-per-execution` is not given:
    STEPS_PER_EXECUTION (measured: docs/results.md, "Training-step overhead"), or 1 on PyTorch (all Keras supports there) and
    under a `tf.distribute` strategy (Keras 3.15's multi-step loop fails there: "You must feed a value for
    placeholder tensor")."""
    if keras.backend.backend() == "torch" or distribute in ("mirrored", "multiworker"):
        return 1
    return STEPS_PER_EXECUTION


def compile_options(args):
    """The keyword arguments of `compile` that the shared flags set: `jit_compile` (`--jit`/`--no-jit`, else
    Keras' "auto") and `steps_per_execution`."""
    steps = args.steps_per_execution or default_steps_per_execution(args.distribute)
    if steps > 1 and keras.backend.backend() == "torch":
        raise ValueError(f"`--steps-per-execution {steps}`: Keras' PyTorch trainer runs one step per call; use 1 "
                         "(the default there) or another backend.")
    return {"jit_compile": args.jit, "steps_per_execution": steps}


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


# An epoch's files are written together: a Ctrl-C or SIGTERM arriving between the backup's start and the log
# row's end takes effect after the row (`runs.hold`), so the backup and history.csv never disagree.


class _EpochBackupAndRestore(keras.callbacks.BackupAndRestore):
    async_safe = True  # saves at epoch ends (save_freq="epoch"): its batch hook only returns

    def on_epoch_end(self, epoch, logs=None):
        runs.hold()  # released by _CSVLogger, the last of the three
        super().on_epoch_end(epoch, logs)


class _EpochModelCheckpoint(keras.callbacks.ModelCheckpoint):
    async_safe = True  # the same: nothing happens at a batch's end


class _CSVLogger(keras.callbacks.CSVLogger):
    def on_epoch_end(self, epoch, logs=None):
        try:
            super().on_epoch_end(epoch, logs)
        finally:
            runs.release()


def standard_callbacks(output_dir, extra=()):
    """Resume, checkpoint, log and stop-on-NaN callbacks, in the order that keeps `history.csv` free of
    repeated epochs: the backup is written before the epoch's CSV row.

    None of them looks at a batch: the training loop never waits for a step to finish, and on JAX and PyTorch
    Keras keeps its asynchronous callback dispatch on (Keras' BackupAndRestore and ModelCheckpoint turn it off
    by having a batch hook at all, even one that does nothing at save_freq="epoch"; TerminateOnNaN by reading the
    loss after every step)."""
    return [
        _EpochBackupAndRestore(os.path.join(output_dir, "backup")),
        _EpochModelCheckpoint(os.path.join(output_dir, "checkpoint.keras")),
        _CSVLogger(os.path.join(output_dir, "history.csv"), append=True),
        TerminateOnNaN(),  # at epoch ends: not Keras' own, which waits for every step to finish
        *extra,
    ]


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


def plot_curves(history, path):
    """Loss and metric curves (train and validation) from a {name: values} history; saved as PNG."""
    names = sorted({name.removeprefix("val_") for name in history if name != "epoch" and name != "learning_rate"})
    figure = Figure(figsize=(5 * max(len(names), 1), 3.5))
    axes = np.atleast_1d(figure.subplots(1, max(len(names), 1)))
    epochs = history.get("epoch", list(range(len(next(iter(history.values()), [])))))
    for ax, name in zip(axes, names):
        for key, label in ((name, "train"), (f"val_{name}", "validation")):
            if key in history:
                values = np.asarray(history[key], dtype="float64")
                shown = ~np.isnan(values)  # epochs without validation are left out, not drawn as gaps
                ax.plot(np.asarray(epochs, dtype="float64")[shown] + 1, values[shown], marker="o", label=label)
        ax.set_xlabel("epoch")
        if len(epochs) <= 12:  # whole epochs, also when there is only one
            ax.set_xticks(np.asarray(epochs) + 1)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name)
        ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def finish(model, output_dir, args, metrics, started, extra=None, scratch=(), save_model=True):
    """Saves `model.keras`, `curves.png` and `summary.json` (the recipe, metrics, flags, wall time, the run's
    segments from run.json and the `extra` dict); returns the summary dict. Once `model.keras` has been loaded
    back, the per-epoch `checkpoint.keras` and the `scratch` folders under `output_dir` (weights kept only for
    training, such as translate's averaging snapshots) are deleted: a finished run keeps one model. A non-chief
    worker's folder is deleted afterwards. `save_model=False`: the recipe saved the model elsewhere already (one
    model file per run)."""
    if save_model:
        path = os.path.join(output_dir, "model.keras")
        with runs.uninterrupted():
            model.save(path)
        keras.saving.load_model(path)  # raises if the file cannot be read back: the checkpoint is kept then
    checkpoint = os.path.join(output_dir, "checkpoint.keras")
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    for folder in scratch:
        shutil.rmtree(os.path.join(output_dir, folder), ignore_errors=True)
    plot_curves(read_history(output_dir), os.path.join(output_dir, "curves.png"))
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
    with open(os.path.join(output_dir, "summary.json"), "w") as file:
        json.dump(summary, file, indent=2, default=str)
    if _non_chief_worker is not None:
        shutil.rmtree(output_dir)  # a non-chief worker's own folder: the chief's run folder is the run
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
