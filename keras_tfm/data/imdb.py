"""IMDB movie reviews (Maas et al., 2011, "Learning Word Vectors for Sentiment Analysis"): 25,000 training and
25,000 test reviews, each labelled 0 = negative or 1 = positive.

Two sources, both giving `tf.data` datasets of `(text, label)` pairs (a scalar string, a scalar int):

* tensorflow-datasets `imdb_reviews` — `load_tfds(data_dir)`; with a `data_dir` nothing is downloaded;
* the original archive unpacked — `load_folder("path/to/aclImdb")`, which reads
  `aclImdb/{train,test}/{neg,pos}/*.txt`.

`load_imdb` picks between them. When neither works it raises `keras_tfm.data.DataUnavailable` saying what
it tried and how to provide the data. Text is turned into token ids by `keras_tfm.data.word_ids` (Keras' own
`TextVectorization`, whose vocabulary is saved next to a trained model).
"""

import os

import keras
import numpy as np

from keras_tfm.data import DataUnavailable, download_tfds, first_line, quiet_tfds_lookup
# Reviews to word ids (moved to `keras_tfm.data.word_ids`; these names stay for code that imports them from here).
from keras_tfm.data.word_ids import (load_vocabulary, make_vectorizer, save_vocabulary,  # noqa: F401
                                  standardize_review, vectorize)

CLASS_NAMES = ("neg", "pos")  # label 0, label 1: the folder names of aclImdb and the order tfds uses
DOWNLOAD_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"

_HOW_TO_PROVIDE = (
    f"To provide the data, either download and unpack {DOWNLOAD_URL} and pass `--imdb-dir path/to/aclImdb` "
    "(the folder holding train/ and test/), or prepare the tensorflow-datasets copy on a machine with network "
    "access (`tfds.load('imdb_reviews', data_dir=FOLDER)`), copy FOLDER here and pass `--data-dir FOLDER`."
)


def load_folder(imdb_dir, seed=0):
    """Train and test datasets of `(text, label)` from an unpacked `aclImdb` folder.

    Reviews are read in a shuffled (seeded) order, so that taking the first few gives both classes.
    `train/unsup` (unlabelled reviews) is not part of them: `load_unlabelled` reads it.
    """
    missing = _missing_class_folders(imdb_dir)
    if missing:
        raise DataUnavailable(
            f"IMDB: the folder {imdb_dir!r} does not have the aclImdb layout: missing {', '.join(missing)}. "
            + _HOW_TO_PROVIDE
        )
    return tuple(
        keras.utils.text_dataset_from_directory(
            os.path.join(imdb_dir, split), labels="inferred", class_names=list(CLASS_NAMES), batch_size=None,
            shuffle=True, seed=seed, verbose=False,
        )
        for split in ("train", "test")
    )


def load_tfds(data_dir=None, download=None):
    """Train and test datasets of `(text, label)` from tensorflow-datasets `imdb_reviews`.

    A prepared copy in `data_dir` (default: the tensorflow-datasets folder) is used as is. Without one, and when
    downloading (by default only without a `data_dir`: a folder the user names is never filled unasked), the
    download host is checked first (one connection attempt, `keras_tfm.data.CONNECT_TIMEOUT` seconds), so an
    offline machine gets `DataUnavailable` at once and no half-written folder. A `data_dir` that holds the unpacked
    archive instead (train/pos, ...) gets `DataUnavailable` saying to pass it as `imdb_dir`.
    """
    import tensorflow_datasets as tfds

    download = data_dir is None if download is None else download
    try:
        with quiet_tfds_lookup():
            return _tfds_splits(tfds, data_dir)
    except Exception as error:  # tfds reports a missing copy with several exception types
        missing = f"{type(error).__name__}: {first_line(error)}"
    if data_dir is not None and not _missing_class_folders(data_dir):  # the unpacked archive, as the wrong folder
        raise DataUnavailable(
            f"IMDB: {data_dir!r} is an unpacked aclImdb folder (train/pos, train/neg, test/pos, test/neg), not a "
            "tensorflow-datasets copy: pass it as `--imdb-dir` (`load_imdb(imdb_dir=...)`), not `--data-dir`."
        )
    if not download:
        raise DataUnavailable(
            f"IMDB: could not load tensorflow-datasets 'imdb_reviews' from {data_dir!r} (nothing is downloaded "
            f"into a folder you name): {missing}. " + _HOW_TO_PROVIDE
        )
    problem = download_tfds("imdb_reviews", data_dir, DOWNLOAD_URL)
    if problem is not None:
        raise DataUnavailable(
            f"IMDB: no prepared tensorflow-datasets copy of 'imdb_reviews', and downloading it from {DOWNLOAD_URL} "
            f"failed ({problem}). " + _HOW_TO_PROVIDE
        )
    return _tfds_splits(tfds, data_dir)


