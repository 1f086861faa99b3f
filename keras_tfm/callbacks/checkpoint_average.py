"""Checkpoint averaging: the mean of the weights of the last few epochs (or of the best few) is often a better
model than any one of them (Vaswani et al. 2017, §6.1, average the last 5 or 20 checkpoints; fairseq's
average_checkpoints). It needs nothing but the snapshots: no more training, no change to the optimizer."""

import json
import os

import keras
import numpy as np

from keras_tfm import files


def _is_float(array):
    return np.issubdtype(array.dtype, np.floating) or array.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def average_weights(snapshots):
    """The element-wise mean of several snapshots of one model's weights.

    Args:
        snapshots: a list of snapshots, each a list of arrays in the order of `model.weights` (what
            `model.get_weights()` returns). Floating-point arrays are averaged (in float64, then cast back to
            their dtype); any other array (an integer counter, a seed) is taken from the last snapshot.

    Returns:
        one list of arrays, the average, ready for `model.set_weights`.

    Example:

    >>> average_weights([[np.array([0.0, 2.0])], [np.array([1.0, 4.0])]])[0].tolist()
    [0.5, 3.0]
    """
    snapshots = [list(snapshot) for snapshot in snapshots]
    if not snapshots:
        raise ValueError("`snapshots` must hold at least one snapshot of the weights. Received: an empty list")
    count = len(snapshots[0])
    for number, snapshot in enumerate(snapshots):
        if len(snapshot) != count:
            raise ValueError(f"`snapshots` must all hold the same weights: snapshot 0 has {count} arrays, snapshot "
                             f"{number} has {len(snapshot)}.")
    averaged = []
    for index, arrays in enumerate(zip(*snapshots)):
        arrays = [np.asarray(array) for array in arrays]
        shapes = {array.shape for array in arrays}
        if len(shapes) > 1:
            raise ValueError(f"`snapshots` disagree on the shape of weight {index}: {sorted(shapes)}.")
        last = arrays[-1]
        if _is_float(last):
            total = np.zeros(last.shape, np.float64)
            for array in arrays:
                total += array.astype(np.float64)
            averaged.append((total / len(arrays)).astype(last.dtype))
        else:
            averaged.append(last)
    return averaged


