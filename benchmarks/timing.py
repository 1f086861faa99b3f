"""The benchmarks' one timing loop: the implementations compared run in interleaved rounds in one process, and
their medians are compared as ratios, so that a slow minute of a shared machine falls on all of them alike.

    times = timed_rounds({"ours": ours_step, "keras": keras_step}, rounds=5, repeats=10)
    print(medians(times)["ours"] / medians(times)["keras"])
"""

import statistics
import time

import numpy as np


def interleaved(measure, keys, rounds, warmup=True):
    """`{key: [measure(key), one per round]}`, the keys taken in a rotated order each round (AB, BA, AB... for
    two), after a warm-up round (compiling, tracing) that is not kept.

    Args:
        measure: a function of a key returning a number (seconds, say, timed however the benchmark needs).
        keys: what to measure.
        rounds: rounds kept.
        warmup: run one round first and drop it.
    """
    keys = list(keys)
    values = {key: [] for key in keys}
    for index in range(rounds + int(warmup)):
        shift = index % len(keys)
        for key in keys[shift:] + keys[:shift]:
            value = measure(key)
            if index >= int(warmup):
                values[key].append(value)
    return values


def timed_rounds(runs, rounds, repeats=1, warmup=True):
    """`{name: [seconds per call, one per round]}` of the functions in `runs` (name -> function of no arguments),
    in interleaved rounds (`interleaved`) of `repeats` calls each. A function's last result is read into NumPy
    before the clock stops, so the work of an asynchronous backend (JAX, PyTorch) has finished."""

    def seconds(name):
        start = time.perf_counter()
        for _ in range(repeats):
            result = runs[name]()
        _wait_for(result)
        return (time.perf_counter() - start) / repeats

    return interleaved(seconds, runs, rounds, warmup)


def medians(times):
    """`{name: median}` of `timed_rounds`' (or `interleaved`'s) lists."""
    return {name: statistics.median(values) for name, values in times.items()}


def _wait_for(result):
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (list, tuple)):
        for item in result:
            _wait_for(item)
    elif result is not None:
        np.asarray(result)


def parse_args(parser, argv, quick):
    """`parser.parse_args(argv)`, with a `--quick` flag that sets the tiny sizes of `quick` (argument name ->
    value, `rounds=1` among them) and says so: a run that checks the script works, which CI runs; its numbers
    mean nothing."""
    sizes = ", ".join(f"--no-{name.replace('_', '-')}" if value is False else f"--{name.replace('_', '-')} {value}"
                      for name, value in quick.items())
    parser.add_argument("--quick", action="store_true",
                        help=f"tiny sizes ({sizes}): checks that the benchmark runs; its numbers mean nothing")
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in quick.items():
            setattr(args, name, value)
        print(f"--quick: {sizes} (a check that the benchmark runs; the numbers mean nothing)")
    return args
