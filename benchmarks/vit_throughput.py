"""Training throughput (images/s) of keras_tfm's ViT vs keras-hub's ViTBackbone with a Dense head.

Both models have the same size and shape (defaults: 32x32x3 images, 4x4 patches, width 192, depth 6, 4 heads,
MLP 384, 10 classes, [CLS] pooling, learned positions, pre-norm blocks, a final layer norm) and the same
parameter count, which is printed and checked. They are trained side by side in one process with
`train_on_batch` on random images (sparse categorical cross-entropy from logits, AdamW); the rounds are
interleaved (A B A B ...) so that a machine that slows down or speeds up during the run affects both alike.
Prints images/s and the ratio of ours to keras-hub's.

Differences the APIs leave:
* keras-hub's backbone does not rescale pixels (its preprocessor does, outside the model), so ours is built with
  `rescale=False`; both take the images as given.
* keras-hub's backbone returns every token; its [CLS] state is read with `x[:, 0]` and a Dense head is added,
  as `keras_hub.models.ViTImageClassifier` does. Ours has this built in (`pool="cls"`).
* Initialisers differ (they do not change the work per step).

    pip install keras-hub
    python benchmarks/vit_throughput.py                    # defaults: batch 128, 5 rounds x 3 steps
    python benchmarks/vit_throughput.py --quick            # tiny sizes, no XLA: a check that it runs (CI runs it)
"""

import argparse
import os
import sys
import statistics

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm.models import ViT, ViTBackbone  # noqa: E402

OURS = "keras_tfm.models.ViT"
THEIRS = "keras_hub.models.ViTBackbone + Dense"


def ours_vit(args):
    return ViT(ViTBackbone(image_size=args.image_size, patch_size=args.patch_size, dim=args.dim, depth=args.depth,
                           num_heads=args.heads, mlp_dim=args.mlp_dim, position="learned",
                           rescale=False),  # keras-hub's backbone does not rescale either
               num_classes=args.classes, pool="cls", name="keras_tfm_vit")


def keras_hub_vit(args):
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3),
        patch_size=args.patch_size,
        num_layers=args.depth,
        num_heads=args.heads,
        hidden_dim=args.dim,
        mlp_dim=args.mlp_dim,
        layer_norm_epsilon=1e-6,  # the same as ours
    )  # includes the [CLS] token, learned positions and the final layer norm
    images = keras.Input((args.image_size, args.image_size, 3), name="images")
    tokens = backbone(images)  # (batch, 1 + patches, dim), after the final layer norm
    logits = keras.layers.Dense(args.classes, name="head")(tokens[:, 0])  # the [CLS] token's state
    return keras.Model(images, logits, name="keras_hub_vit")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--patch-size", type=int, default=4)
    parser.add_argument("--dim", type=int, default=192)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--mlp-dim", type=int, default=384)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-jit", dest="jit", action="store_false", help="run without XLA compilation")
    args = timing.parse_args(parser, argv, {"batch": 4, "dim": 16, "depth": 1, "heads": 2, "mlp_dim": 32,
                                            "steps": 1, "rounds": 1, "jit": False})

    try:
        import keras_hub  # noqa: F401
    except ImportError:
        parser.exit(1, "keras-hub is not installed (pip install keras-hub): there is nothing to compare with\n")

    rng = np.random.default_rng(0)
    images = rng.uniform(-1.0, 1.0, size=(args.batch, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, args.classes, size=(args.batch,)).astype("int32")

    models = {}
    for name, build in ((OURS, ours_vit), (THEIRS, keras_hub_vit)):
        keras.utils.set_random_seed(0)
        model = build(args)
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=args.jit,
        )
        for _ in range(2):  # trace/compile and warm up
            model.train_on_batch(images, labels)
        models[name] = model

    params = {name: model.count_params() for name, model in models.items()}
    if params[OURS] != params[THEIRS]:
        print(f"WARNING: the parameter counts differ: {params}")

    steps = {name: (lambda model=model: model.train_on_batch(images, labels)) for name, model in models.items()}
    seconds = timing.timed_rounds(steps, args.rounds, repeats=args.steps, warmup=False)

    print(
        f"\nViT training, {keras.backend.backend()} backend, jit_compile={args.jit}, batch {args.batch}, "
        f"{args.image_size}x{args.image_size}x3 images, patch {args.patch_size}, dim {args.dim}, depth {args.depth}, "
        f"{args.heads} heads, mlp {args.mlp_dim}, {args.classes} classes; AdamW; "
        f"median of {args.rounds} rounds x {args.steps} steps"
    )
    ours_rate = args.batch / statistics.median(seconds[OURS])
    print(f"{'model':40s} {'params':>10s} {'ms/step':>9s} {'images/s':>9s} {'ours / this':>12s}")
    for name in models:
        step = statistics.median(seconds[name])
        rate = args.batch / step
        print(f"{name:40s} {params[name]:>10,d} {1000 * step:>9.1f} {rate:>9.1f} {ours_rate / rate:>11.2f}x")


if __name__ == "__main__":
    main()
