"""`BackupAndRestore`: resumes an interrupted `fit` at its last finished epoch, and no crash can lose that epoch."""

import glob
import json
import os
import re

import h5py
import keras

from keras_tfm import files
from keras_tfm._keras_workarounds import resume_fit_at_epoch

METADATA = "training_metadata.json"  # {"epoch": N, "weights": "epoch-000N.weights.h5"}; Keras' name and key
_WEIGHTS = re.compile(r"^epoch-(\d+)\.weights\.h5$")
_KERAS_WEIGHTS = "latest.weights.h5"  # what keras.callbacks.BackupAndRestore writes: read by a resume, never written


def weights_name(epoch):
    """The file in the backup folder that holds the state after `epoch` finished epochs."""
    return f"epoch-{epoch:04d}.weights.h5"


def read_metadata(backup_dir):
    """The backup's metadata as a dict, or None where it is missing or cannot be read (empty, cut short)."""
    try:
        with open(os.path.join(backup_dir, METADATA)) as file:
            metadata = json.load(file)
        return metadata if isinstance(metadata, dict) and isinstance(metadata.get("epoch"), int) else None
    except (OSError, ValueError):
        return None


def backed_up_epochs(backup_dir):
    """The finished epochs that a restore from `backup_dir` will give back (0 when there are none): those of the
    state its metadata names, or where that file or the metadata is damaged, of the newest whole one. Read
    before `fit` (a recipe that orders its batches by epoch starts its data there)."""
    for epoch, path in _candidates(backup_dir)[1]:
        if _whole(path):
            return epoch
    return 0


def _candidates(backup_dir):
    """The metadata (or None) and the (epoch, path) states to try, best first: the one the metadata names, then
    every epoch file, newest first."""
    metadata = read_metadata(backup_dir)
    candidates = []
    if metadata is not None:
        candidates.append((metadata["epoch"], os.path.join(backup_dir, metadata.get("weights", _KERAS_WEIGHTS))))
    candidates += [found for found in _epoch_files(backup_dir) if found not in candidates]
    return metadata, candidates


def _whole(path):
    """Whether the HDF5 file at `path` opens and every array in it can be read (a file cut short cannot)."""
    try:
        with h5py.File(path, "r") as file:
            file.visititems(lambda name, item: item[()] if isinstance(item, h5py.Dataset) else None)
        return True
    except Exception:  # h5py's OSError for a damaged file, KeyError or RuntimeError inside one
        return False


