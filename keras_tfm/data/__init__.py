"""Data sets for the recipes: generated digit tasks, CIFAR-10, IMDB and translation loaders (tensorflow-datasets or local
folders). Loaders raise `DataUnavailable` with instructions when the data cannot be had.

Before tensorflow-datasets downloads anything, `download_tfds` checks once, with a short timeout, that the download
host can be reached (`unreachable`): an offline machine gets the instructions within seconds instead of minutes of
download retries, and no half-written folders are left behind.
"""

import contextlib
import logging
import os
import shutil
import socket
import urllib.parse

# Seconds to wait for a TCP connection to a download host. An offline machine fails at once (the name does not
# resolve); a slow but working network connects well within this.
CONNECT_TIMEOUT = 5.0


class DataUnavailable(RuntimeError):
    """Raised by a data loader that cannot find or download its data set; the message says what it tried and
    how to provide the data. Recipes print it and exit with status 2 instead of showing a traceback."""


def first_line(error):
    """The first line of an exception's message (a loader's own exceptions can be pages long)."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else "(no message)"


def unreachable(url, timeout=CONNECT_TIMEOUT):
    """None if a TCP connection to the host of `url` opens within `timeout` seconds, else the reason (one line).

    One attempt, no retries: this is the check that lets a loader say "no network" at once.
    """
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (80 if parts.scheme == "http" else 443)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
        return None
    except OSError as error:
        return f"cannot connect to {parts.hostname}: {error}"


@contextlib.contextmanager
def quiet_tfds_lookup():
    """Silences tensorflow-datasets' warnings while looking for a prepared copy.

    It warns ("Variant folder ... has no dataset_info.json") whenever a copy is not there: the case a loader
    handles, and then explains in its own message.
    """
    logger = logging.getLogger("absl")  # tfds logs through absl, which logs through this logger
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def download_tfds(name, data_dir, url):
    """Downloads and prepares the tensorflow-datasets set `name` into `data_dir` (None: tfds' default folder),
    after checking once that `url`, where tfds downloads it from, can be reached.

    Returns None on success, else why not in one line (the host cannot be reached, or the download or its
    preparation failed). Folders the failed attempt created are removed again, so a later run starts clean.
    """
    import tensorflow_datasets as tfds  # only the tfds paths need it

    problem = unreachable(url)
    if problem is not None:
        return problem  # nothing downloaded, nothing created
    root = os.path.abspath(data_dir or tfds.core.constants.DATA_DIR)
    created = [path for path in (root, os.path.join(root, name.split("/")[0]), os.path.join(root, "downloads"))
               if not os.path.exists(path)]
    try:
        tfds.builder(name, data_dir=data_dir).download_and_prepare()
        return None
    except Exception as error:  # any failure of the download or preparation means the same to the caller
        for path in created:  # the outermost new folder first; the ones inside it go with it
            shutil.rmtree(path, ignore_errors=True)
        return f"{type(error).__name__}: {first_line(error)}"


__all__ = ["CONNECT_TIMEOUT", "DataUnavailable", "download_tfds", "first_line", "quiet_tfds_lookup", "unreachable"]


def stratified_split(labels, validation, seed=0):
    """Indices `(train, validation)` that hold out part of a labelled training set for validation: the same
    share of every class, chosen at random with `seed` (the same seed gives the same split).

    Choices (epochs, learning rate, sizes) are made on the held-out part; the test split is scored once, at the
    end, so its accuracy stays an honest estimate.

    Args:
        labels: `(n,)` class labels.
        validation: a fraction in (0, 1) of each class, or a whole number of examples (shared out by class).
        seed: random seed.

    Returns:
        Two sorted int arrays of indices into `labels`, together a partition of `range(n)`.
    """
    import numpy as np

    labels = np.asarray(labels).reshape(-1)
    if isinstance(validation, bool) or not isinstance(validation, (int, float)) or validation <= 0 or (
            isinstance(validation, float) and validation >= 1) or validation >= max(len(labels), 1):
        raise ValueError(
            "`validation` must be a fraction in (0, 1) or a whole number of examples below the "
            f"{len(labels)} given. Received: {validation!r}"
        )
    fraction = validation if isinstance(validation, float) else validation / len(labels)
    rng = np.random.default_rng(seed)
    held_out = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out.append(members[: max(1, round(len(members) * fraction))])
    held_out = np.sort(np.concatenate(held_out))
    return np.setdiff1d(np.arange(len(labels)), held_out), held_out