def _missing_class_folders(folder):
    """The class folders of the aclImdb layout (train/pos, ..., test/neg) that `folder` lacks."""
    return [os.path.join(split, name) for split in ("train", "test") for name in CLASS_NAMES
            if not os.path.isdir(os.path.join(folder, split, name))]


def load_unlabelled(imdb_dir=None, data_dir=None):
    """The 50,000 unlabelled reviews (for pre-training) as a dataset of strings, or None when the source has none.

    From `imdb_dir/train/unsup/*.txt` (the official archive's layout) when `imdb_dir` is given, else from the
    prepared tensorflow-datasets copy's `unsupervised` split (nothing is downloaded here: `load_imdb` has already
    fetched the data set when it could).
    """
    if imdb_dir is not None:
        folder = os.path.join(imdb_dir, "train", "unsup")
        if not os.path.isdir(folder) or not os.listdir(folder):
            return None
        return _text_files(folder)
    import tensorflow_datasets as tfds

    try:
        with quiet_tfds_lookup():
            unlabelled = tfds.load("imdb_reviews", split="unsupervised", as_supervised=True, data_dir=data_dir,
                                   download=False, shuffle_files=False)
    except Exception:  # no prepared copy, or one without the split
        return None
    return unlabelled.map(lambda text, label: text)


def _text_files(folder):
    """A dataset of the contents of `folder/*.txt`, in sorted file order."""
    import tensorflow as tf

    paths = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".txt"))
    return tf.data.Dataset.from_tensor_slices(paths).map(tf.io.read_file, num_parallel_calls=tf.data.AUTOTUNE)


def _tfds_splits(tfds, data_dir):
    train, test = tfds.load(
        "imdb_reviews", split=["train", "test"], as_supervised=True, data_dir=data_dir, download=False,
        shuffle_files=False,
    )
    return train, test


def load_imdb(imdb_dir=None, data_dir=None, seed=0):
    """`(train, test)` datasets of `(text, label)`: from `imdb_dir` (an aclImdb folder) if given, else from
    tensorflow-datasets (`data_dir`, or the default folder with a download). Raises `DataUnavailable`."""
    if imdb_dir is not None:
        return load_folder(imdb_dir, seed=seed)
    return load_tfds(data_dir)


def without_line_breaks(review):
    """A review as a pretrained tokenizer should see it: the archive's `<br />` line breaks become spaces (case and
    punctuation are the tokenizer's business)."""
    return review.replace("<br />", " ")


def texts(dataset, limit=None):
    """The review texts of a `(text, label)` dataset, as a dataset of strings (for `adapt`)."""
    dataset = dataset.map(lambda text, label: text)
    return dataset if limit is None else dataset.take(limit)


def texts_and_labels(dataset, batch_size=1024):
    """`(texts, labels)` numpy arrays of a `(text, label)` dataset: shapes `(n,)` str (object) and `(n,)` int32,
    read once (vectorize the texts with `make_vectorizer`)."""
    texts, labels = [], []
    for text, label in dataset.batch(batch_size):
        texts.extend(t.decode("utf-8", errors="replace") for t in text.numpy())
        labels.append(np.asarray(label, "int32"))
    if not texts:
        raise DataUnavailable("IMDB: the data set is empty. " + _HOW_TO_PROVIDE)
    return np.array(texts, dtype=object), np.concatenate(labels)