def _epoch_files(backup_dir):
    """(epoch, path) of the epoch files in `backup_dir`, newest first."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(backup_dir), "epoch-*.weights.h5")):
        match = _WEIGHTS.match(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


class BackupAndRestore(keras.callbacks.Callback):
    """Backs up the model and optimizer after every epoch, and resumes an interrupted `fit` where it stopped:
    `keras.callbacks.BackupAndRestore`'s job, done so that a crash at any moment loses no finished epoch.

    Keras' callback writes its backup in place. A process killed during that write (the OOM killer, a preempted
    machine), or a full disk, leaves a backup cut short, and the next `fit` ends in a traceback: every finished
    epoch is lost. Here each epoch's state is a new file, written under a temporary name and renamed
    (`keras_tfm.files.atomic_path`), then the metadata that names it, the same way; the previous epoch's file is
    deleted only after that. So the backup folder always holds one complete state, and a resume finds it:

        backup/epoch-0006.weights.h5      the state after 6 epochs (kept until epoch 7's is complete)
        backup/epoch-0007.weights.h5      the state after 7 epochs
        backup/training_metadata.json     {"epoch": 7, "weights": "epoch-0007.weights.h5"}

    At the start of `fit` it restores the newest state that loads: the one the metadata names, else (a damaged
    file, unreadable metadata) the next older one, saying in one line what it found and from which epoch it
    goes on. It never silently starts again from epoch 0 over a backup that holds finished epochs: if none of
    its files loads, `fit` stops with a `ValueError` naming them. A folder written by Keras' own callback
    (`latest.weights.h5`) is restored too.

    Use it in place of `keras.callbacks.BackupAndRestore`, with `CSVLogger` and `LatestCheckpoint` from this
    package, whose files are written the same way. It saves at epoch ends only.

    Args:
        backup_dir: the folder of the backup (created when needed). One `fit` at a time may use it.
        delete_backup: delete the folder when `fit` ends normally (Keras' `delete_checkpoint`; default True).
            The recipes keep it until the run's last file is written.
        verbose: print the one line that says what a restore found (default True).

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> backup = BackupAndRestore(os.path.join(tempfile.mkdtemp(), "backup"))
    >>> _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, callbacks=[backup], verbose=0)
    >>> backup.restored_epoch  # nothing to restore on the first run
    0
    """

    async_safe = True  # it writes at epoch ends; there is no batch hook to wait for

    def __init__(self, backup_dir, delete_backup=True, verbose=True):
        super().__init__()
        if not isinstance(backup_dir, (str, os.PathLike)) or not os.fspath(backup_dir):
            raise ValueError(f"`backup_dir` must be a folder's path. Received: backup_dir={backup_dir!r}")
        for name, value in (("delete_backup", delete_backup), ("verbose", verbose)):
            if not isinstance(value, bool):
                raise TypeError(f"`{name}` must be True or False. Received: {name}={value!r}")
        self.backup_dir = os.fspath(backup_dir)
        self.delete_backup, self.verbose = delete_backup, verbose
        self.restored_epoch = None  # the epochs restored by the last `fit` (0: none), set in on_train_begin
        self.report = None  # what the restore found, when it was not the state the metadata named

    # -- restore ------------------------------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        if not self.model.built:
            raise ValueError("BackupAndRestore needs a built model before `fit` (call it on a batch, or give it an "
                             f"`Input`): the backup's weights are loaded into it. Received an unbuilt {self.model}")
        files.remove_partials(self.backup_dir)  # left by a write that was killed; the state they were for is lost
        self.report = None
        self.restored_epoch = self._restore()
        if self.restored_epoch:
            resume_fit_at_epoch(self.model, self.restored_epoch)
        if self.report and self.verbose:
            print(self.report)

    def _restore(self):
        metadata, candidates = _candidates(self.backup_dir)
        unreadable = metadata is None and os.path.exists(os.path.join(self.backup_dir, METADATA))
        if not candidates:
            if unreadable:
                raise ValueError(f"{self.backup_dir}: {METADATA} cannot be read and no epoch's weights are there, so "
                                 "the epochs it recorded cannot be restored. Delete the folder to start again.")
            return 0
        problems = [f"{METADATA} cannot be read"] if unreadable else []
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)  # so that its state loads too
        for epoch, path in candidates:
            try:
                if not _whole(path):  # checked first, as `backed_up_epochs` checks: both pick the same state
                    raise OSError("a damaged or incomplete HDF5 file")
                self.model.load_weights(path)
            except Exception as error:  # a file cut short, emptied or missing: h5py's OSError, Keras' ValueError
                reason = "is missing" if not os.path.exists(path) else f"cannot be read ({_first_line(error)})"
                problems.append(f"{os.path.basename(path)} {reason}")
                continue
            if problems:
                self.report = (f"{self.backup_dir}: " + "; ".join(problems)
                               + f"; restored the state after epoch {epoch} from {os.path.basename(path)}, and "
                               f"training goes on from epoch {epoch + 1}")
            return epoch
        raise ValueError(f"{self.backup_dir}: no backed-up state can be loaded (" + "; ".join(problems)
                         + "). Restore the folder from a copy, or delete it to start again from epoch 1.")

    # -- back up ------------------------------------------------------------------------------------------------

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        name = weights_name(epoch + 1)
        with files.atomic_path(os.path.join(self.backup_dir, name)) as partial:
            self.model.save_weights(partial)
        files.write_json(os.path.join(self.backup_dir, METADATA), {"epoch": epoch + 1, "batch": 0, "weights": name})
        # The new state is complete and named: older ones can go (the one just before stays, in case this file is
        # damaged later on the disk).
        for old_epoch, path in _epoch_files(self.backup_dir):
            if old_epoch < epoch:
                os.remove(path)
        keras_weights = os.path.join(self.backup_dir, _KERAS_WEIGHTS)
        if os.path.exists(keras_weights):
            os.remove(keras_weights)  # a Keras-written backup this run resumed from: superseded now

    def on_train_end(self, logs=None):
        if self.delete_backup and os.path.isdir(self.backup_dir):
            for name in os.listdir(self.backup_dir):
                os.remove(os.path.join(self.backup_dir, name))
            os.rmdir(self.backup_dir)


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
