"""What AttentionMapCallback adds to an epoch of the reverse-digits recipe (target: <= 3% at every_n_epochs=1).

Two identical models train on the recipe's default data side by side in one process, one epoch at a time,
alternating in ABBA order: one with the callback drawing its pictures at the end of every epoch, one without.
The callback works synchronously at the end of the epoch, so its cost is the time spent inside it, which is
timed directly and compared with the median epoch without it (a precise number); the difference of the two
median epoch times is printed too, but on a shared machine it moves by several percent from run to run.

    python benchmarks/callback_overhead.py               # defaults: recipe data, 6 rounds after a warm-up epoch
    python benchmarks/callback_overhead.py --rounds 2 --samples 4000
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

from keras_tfm.callbacks import AttentionMapCallback  # noqa: E402
from keras_tfm.data import digits  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer  # noqa: E402


class TimedAttentionMapCallback(AttentionMapCallback):
    """Records how long each end-of-epoch drawing takes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = []

    def on_epoch_end(self, epoch, logs=None):
        start = time.perf_counter()
        super().on_epoch_end(epoch, logs)
        self.seconds.append(time.perf_counter() - start)


def build(max_digits):
    keras.utils.set_random_seed(0)
    model = Seq2SeqTransformer.from_preset(
        "tiny", source_vocab_size=digits.VOCAB_SIZE, target_vocab_size=digits.VOCAB_SIZE,
        max_length=max_digits + 2, dropout=0.0,
    )
    model.compile_for_training(optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0))
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000, help="training pairs (the recipe's default)")
    parser.add_argument("--max-digits", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)

    x, y = digits.make_dataset(args.samples, args.max_digits, seed=0)
    x_test, y_test = digits.make_dataset(1, args.max_digits, seed=1)  # as the recipe: one string per epoch
    with tempfile.TemporaryDirectory() as folder:
        callback = TimedAttentionMapCallback((x_test, y_test[:, :-1]), output_dir=folder, tokens=digits.VOCABULARY)
        runs = {"without callback": (build(args.max_digits), []), "with AttentionMapCallback": (build(args.max_digits), [callback])}
        seconds = {name: [] for name in runs}
        for round_index in range(args.rounds + 1):  # round 0 compiles and warms up
            order = list(runs) if round_index % 2 else list(runs)[::-1]  # ABBA: no model always goes first
            for name in order:
                model, callbacks = runs[name]
                start = time.perf_counter()
                model.fit((x, y[:, :-1]), y[:, 1:], batch_size=args.batch_size, epochs=1, callbacks=callbacks, verbose=0)
                if round_index:
                    seconds[name].append(time.perf_counter() - start)
        pictures = len(callback.written)

    base, with_maps = (statistics.median(seconds[name]) for name in runs)
    inside = statistics.median(callback.seconds[1:])
    print(f"\nreverse-digits epoch ({args.samples} pairs, batch {args.batch_size}), {keras.backend.backend()} backend, "
          f"median of {args.rounds} rounds; the callback wrote {pictures} PNGs")
    for name in runs:
        print(f"{name:28s} {statistics.median(seconds[name]):7.2f} s/epoch")
    print(f"time inside the callback: {inside:.3f} s/epoch = {100 * inside / base:.1f}% of an epoch (target <= 3%)")
    print(f"difference of the median epoch times: {100 * (with_maps / base - 1):+.1f}%")


if __name__ == "__main__":
    main()
