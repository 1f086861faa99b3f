"""What this machine computes fastest, and how to let a training use it: thread pools sized to the cores the
process may use, and the precision whose matrix products are fastest here.

Two facts drive it (measured in `benchmarks/fast_path.py`, numbers in docs/results.md):

* Every backend sizes its thread pools to all the machine's cores, not to the ones the process may use
  (`taskset`, a container's CPU set, pytest-xdist workers sharing the cores). With more busy threads than cores,
  the threads wait on each other at every small operation, and a step can be ten times slower.
* On CPUs with AMX-BF16 matrix units (Intel Xeon since Sapphire Rapids), on CPUs with AVX512-BF16 dot-product
  instructions (AMD EPYC since Zen 4) and on recent GPUs, bfloat16 matrix products run several times faster than
  float32 ones, on the backends whose kernels use those units (oneDNN's: PyTorch, TensorFlow without XLA);
  elsewhere bfloat16 is emulated and slower. `bf16_units` says which a CPU has; `choose_precision` measures
  instead of guessing.

`import keras_tfm` imports Keras and its backend, so `set_threads` comes after the backend is imported: it resizes
the pools of TensorFlow (before its first operation) and PyTorch (at any time). JAX reads `XLA_FLAGS` when it
starts; a process that must run JAX on one thread gets the variables before it starts (`thread_environment`).

Example:

>>> from keras_tfm import hardware
>>> hardware.set_threads()  # doctest: +SKIP  (before the first training step)
2
>>> policy, why = hardware.choose_precision()  # doctest: +SKIP
>>> keras.config.set_dtype_policy(policy)  # doctest: +SKIP
"""

import os
import sys
import time

# Variables each backend reads once, when it starts its thread pools.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def usable_cores():
    """The number of cores this process may run on (its CPU affinity: `taskset`, a container's CPU set), which
    can be fewer than `os.cpu_count()`."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's feature flags (the first `flags` line of `cpuinfo`), as a set; empty where there is none."""
    try:
        with open(cpuinfo) as file:
            line = next((line for line in file if line.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.partition(":")[2].split())


def has_amx_bf16(cpuinfo="/proc/cpuinfo"):
    """True on a CPU with AMX-BF16 matrix units (read from /proc/cpuinfo; False where there is none to read)."""
    return "amx_bf16" in _cpu_flags(cpuinfo)


def bf16_units(cpuinfo="/proc/cpuinfo"):
    """What this CPU multiplies bfloat16 matrices with, fastest first: `"amx_bf16"` (AMX tiles: Intel Xeon since
    Sapphire Rapids; ~15x float32's speed in PyTorch), `"avx512_bf16"` (bf16 dot-product instructions: AMD EPYC
    since Zen 4, Intel Cooper Lake; ~3x), or None (no bf16 arithmetic: it is emulated, and slower than float32).
    Read from /proc/cpuinfo; None where there is none to read.

    The kind decides which measured table of fast paths applies (the recipes' `recipes/fast_paths.json`): the same
    model's fastest backend and precision differ between them.
    """
    return _bf16_units(_cpu_flags(cpuinfo))


def _bf16_units(flags):
    return next((units for units in ("amx_bf16", "avx512_bf16") if units in flags), None)


def cpu_kind(cpuinfo="/proc/cpuinfo"):
    """The kind of CPU a measured table of fast paths applies to (the recipes' `recipes/fast_paths.json`): its bf16
    units (`bf16_units`: `"amx_bf16"`, `"avx512_bf16"`), else `"avx2"` for an x86 CPU with AVX2 and no bf16 units
    (bfloat16 is emulated there, about 200x slower than float32), else None (no table: another architecture, or no
    /proc/cpuinfo to read)."""
    flags = _cpu_flags(cpuinfo)  # read once
    return _bf16_units(flags) or ("avx2" if "avx2" in flags else None)


def thread_environment(threads, environ=None):
    """The environment variables that size every backend's thread pools to `threads`, for a process that has not
    started a backend yet (a subprocess: `subprocess.Popen(..., env={**os.environ, **thread_environment(2)})`).
    Variables already set in `environ` (default `os.environ`) are left out: the user's choice wins.

    Args:
        threads: threads per pool, a positive int.
        environ: the environment the process will inherit.

    Returns:
        A dict `{name: value}` of the variables to add.
    """
    environ = os.environ if environ is None else environ
    wanted = {name: str(threads) for name in _THREAD_VARIABLES}
    if threads == 1:  # JAX reads it when it starts; XLA's CPU client has no other thread setting
        wanted["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return {name: value for name, value in wanted.items() if name not in environ}


def set_threads(threads=None):
    """Sizes the thread pools of every loaded backend (and of those loaded later) to `threads`, by default the
    cores this process may use (`usable_cores`). A variable the user set in the environment wins.

    Call it before the first computation: TensorFlow fixes its pools at its first operation (later calls leave
    them as they are) and JAX reads `XLA_FLAGS` when it starts. PyTorch's pool can be resized at any time.

    Args:
        threads: threads per pool (a positive int), or None for `usable_cores()`.

    Returns:
        The number of threads asked for.
    """
    if threads is None:
        threads = usable_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"`threads` must be a positive integer or None. Received: threads={threads!r}")
    environment = thread_environment(threads)
    if "jax" in sys.modules:  # started already (or about to, at its first computation): too late for XLA_FLAGS
        environment.pop("XLA_FLAGS", None)
    os.environ.update(environment)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(int(os.environ["TF_NUM_INTRAOP_THREADS"]))
            tf.config.threading.set_inter_op_parallelism_threads(int(os.environ["TF_NUM_INTEROP_THREADS"]))
        except RuntimeError:  # TensorFlow has started already: its pools stay as they are
            pass
    return threads


def matmul_gflops(dtype, size=512, repeats=4, compiled=False):
    """GFLOP/s of a `size` x `size` matrix product in `dtype` on the Keras backend (after a warm-up).

    Args:
        dtype: `"float32"`, `"bfloat16"`, ...
        size: the matrices' side.
        repeats: products timed.
        compiled: run the product as a compiled step runs it: XLA on TensorFlow, `jax.jit` on JAX (every JAX
            operation runs through XLA), eager on PyTorch (whose compiler calls the same oneDNN/cuBLAS kernels).
    """
    import keras

    product = keras.ops.matmul
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        product = jax.jit(keras.ops.matmul)
    elif backend == "tensorflow" and compiled:
        import tensorflow as tf

        product = tf.function(keras.ops.matmul, jit_compile=True)
    a = keras.random.normal((size, size), seed=0, dtype=dtype)
    float(keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.sum(product(a, a)), "float32")))  # compiles, warms up
    start = time.perf_counter()
    for _ in range(repeats):
        result = product(a, a)
    float(keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.sum(result), "float32")))  # waits for the last one
    return 2 * size ** 3 * repeats / (time.perf_counter() - start) / 1e9


