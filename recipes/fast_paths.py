"""The fast path of each recipe: the dtype policy and `jit_compile` measured fastest for its model on this kind of
CPU (`fast_paths.json`, beside this file, written by benchmarks/fast_path.py), read as data; and the compile
options the shared flags set (`--jit`, `--steps-per-execution`).
"""

import json
import os

import keras

from keras_tfm import hardware
from recipes import devices


FAST_PATHS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_paths.json")


def read_fast_paths(path=FAST_PATHS_FILE):
    """`{CPU kind: {recipe: {backend: (policy, jit_compile, examples/s)}}}` from `fast_paths.json`: the fastest
    path of each recipe's default model on each backend, on 2 cores, by the kind of CPU (its bf16 units, or AVX2
    without any: `keras_tfm.hardware.cpu_kind`), measured by benchmarks/fast_path.py (docs/results.md; the file
    says on which CPU and when). No rule of thumb predicts them: bfloat16 on the matrix units (oneDNN's kernels:
    TensorFlow without XLA, PyTorch) pays for some wide models, XLA's fusion for others, and the same model's
    fastest path differs between the kinds of CPU. To measure again: `python benchmarks/fast_path.py --output run.json`,
    then `--table run.json` prints the machine's entry for the file."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    return {units: {recipe: {backend: (found["policy"], found["jit_compile"], found["examples_per_second"])
                             for backend, found in paths.items()}
                    for recipe, paths in entry["paths"].items()}
            for units, entry in data.items() if units != "about"}


FAST_PATHS = read_fast_paths()


KINDS_IN_WORDS = {"amx_bf16": "AMX-BF16 units", "avx512_bf16": "AVX512-BF16 instructions",
                  "avx2": "AVX2 and no bf16 units"}


def measured_paths(recipe, distribute="none", quick=False):
    """`{backend: (policy, jit_compile, examples/s)}` measured for `recipe` on a CPU of this machine's kind
    (FAST_PATHS), where that applies: to the recipe's own model (not a `--quick` run's tiny one), on one device (not
    under a `tf.distribute` strategy), on a CPU of a measured kind; else {}."""
    if quick or distribute in ("mirrored", "multiworker") or devices.on_gpu():
        return {}
    return FAST_PATHS.get(hardware.cpu_kind(), {}).get(recipe, {})


def measured_fast_path(recipe, backend, distribute="none", quick=False):
    """`(policy, jit_compile, examples/s)` of `measured_paths(recipe, distribute, quick)` on `backend`, or None."""
    return measured_paths(recipe, distribute, quick).get(backend)


def fast_path(args, recipe, backend):
    """The dtype policy to train in and why; resolves `args.jit` in place. Flags given explicitly are kept. With
    "auto": the path measured fastest for the recipe's model on this backend (`measured_fast_path`), else
    Keras' own `jit_compile="auto"` and `mixed_bfloat16` where this backend's bfloat16 products, run as the step
    runs them, are measured at least twice as fast as float32 ones (`keras_tfm.hardware.choose_precision`).

    A `--quick` run trains a tiny model, not the one measured: it takes the second way, as on an unmeasured CPU.
    (Its few steps would not pay back XLA's compile time: on TensorFlow with AVX2 the table's XLA made quick runs
    1.1-1.4x slower.)"""
    measured = measured_fast_path(recipe, backend, args.distribute, args.quick)
    if measured and args.jit == "auto":
        args.jit = measured[1]
    requested = {"auto": None, "off": "float32"}.get(args.mixed_precision, f"mixed_{args.mixed_precision}")
    if measured and requested is None and args.jit == measured[1]:
        return measured[0], (f"the fastest path measured for this model on {backend} with "
                             f"{KINDS_IN_WORDS[hardware.cpu_kind()]} (benchmarks/fast_path.py)")
    policy, why = hardware.choose_precision(requested, compiled=args.jit is True)
    return policy, why


def faster_backend_hint(recipe, backend, distribute="none", quick=False, at_least=1.1):
    """A line saying that another backend trains `recipe`'s model at least `at_least` times as fast here and how
    to get it, or None. Said only where the table applies (`measured_paths`: not for a `--quick` run, not under a
    `tf.distribute` strategy, which no other backend runs); the run itself stays on `backend`."""
    paths = measured_paths(recipe, distribute, quick)
    if backend not in paths:
        return None
    fastest, (policy, jit, speed) = max(paths.items(), key=lambda item: item[1][2])
    if speed < at_least * paths[backend][2]:
        return None
    return (f"note: KERAS_BACKEND={fastest} trains this model {speed / paths[backend][2]:.1f}x as fast as {backend} "
            f"does on this CPU ({policy}, jit_compile={jit}; benchmarks/fast_path.py); this run stays on {backend}, "
            "as set")


STEPS_PER_EXECUTION = 8  # see default_steps_per_execution


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
