"""What writing a run's files atomically costs: an epoch of `reverse_digits` with Keras' own BackupAndRestore,
ModelCheckpoint and CSVLogger (files written in place) against keras_tfm's (temporary name, fsync, rename; the
previous epoch's backup kept until the new one is complete).

The model, data and batch are the recipe's defaults (Seq2SeqTransformer "tiny", 20,000 strings of up to 10 digits,
batch 64). Each round trains one epoch with each set of callbacks, in alternating order (`timing.interleaved`),
after a warm-up round; the table gives the median epoch and, separately, the median time of the epoch-end
writes alone, and their ratio (keras_tfm / Keras). The target: at most 1.02x an epoch.

    python benchmarks/atomic_writes.py
    python benchmarks/atomic_writes.py --quick   # 1,000 strings, 2 rounds: a check that it runs
"""

import argparse
import os
import sys
import tempfile
import time

import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: --quick
import timing  # noqa: E402

from keras_tfm.callbacks import BackupAndRestore, CSVLogger, LatestCheckpoint  # noqa: E402
from keras_tfm.data import digits  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer  # noqa: E402


class WriteClock(keras.callbacks.Callback):
    """Times the callbacks listed after it at epoch ends: started here, read by `WriteClockEnd`."""

    def on_epoch_end(self, epoch, logs=None):
        self.started = time.perf_counter()


class WriteClockEnd(keras.callbacks.Callback):
    def __init__(self, start):
        super().__init__()
        self.start, self.seconds = start, None

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start.started


def callbacks(kind, folder):
    if kind == "keras":
        return [keras.callbacks.CSVLogger(os.path.join(folder, "history.csv"), append=True),
                keras.callbacks.BackupAndRestore(os.path.join(folder, "backup"), delete_checkpoint=False),
                keras.callbacks.ModelCheckpoint(os.path.join(folder, "checkpoint.keras"))]
    return [CSVLogger(os.path.join(folder, "history.csv")),
            BackupAndRestore(os.path.join(folder, "backup"), delete_backup=False),
            LatestCheckpoint(os.path.join(folder, "checkpoint.keras"))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000, help="training strings (the recipe's default)")
    parser.add_argument("--rounds", type=int, default=5, help="epochs timed with each set of callbacks")
    args = timing.parse_args(parser, argv, {"samples": 1000, "rounds": 2})
    keras.utils.set_random_seed(0)
    x, y = digits.make_dataset(args.samples, 10, "reverse", seed=0)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                           target_vocab_size=digits.VOCAB_SIZE, max_length=12)
    model.compile_for_training(optimizer=keras.optimizers.AdamW(3e-3))
    root = tempfile.mkdtemp()
    epochs = {"keras": 0, "keras_tfm": 0}
    writes = {"keras": [], "keras_tfm": []}

    def epoch(kind):
        folder = os.path.join(root, kind)
        os.makedirs(folder, exist_ok=True)  # Keras' CSVLogger does not make it
        start = WriteClock()
        end = WriteClockEnd(start)
        begin = time.perf_counter()
        model.fit((x, y[:, :-1]), y[:, 1:], batch_size=64, epochs=epochs[kind] + 1, initial_epoch=epochs[kind],
                  callbacks=[start, *callbacks(kind, folder), end], verbose=0)
        seconds = time.perf_counter() - begin
        epochs[kind] += 1
        writes[kind].append(end.seconds)
        return seconds

    times = timing.interleaved(epoch, ["keras", "keras_tfm"], rounds=args.rounds)
    epoch_median = timing.medians(times)
    write_median = timing.medians({kind: values[1:] for kind, values in writes.items()})  # the warm-up dropped
    print(f"reverse_digits defaults, {args.samples:,} strings, batch 64, {args.rounds} rounds, "
          f"{keras.backend.backend()}; files in {root}")
    print(f"{'callbacks':<12}{'epoch (s)':>12}{'writes (ms)':>14}")
    for kind in ("keras", "keras_tfm"):
        print(f"{kind:<12}{epoch_median[kind]:>12.2f}{1000 * write_median[kind]:>14.1f}")
    ratio = epoch_median["keras_tfm"] / epoch_median["keras"]
    print(f"keras_tfm / keras: {ratio:.3f}x an epoch, {write_median['keras_tfm'] / write_median['keras']:.2f}x "
          f"the writes ({1000 * (write_median['keras_tfm'] - write_median['keras']):+.1f} ms an epoch)")
    return {"epoch": epoch_median, "writes": write_median, "ratio": ratio}


if __name__ == "__main__":
    main()
