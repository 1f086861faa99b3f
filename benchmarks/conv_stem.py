"""Training speed of `ConvTokenizer` (the conv stem of the `cifar10_cpu` ViT preset) against the same stem built
from Keras' `Conv2D` and `MaxPooling2D`, side by side in one process.

When JAX traces it on a CPU (a training step), `ConvTokenizer` writes two steps out by hand where XLA's CPU code
is slow (the module's docstring): the convolution as a product of 3x3 neighbourhoods, the max-pool as maxima of
strided slices. This benchmark says whether that pays on this machine. TensorFlow and PyTorch run Keras' layers
in both models (about 1.00x there: a check of the benchmark itself). Both models are the stem, global average
pooling and a 10-way Dense head, with the same weights (copied, and their compiled outputs checked equal); they
train with `train_on_batch` (AdamW, sparse cross-entropy) in interleaved rounds (`timing.timed_rounds`).

    python benchmarks/conv_stem.py                                   # JAX, batch 128 of 32x32 images
    python benchmarks/conv_stem.py --quick                           # tiny sizes: a check that it runs
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")  # the backend whose stem is hand-written
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import timing  # noqa: E402

from keras_tfm.layers import ConvTokenizer  # noqa: E402

OURS, THEIRS = "keras_tfm.ConvTokenizer", "keras Conv2D + MaxPooling2D"


def stems(args):
    """{name: model}: the two stems with the same weights, each with a pooled Dense head."""
    inputs = keras.Input((args.image_size, args.image_size, 3))
    tokenizer = ConvTokenizer(args.dim, stages=args.stages)
    head = keras.layers.Dense(10)
    ours = keras.Model(inputs, head(keras.layers.GlobalAveragePooling2D()(tokenizer(inputs))))
    x = inputs
    for convolution in tokenizer.convolutions:
        x = keras.layers.Conv2D(convolution.filters, 3, padding="same", use_bias=False, activation="relu")(x)
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    theirs = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x)))
    theirs.set_weights(ours.get_weights())
    return {OURS: ours, THEIRS: theirs}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128, help="channels of the last stage (the preset's width)")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-jit", dest="jit", action="store_false", help="run without XLA compilation")
    args = timing.parse_args(parser, argv, {"batch": 4, "image_size": 8, "dim": 8, "steps": 1, "rounds": 1,
                                            "jit": False})

    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, 10, size=(args.batch,)).astype("int32")
    keras.utils.set_random_seed(0)
    models = stems(args)
    for model in models.values():
        model.compile(keras.optimizers.AdamW(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=args.jit)
    outputs = [model.predict_on_batch(images) for model in models.values()]  # compiled, as the steps are
    difference = float(np.abs(outputs[0] - outputs[1]).max())
    if difference > 1e-4 * max(1.0, float(np.abs(outputs[1]).max())):
        raise SystemExit(f"the two stems disagree: largest difference {difference}")
    for model in models.values():
        for _ in range(2):  # trace/compile and warm up
            model.train_on_batch(images, labels)

    steps = {name: (lambda model=model: model.train_on_batch(images, labels)) for name, model in models.items()}
    seconds = timing.timed_rounds(steps, args.rounds, repeats=args.steps, warmup=False)
    print(f"\nConv stem training, {keras.backend.backend()} backend, jit_compile={args.jit}, batch {args.batch}, "
          f"{args.image_size}x{args.image_size}x3 images, {args.stages} stages to {args.dim} channels; "
          f"outputs equal to {difference:.1e}; median of {args.rounds} rounds x {args.steps} steps")
    theirs = statistics.median(seconds[THEIRS])
    print(f"{'stem':32s} {'ms/step':>9s} {'images/s':>9s} {'speed-up':>9s}")
    for name in models:
        step = statistics.median(seconds[name])
        print(f"{name:32s} {1000 * step:>9.1f} {args.batch / step:>9.1f} {theirs / step:>8.2f}x")


if __name__ == "__main__":
    main()
