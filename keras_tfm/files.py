"""Files written whole or not at all, so that a crash never leaves a reader half a file.

A process can be killed at any instruction (the OOM killer, a preempted machine, SIGKILL), and a disk can fill up
in the middle of a write. A file written in place is then cut short: a `.keras` model that no longer loads, a
backup that ends a resume in a traceback. Trusted trainers (Orbax, PyTorch Lightning, TensorFlow's
`CheckpointManager`) write to another name and rename; so does everything here:

    with atomic_path("run/checkpoint.keras") as partial:   # a hidden name in the same folder
        model.save(partial)
    # fsynced, then renamed over run/checkpoint.keras in one step (os.replace): the old file stayed whole until now

A crash before the rename leaves the old file (and a `.partial-*` file that `remove_partials` deletes); after it,
the new one. An `OSError` while writing (a full disk, a read-only folder) deletes the partial file and is raised
as a `WriteError` that names the file being replaced, not the hidden one.

Used by the library's `BackupAndRestore`, `CSVLogger` and `LatestCheckpoint` callbacks, the explorer page, and the
recipes' run files. Plain Python: no Keras.
"""

import contextlib
import errno
import json
import os
import time

PARTIAL_PREFIX = ".partial-"

# A test hook (tests/test_files.py, tests/recipes/test_faults.py): with KERAS_TFM_PAUSE_BEFORE_RENAME set to a file
# name, a write of that name stops between its fsync and its rename, creates `<partial>.paused` to say so, and waits
# there, so that a test can kill the process inside the write. Unset (always, outside tests) it costs one lookup.
PAUSE_VARIABLE = "KERAS_TFM_PAUSE_BEFORE_RENAME"


class WriteError(OSError):
    """An `OSError` while writing `filename` (the file being replaced): its `errno` and `strerror` are the
    original error's where it had them (`errno.ENOSPC` for a full disk)."""

    def __str__(self):
        return f"could not write {self.filename}: {self.strerror}"


def partial_path(path):
    """The hidden name `atomic_path` writes `path` under: `.partial-<pid>-<name>` in the same folder (so that the
    rename stays on one filesystem, and the name keeps its ending: Keras checks `.keras` and `.weights.h5`)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(folder, f"{PARTIAL_PREFIX}{os.getpid()}-{name}")


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path to write `path` to; when the block ends without an error, the file written there
    is fsynced and renamed over `path` (and the folder fsynced, so the rename survives a power cut).

    Args:
        path: the file to write (or replace).

    Raises:
        WriteError: an `OSError` raised in the block or while renaming, naming `path`; the partial file is deleted
            and `path` is left as it was.
    """
    path = os.fspath(path)
    partial = partial_path(path)
    try:
        yield partial
        if not os.path.exists(partial):
            raise FileNotFoundError(errno.ENOENT, "the block wrote nothing to the partial path", partial)
        _fsync(partial)
        _pause_for_tests(path, partial)
        os.replace(partial, path)
        _fsync(os.path.dirname(os.path.abspath(path)))
    except BaseException as error:  # a Ctrl-C too: it must not leave the partial file behind
        with contextlib.suppress(OSError):
            os.remove(partial)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            code = error.errno if error.errno is not None else _errno_in(str(error))
            raise WriteError(code, os.strerror(code) if code else str(error), path) from error
        raise


def write_text(path, text):
    """Writes `text` (UTF-8) to `path` whole or not at all (`atomic_path`)."""
    with atomic_path(path) as partial:
        with open(partial, "w", encoding="utf-8") as file:
            file.write(text)


def write_json(path, content, **options):
    """Writes `content` as JSON to `path` whole or not at all; `options` go to `json.dumps` (`indent=2`, ...)."""
    write_text(path, json.dumps(content, **options))


def remove_partials(folder):
    """Deletes the partial files a killed writer left in `folder` (not in its subfolders); returns their names.
    Call it only where no other process writes `folder` (a run folder holds a lock for that)."""
    if not os.path.isdir(folder):
        return []
    left = sorted(name for name in os.listdir(folder) if name.startswith(PARTIAL_PREFIX))
    for name in left:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, name))
    return left


def _fsync(path):
    """Flushes `path` (a file or a folder) to the disk; folders that cannot be opened (Windows) are skipped."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except (IsADirectoryError, PermissionError):
        return
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EBADF):  # a folder or a filesystem that cannot fsync
            raise
    finally:
        os.close(descriptor)


def _errno_in(message):
    """The error number in an `OSError` that came without one (h5py puts it in its message: "errno = 28")."""
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        if f"errno = {code}," in message or f"[Errno {code}]" in message or os.strerror(code) in message:
            return code
    return None


def _pause_for_tests(path, partial):
    if os.environ.get(PAUSE_VARIABLE) != os.path.basename(path):
        return
    with open(partial + ".paused", "w"):
        pass
    while True:  # until the test kills the process
        time.sleep(0.05)