class CheckpointAverage(keras.callbacks.Callback):
    """Averages the weights of the last `count` epochs (or of the `count` best by `monitor`) when training ends.

    At every epoch end it takes a snapshot of the model's weights (all of `model.weights`; the optimizer's state
    is not part of the model) and keeps those of the `count` epochs it will average; when `fit` ends it sets the
    model's weights to their element-wise mean (`average_weights`). Averaging the last checkpoints is how the 2017
    paper evaluated its translation models (§6.1): the average sits nearer the middle of the valley the last
    epochs wander around in than any one of them.

    With `monitor` (e.g. `"val_loss"`, or `"val_bleu"` from `keras_tfm.text.ValidationBLEU` placed before this
    callback), it keeps the `count` epochs best by that value instead (a tie goes to the later epoch); epochs whose
    logs lack it, or hold a NaN, are not kept.
    `count=1` with `monitor` keeps the best epoch (like `EarlyStopping(restore_best_weights=True)`, without the
    stopping).

    With `directory`, the snapshots are `.npz` files there (plus `snapshots.json`, the epochs and their values),
    so a run resumed by `keras.callbacks.BackupAndRestore` still averages the epochs it trained before the
    interruption; a snapshot of an epoch trained again replaces the old one. Without it they live in memory
    (`count` copies of the weights).

    Args:
        count: how many epochs to average, a positive integer.
        monitor: None to keep the last `count` epochs, or the name of a value in the epoch logs.
        mode: `"max"`, `"min"`, or `"auto"`: max for names with "acc", "bleu", "auc", "f1", "precision" or
            "recall" in them, else min.
        directory: a folder for the snapshots (created), or None to keep them in memory.
        apply: whether to set the model's weights to the average when training ends (otherwise call
            `apply_average()` or `average()` yourself).
        verbose: whether to print which epochs were averaged.

    Attributes:
        kept: `[(epoch, value), ...]` of the snapshots kept, epochs counted from 0 (value None without
            `monitor`).
        averaged_epochs: the epochs the model's weights were last averaged from, or None.

    Example:

    >>> average = CheckpointAverage(count=5)
    >>> model.fit(x, y, epochs=30, callbacks=[average])  # doctest: +SKIP
    >>> average.averaged_epochs  # the model now holds the mean of epochs 25..29  # doctest: +SKIP
    [25, 26, 27, 28, 29]
    """

    _MAX_WORDS = ("acc", "bleu", "auc", "f1", "precision", "recall")

    def __init__(self, count=5, monitor=None, mode="auto", directory=None, apply=True, verbose=True):
        super().__init__()
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`count` must be a positive integer (epochs to average). Received: count={count!r}")
        if monitor is not None and not isinstance(monitor, str):
            raise TypeError(f"`monitor` must be None or the name of a logged value. Received: monitor={monitor!r}")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"`mode` must be 'auto', 'min' or 'max'. Received: mode={mode!r}")
        if mode == "auto":
            mode = "max" if monitor and any(word in monitor.lower() for word in self._MAX_WORDS) else "min"
        self.count, self.monitor, self.mode = count, monitor, mode
        self.directory, self.apply, self.verbose = directory, apply, verbose
        self.kept = []
        self.averaged_epochs = None
        self._snapshots = {}  # epoch -> list of arrays (in memory only)
        self._first_epoch_seen = False

    # -- bookkeeping --------------------------------------------------------------------------------------------

    def _path(self, epoch):
        return os.path.join(self.directory, f"epoch_{epoch + 1:03d}.npz")

    def _index_path(self):
        return os.path.join(self.directory, "snapshots.json")

    def _write_index(self):
        files.write_json(self._index_path(), {"monitor": self.monitor, "mode": self.mode,
                                              "kept": [{"epoch": e, "value": v} for e, v in self.kept]}, indent=1)

    def _read_index(self):
        if self.directory is None or not os.path.exists(self._index_path()):
            return []
        with open(self._index_path()) as file:
            index = json.load(file)
        if index.get("monitor") != self.monitor:
            raise ValueError(f"`directory` {self.directory!r} holds snapshots kept by monitor={index.get('monitor')!r}, "
                             f"not {self.monitor!r}: give another directory or the same monitor.")
        return [(entry["epoch"], entry["value"]) for entry in index["kept"] if os.path.exists(self._path(entry["epoch"]))]

    def _chosen(self, candidates):
        """The `count` snapshots to keep out of `candidates`, in epoch order."""
        if self.monitor is None:
            chosen = sorted(candidates)[-self.count :]
        else:
            ranked = sorted(candidates, key=lambda kept: (-kept[1] if self.mode == "max" else kept[1], -kept[0]))
            chosen = ranked[: self.count]
        return sorted(chosen)

    def _store(self, epoch, arrays):
        if self.directory is None:
            self._snapshots[epoch] = arrays
            return
        os.makedirs(self.directory, exist_ok=True)
        # Float weights are stored as float32 (exact for float16 and bfloat16, which NumPy files cannot name).
        stored = {f"w{i}": (a.astype(np.float32) if _is_float(a) and a.dtype.itemsize < 4 else a)
                  for i, a in enumerate(arrays)}
        with files.atomic_path(self._path(epoch)) as partial:  # its name ends in .npz: np.savez adds nothing
            np.savez(partial, **stored)

    def _load(self, epoch):
        if self.directory is None:
            return self._snapshots[epoch]
        with np.load(self._path(epoch)) as data:
            return [data[f"w{i}"] for i in range(len(data.files))]

    def _forget(self, epoch):
        if self.directory is None:
            self._snapshots.pop(epoch, None)
        elif os.path.exists(self._path(epoch)):
            os.remove(self._path(epoch))

    # -- callback hooks -----------------------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self.kept = self._read_index() if self.directory is not None else list(self.kept)
        self._first_epoch_seen = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self._first_epoch_seen:
            # Snapshots of this epoch or later were taken by a run that stopped after them: they are redone now.
            self._first_epoch_seen = True
            for stale, _ in [kept for kept in self.kept if kept[0] >= epoch]:
                self._forget(stale)
            self.kept = [kept for kept in self.kept if kept[0] < epoch]

    def on_epoch_end(self, epoch, logs=None):
        value = None
        if self.monitor is not None:
            value = (logs or {}).get(self.monitor)
            if value is None:
                return
            value = float(value)
            if not np.isfinite(value):
                return
        candidates = [kept for kept in self.kept if kept[0] != epoch] + [(epoch, value)]
        chosen = self._chosen(candidates)
        if (epoch, value) in chosen:
            self._store(epoch, [keras.ops.convert_to_numpy(w) for w in self.model.weights])
        for dropped in set(candidates) - set(chosen):
            self._forget(dropped[0])
        self.kept = chosen
        if self.directory is not None:
            self._write_index()

    def on_train_end(self, logs=None):
        if self.apply and self.kept:
            self.apply_average()

    # -- results ------------------------------------------------------------------------------------------------

    def average(self, epochs=None):
        """The mean of the kept snapshots (or of those of `epochs`, a subset of them) as a list of arrays."""
        epochs = [e for e, _ in self.kept] if epochs is None else list(epochs)
        missing = sorted(set(epochs) - {e for e, _ in self.kept})
        if not epochs or missing:
            raise ValueError(f"`epochs` must name kept snapshots {[e for e, _ in self.kept]}. Received: {epochs!r}")
        return average_weights([self._load(epoch) for epoch in sorted(epochs)])

    def apply_average(self, epochs=None):
        """Sets the model's weights to `average(epochs)`; returns the epochs averaged."""
        epochs = sorted(e for e, _ in self.kept) if epochs is None else sorted(epochs)
        averaged = self.average(epochs)
        for variable, array in zip(self.model.weights, averaged):
            variable.assign(keras.ops.cast(array, variable.dtype))
        self.averaged_epochs = epochs
        if self.verbose:
            what = "last" if self.monitor is None else f"best by {self.monitor} of the"
            print(f"CheckpointAverage: the model now holds the average of the {what} {len(epochs)} epochs "
                  f"({', '.join(str(e + 1) for e in epochs)})")
        return epochs