def choose_precision(requested=None, compiled=False, speedup=2.0):
    """The dtype policy to train in on this backend and machine, and why, in words.

    Measures float32 and bfloat16 matrix products as the training step will run them (`matmul_gflops`, compiled
    or not; where bfloat16 looks faster, the best of three rounds of each): `"mixed_bfloat16"` when bfloat16 is at
    least `speedup` times as fast (PyTorch's and TensorFlow's oneDNN kernels on CPUs with AMX-BF16 units, recent
    GPUs), else `"float32"` (XLA's CPU code, which does not use those units, and CPUs without bf16 units, where bf16
    products are emulated, up to 100x slower). A `requested` policy is returned as it is, with the measurement
    beside it.

    Args:
        requested: a dtype policy the user asked for, or None to choose.
        compiled: whether the training step is compiled (`jit_compile=True`).
        speedup: how much faster bfloat16 products must be to choose them.

    Returns:
        `(policy, explanation)`.

    Example:

    >>> policy, why = choose_precision()  # doctest: +SKIP
    >>> policy, why  # doctest: +SKIP
    ('mixed_bfloat16', 'mixed_bfloat16: bfloat16 products 5.2x as fast as float32 here (512x512, eager: ...)')
    """
    float32 = matmul_gflops("float32", compiled=compiled)
    bfloat16 = matmul_gflops("bfloat16", compiled=compiled)
    if bfloat16 >= speedup * float32:
        # Confirmed before it is chosen: another job taking the cores during the float32 products alone looks the
        # same (seen: 40 against 2 GFLOP/s on a CPU without bf16 units), so the best of three of each decides.
        for _ in range(2):
            float32 = max(float32, matmul_gflops("float32", compiled=compiled))
            bfloat16 = max(bfloat16, matmul_gflops("bfloat16", compiled=compiled))
    how = "compiled" if compiled else "eager"
    measured = (f"bfloat16 products {bfloat16 / float32:.1f}x as fast as float32 here (512x512, {how}: "
                f"{bfloat16:.0f} and {float32:.0f} GFLOP/s)")
    if requested:
        return requested, f"{requested} as asked; {measured}"
    policy = "mixed_bfloat16" if bfloat16 >= speedup * float32 else "float32"
    return policy, f"{policy}: {measured}"
