"""A one-minute demo: train a tiny Transformer encoder on generated data and print its loss.

The task needs attention, positions and padding masks at once: given a variable-length sequence of digits
(0 is padding), say whether its first and last real digits are the same. A bag of tokens cannot answer it
(order matters), and padding must be ignored to find the "last" digit.

    python -m recipes.demo
    python -m recipes.demo --epochs 8 --samples 20000
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_tfm  # noqa: E402

VOCAB_SIZE = 10  # digits 1..9, 0 = padding


def make_data(samples, max_length, seed):
    """Sequences of 3..max_length digits, half of them ending with their first digit; label 1 if so."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((samples, max_length), dtype="int32")
    labels = rng.integers(0, 2, size=samples).astype("int32")
    for row in range(samples):
        length = rng.integers(3, max_length + 1)
        ids[row, :length] = rng.integers(1, VOCAB_SIZE, size=length)
        if labels[row]:
            ids[row, length - 1] = ids[row, 0]
        else:
            while ids[row, length - 1] == ids[row, 0]:
                ids[row, length - 1] = rng.integers(1, VOCAB_SIZE)
    return ids, labels


def build_model(max_length, dim=32, depth=2, num_heads=4):
    ids = keras.Input((max_length,), dtype="int32", name="ids")
    x = keras_tfm.TokenEmbedding(VOCAB_SIZE, dim, max_length=max_length)(ids)  # (batch, length, dim) + mask
    for _ in range(depth):
        x = keras_tfm.EncoderBlock(num_heads, mlp_dim=2 * dim)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)  # mean over real tokens only: the mask is respected
    logits = keras.layers.Dense(2, name="logits")(x)
    return keras.Model(ids, logits, name="first_equals_last")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=12000)
    parser.add_argument("--max-length", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("epochs", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.max_length < 3:
        parser.error(f"--max-length must be at least 3, got {args.max_length}")

    keras.utils.set_random_seed(args.seed)
    x_train, y_train = make_data(args.samples, args.max_length, args.seed)
    x_test, y_test = make_data(2000, args.max_length, args.seed + 1)
    model = build_model(args.max_length)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    print(f"keras_tfm {keras_tfm.__version__} on the {keras.backend.backend()} backend; "
          f"{model.count_params():,} parameters")
    start = time.time()
    history = model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"training loss: {history.history['loss'][0]:.4f} (epoch 1) -> {history.history['loss'][-1]:.4f} "
          f"(epoch {args.epochs}); held-out accuracy {accuracy:.3f} (chance 0.5); {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
