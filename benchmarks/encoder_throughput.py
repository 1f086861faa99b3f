"""Forward+backward throughput of an EncoderBlock stack vs the same stack built from Keras and keras-hub parts.

Three models of identical size (pre-norm encoder blocks, GELU MLP, same parameter count) are trained side by
side in one process with `train_on_batch`; the rounds are interleaved and rotated (A B C, B C A, C A B, ...) so
that a machine that slows down or speeds up during the run affects all three alike and none always goes first.
Prints sequences/s and the ratio of ours to each.

    pip install keras-hub
    python benchmarks/encoder_throughput.py                # defaults: batch 32, length 128, dim 256, depth 4
    python benchmarks/encoder_throughput.py --no-jit --rounds 5
"""

import argparse
import os
import sys
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_tfm  # noqa: E402


def ours_stack(args):
    x = inputs = keras.Input((args.length, args.dim))
    for _ in range(args.depth):
        x = keras_tfm.EncoderBlock(args.heads, args.mlp_dim)(x)
    return keras.Model(inputs, x, name="keras_tfm")


def keras_stack(args):
    """The same pre-norm block written with keras.layers.MultiHeadAttention."""
    x = inputs = keras.Input((args.length, args.dim))
    for _ in range(args.depth):
        h = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        h = keras.layers.MultiHeadAttention(args.heads, args.dim // args.heads)(h, h)
        x = x + h
        h = keras.layers.LayerNormalization(epsilon=1e-6)(x)
        h = keras.layers.Dense(args.mlp_dim, activation="gelu")(h)
        x = x + keras.layers.Dense(args.dim)(h)
    return keras.Model(inputs, x, name="keras_mha")


def keras_hub_stack(args):
    import keras_hub

    x = inputs = keras.Input((args.length, args.dim))
    for _ in range(args.depth):
        x = keras_hub.layers.TransformerEncoder(
            args.mlp_dim, args.heads, activation="gelu", layer_norm_epsilon=1e-6, normalize_first=True
        )(x)
    return keras.Model(inputs, x, name="keras_hub")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--mlp-dim", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-jit", dest="jit", action="store_false", help="run without XLA compilation")
    args = timing.parse_args(parser, argv, quick=dict(batch=4, length=16, dim=32, heads=2, mlp_dim=64, depth=1,
                                                      steps=1, rounds=1))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, args.length, args.dim)).astype("float32")
    y = rng.normal(size=x.shape).astype("float32")
    builders = {"keras_tfm.EncoderBlock": ours_stack, "keras.layers.MultiHeadAttention": keras_stack}
    try:
        import keras_hub  # noqa: F401

        builders["keras_hub.layers.TransformerEncoder"] = keras_hub_stack
    except ImportError:
        print("keras-hub is not installed (pip install keras-hub): skipping its TransformerEncoder")

    models = {}
    for name, build in builders.items():
        keras.utils.set_random_seed(0)
        model = build(args)
        model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse", jit_compile=args.jit)
        for _ in range(2):  # trace/compile and warm up
            model.train_on_batch(x, y)
        models[name] = model

    seconds = timing.timed_rounds({name: (lambda model=model: model.train_on_batch(x, y)) for name, model in models.items()},
                                  args.rounds, repeats=args.steps, warmup=False)

    print(
        f"\nforward+backward, {keras.backend.backend()} backend, jit_compile={args.jit}, batch {args.batch}, "
        f"length {args.length}, dim {args.dim}, {args.heads} heads, mlp {args.mlp_dim}, depth {args.depth}; "
        f"median of {args.rounds} rounds x {args.steps} steps"
    )
    ours_rate = args.batch / statistics.median(seconds["keras_tfm.EncoderBlock"])
    print(f"{'model':40s} {'params':>10s} {'seq/s':>9s} {'ours / this':>12s}")
    for name, model in models.items():
        rate = args.batch / statistics.median(seconds[name])
        print(f"{name:40s} {model.count_params():>10,d} {rate:>9.1f} {ours_rate / rate:>11.2f}x")


if __name__ == "__main__":
    main()
