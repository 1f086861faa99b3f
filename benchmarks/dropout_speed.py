"""keras_tfm's Dropout beside Keras' own on the PyTorch backend: the mask alone, then whole training steps.

Keras draws a seeded dropout mask on PyTorch with one `torch.bernoulli` call per element; `keras_tfm.layers.Dropout`
takes four 16-bit draws from each 64-bit random word (keras_tfm/layers/dropout.py). Both run in this one process,
interleaved round by round, so the machine's load falls on both alike:

1. dropout alone, on the activations of a BERT-small feed-forward layer (16 x 256 x 1536) in the precision asked;
2. one `train_on_batch` of each setup's model (`benchmarks/fast_path.py`'s setups and shapes), once with
   `keras_tfm.layers.Dropout.call` as it is and once with it replaced by `keras.layers.Dropout.call`.

    KERAS_BACKEND=torch python benchmarks/dropout_speed.py
    KERAS_BACKEND=torch python benchmarks/dropout_speed.py --setups text_classifier --precision mixed_bfloat16

Prints the median examples/s of each and the speed-up. On TensorFlow and JAX the two are the same code.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def parse_args(argv=None):
    import fast_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["text_classifier", "translate"], choices=list(fast_path.SETUPS))
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per setup; each times both")
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    return parser.parse_args(argv)


def timed(function, repeats):
    """Seconds per call of `function`, over `repeats` calls after one untimed call."""
    function()
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - started) / repeats


def compare(run, rounds):
    """{"keras": [...], "keras_tfm": [...]}: `run()`'s seconds with each dropout, alternating round by round."""
    import keras

    from keras_tfm.layers import dropout

    ours = dropout.Dropout.call
    seconds = {"keras": [], "keras_tfm": []}
    try:
        for _ in range(rounds):
            for name, call in (("keras", keras.layers.Dropout.call), ("keras_tfm", ours)):
                dropout.Dropout.call = call
                seconds[name].append(run())
    finally:
        dropout.Dropout.call = ours
    return seconds


def report(what, unit_count, unit, seconds):
    keras_speed = unit_count / statistics.median(seconds["keras"])
    ours_speed = unit_count / statistics.median(seconds["keras_tfm"])
    print(f"{what:44s} Keras {keras_speed:10.2f} {unit}  keras_tfm {ours_speed:10.2f} {unit}  "
          f"{ours_speed / keras_speed:.2f}x", flush=True)


def main(argv=None):
    args = parse_args(argv)
    from keras_tfm.hardware import set_threads

    threads = set_threads()
    import keras
    import numpy as np

    import fast_path
    from keras_tfm.layers import Dropout

    print(f"backend {keras.backend.backend()}, {threads} threads, {args.precision}")
    compute = "bfloat16" if args.precision == "mixed_bfloat16" else "float32"
    x = keras.ops.convert_to_tensor(np.ones((16, 256, 1536), "float32"), compute)
    layer = Dropout(0.1, seed=0, dtype=args.precision)
    report("dropout 0.1 alone, 16 x 256 x 1536", 1, "calls/s",
           compare(lambda: timed(lambda: layer(x, training=True), 5), args.rounds))
    for setup in args.setups:
        model, inputs, targets, batch, _ = fast_path.build_setup(setup, args.precision, False)
        report(f"{setup} training step, batch {batch}", batch, "examples/s",
               compare(lambda: timed(lambda: model.train_on_batch(inputs, targets), args.steps), args.rounds))
        keras.backend.clear_session()


if __name__ == "__main__":
    main()
