"""`CSVLogger`: one row per epoch in a CSV file that is never cut short and never repeats an epoch."""

import csv
import io
import os

import keras
import numpy as np

from keras_tfm import files


class CSVLogger(keras.callbacks.Callback):
    """Writes the logs of every epoch to a CSV file (a column `epoch`, counted from 0, then the logged values sorted
    by name; "NA" where an epoch has no value: the layout of `keras.callbacks.CSVLogger`), appending to
    the rows of earlier `fit` calls.

    Two differences from Keras' logger make it safe beside `BackupAndRestore`:
    - each epoch rewrites the whole file under a temporary name and renames it (`keras_tfm.files.atomic_path`):
      a crash or a full disk leaves the previous rows whole, never half a row;
    - when `fit` starts at epoch `k` (a resume), rows of epoch `k` and later are dropped first: they were
      written by a run that was stopped before its backup of them was complete, and the resumed `fit` trains
      those epochs again. So a resumed run neither repeats nor loses a row.

    List it before `BackupAndRestore`: the row of an epoch is then written before its backup, and a crash
    between the two costs only that row, which the resumed epoch writes again.

    Args:
        filename: the CSV file.
        append: keep the rows already in the file (default True); False starts the file again at each `fit`.

    Example:

    >>> path = os.path.join(tempfile.mkdtemp(), "history.csv")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, callbacks=[CSVLogger(path)], verbose=0)
    >>> open(path).read().splitlines()[0]
    'epoch,loss'
    """

    async_safe = True  # writes at epoch ends only

    def __init__(self, filename, append=True):
        super().__init__()
        if not isinstance(filename, (str, os.PathLike)) or not os.fspath(filename):
            raise ValueError(f"`filename` must be a file's path. Received: filename={filename!r}")
        if not isinstance(append, bool):
            raise TypeError(f"`append` must be True or False. Received: append={append!r}")
        self.filename, self.append = os.fspath(filename), append
        self._rows = None

    def on_train_begin(self, logs=None):
        self._rows = None  # read at the first epoch, which says where this `fit` starts

    def on_epoch_begin(self, epoch, logs=None):
        if self._rows is None:
            self._rows = [row for row in self._read() if _epoch_of(row) < epoch] if self.append else []

    def on_epoch_end(self, epoch, logs=None):
        self._rows.append({"epoch": str(epoch), **{key: _cell(logs[key]) for key in sorted(logs or {})}})
        columns = []
        for row in self._rows:
            columns += [key for key in row if key not in columns]
        text = io.StringIO()
        writer = csv.DictWriter(text, columns, restval="NA", lineterminator="\n")
        writer.writeheader()
        writer.writerows(self._rows)
        folder = os.path.dirname(os.path.abspath(self.filename))
        os.makedirs(folder, exist_ok=True)
        files.write_text(self.filename, text.getvalue())

    def _read(self):
        if not os.path.exists(self.filename):
            return []
        with open(self.filename, newline="", encoding="utf-8") as file:
            return [row for row in csv.DictReader(file) if row.get("epoch", "").strip().isdigit()]


def _epoch_of(row):
    return int(row["epoch"])


def _cell(value):
    """A logged value as Keras' CSVLogger writes it: numbers as Python would print them, arrays as lists."""
    if isinstance(value, str):
        return value
    array = np.asarray(keras.ops.convert_to_numpy(value) if not isinstance(value, (int, float)) else value)
    if array.ndim:
        return str(array.tolist())
    return str(array.item())
