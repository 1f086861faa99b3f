"""Is the input pipeline fast enough? Images/s of the CIFAR-10 recipe's `tf.data` training pipeline alone, beside
the images/s of the model's training step, in one process.

A pipeline slower than the step starves the model: the device waits for data whatever its speed. Measured for the
recipe's augmentation settings (crop and flip only; + RandAugment; + RandAugment, MixUp and CutMix) on random
uint8 images of CIFAR-10's shape (the pipeline caches decoded images, so files play no part after the first
epoch), then one training step of the recipe's default model at the same batch size. The pipeline runs on the
CPU in every backend (tf.data); on a GPU machine its speed is the one that matters beside a much faster step.

    python benchmarks/input_pipeline.py                       # ViT "small" (the recipe's default), batch 128
    python benchmarks/input_pipeline.py --preset cifar10_cpu --batches 20
    python benchmarks/input_pipeline.py --dry-run             # seconds: checks that it runs (CI, gpu_check.sh)
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from recipes import devices  # noqa: E402
from recipes import cifar10_vit  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_tfm.data import cifar10  # noqa: E402

SETTINGS = {
    "crop+flip": {},
    "+ RandAugment": {"randaugment": 0.5},
    "+ RandAugment, MixUp, CutMix": {"randaugment": 0.5, "mixup": 0.8, "cutmix": 1.0},
}


def images_per_second(batches, batch_size, run_one):
    run_one()  # warm-up: tracing, the cache filling, the first compile
    start = time.perf_counter()
    for _ in range(batches):
        run_one()
    return batches * batch_size / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", help="the ViT preset of the model step (recipe default: small)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=40, help="timed batches of each")
    parser.add_argument("--dry-run", action="store_true", help="2 batches of 16 images: only checks that it runs")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.batches, args.batch_size, args.preset = 2, 16, "tiny"
    images = np.random.default_rng(0).integers(0, 256, (max(1024, 4 * args.batch_size), 32, 32, 3), dtype="uint8")
    labels = np.arange(len(images), dtype="int64") % 10
    train = tf.data.Dataset.from_tensor_slices((images, labels))

    print(f"{keras.backend.backend()} backend on {', '.join(devices.training_devices())}, tf.data on "
          f"{os.cpu_count()} CPU cores, batch {args.batch_size}")
    for name, options in SETTINGS.items():
        pipeline = cifar10.training_pipeline(train, args.batch_size, 10, seed=0, **options).repeat()
        iterator = iter(pipeline)
        speed = images_per_second(args.batches, args.batch_size, lambda: next(iterator)[0].numpy())
        print(f"  pipeline {name:<30s} {speed:8.0f} images/s")

    recipe_args = cifar10_vit.parse_args(["--preset", args.preset])
    model = cifar10_vit.build_model(recipe_args, 10)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True), jit_compile="auto")
    x = images[: args.batch_size].astype("float32")
    y = keras.utils.to_categorical(labels[: args.batch_size], 10)
    speed = images_per_second(args.batches, args.batch_size, lambda: model.train_on_batch(x, y))
    print(f"  model step (ViT {args.preset}, jit_compile={model.jit_compile}) {speed:8.0f} images/s")


if __name__ == "__main__":
    main()
