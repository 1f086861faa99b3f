"""One long text for language modelling: a local file or tensorflow-datasets `tiny_shakespeare`, a character
vocabulary, nanoGPT's 90/10 split, and windows of it for training and validation.

    text = load_text("input.txt")                   # or load_text() for tfds tiny_shakespeare
    vocabulary = CharacterVocabulary.from_text(text)  # id 0 = padding, 1.. = the characters, sorted
    train, validation = split(vocabulary.encode(text))
    dataset = random_windows(train, length=64, batch_size=12, seed=0)  # (x, y) = (ids[:-1], ids[1:]) crops

A missing file, or tensorflow-datasets without the data and without network, raises `DataUnavailable` saying
how to provide the text.
"""

import json
import os

import numpy as np
import tensorflow as tf

from keras_tfm.data import DataUnavailable, download_tfds, first_line, quiet_tfds_lookup

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
HOW_TO_PROVIDE = (
    f"To provide the text, pass `--text-file PATH` (any UTF-8 text; tiny Shakespeare is {SHAKESPEARE_URL}), or "
    "prepare tensorflow-datasets 'tiny_shakespeare' on a machine with network access "
    "(`tfds.load('tiny_shakespeare', data_dir=FOLDER)`), copy FOLDER here and pass `--data-dir FOLDER`."
)


def load_text(text_file=None, data_dir=None):
    """The whole corpus as one string: `text_file` if given, else tensorflow-datasets `tiny_shakespeare`
    (its train, validation and test splits joined in that order, which is the original file).

    With `data_dir`, only the prepared tfds copy there is used (no download). Raises `DataUnavailable`.
    """
    if text_file is not None:
        if not os.path.isfile(text_file):
            raise DataUnavailable(f"Text: no file at {text_file!r}. " + HOW_TO_PROVIDE)
        with open(text_file, encoding="utf-8") as file:
            text = file.read()
        if not text:
            raise DataUnavailable(f"Text: the file {text_file!r} is empty. " + HOW_TO_PROVIDE)
        return text
    import tensorflow_datasets as tfds

    def splits():
        with quiet_tfds_lookup():
            return tfds.load("tiny_shakespeare", split=["train", "validation", "test"], data_dir=data_dir,
                             download=False)

    try:
        loaded = splits()
    except Exception as error:  # tfds reports a missing copy with several exception types
        if data_dir is not None:  # a folder the user names is never filled unasked
            raise DataUnavailable(
                f"Text: could not load tensorflow-datasets 'tiny_shakespeare' from --data-dir {data_dir!r} (nothing "
                f"is downloaded into a folder you name): {type(error).__name__}: {first_line(error)}. "
                + HOW_TO_PROVIDE) from None
        # No prepared copy: download it, after one quick check that the host answers (an offline machine gets
        # this message in seconds, not after minutes of tfds' retries).
        problem = download_tfds("tiny_shakespeare", None, SHAKESPEARE_URL)
        if problem is not None:
            raise DataUnavailable(
                "Text: no prepared tensorflow-datasets copy of 'tiny_shakespeare', and downloading it from "
                f"{SHAKESPEARE_URL} failed ({problem}). " + HOW_TO_PROVIDE) from None
        loaded = splits()
    return "".join(example["text"].numpy().decode("utf-8") for dataset in loaded for example in dataset)


class CharacterVocabulary:
    """Characters <-> ids: id 0 is padding, ids 1.. are the corpus's distinct characters in sorted order.

    Args:
        characters: the characters, in id order (id i + 1 = `characters[i]`).
    """

    def __init__(self, characters):
        characters = list(characters)
        if not characters or any(not isinstance(c, str) or len(c) != 1 for c in characters):
            raise ValueError(
                f"`characters` must be a non-empty list of single characters. Received: {characters[:10]!r}"
            )
        if len(set(characters)) != len(characters):
            raise ValueError("`characters` must not repeat a character.")
        self.characters = characters
        self._ids = {c: i + 1 for i, c in enumerate(characters)}

    @classmethod
    def from_text(cls, text):
        return cls(sorted(set(text)))

    @property
    def vocab_size(self):
        return len(self.characters) + 1  # + padding

    def encode(self, text):
        """A string -> `(len(text),)` int32 ids. Raises `ValueError` on a character outside the vocabulary."""
        try:
            return np.fromiter((self._ids[c] for c in text), dtype="int32", count=len(text))
        except KeyError as error:
            raise ValueError(f"The character {error.args[0]!r} is not in the vocabulary.") from None

    def decode(self, ids):
        """Ids -> a string; padding (0) is skipped."""
        return "".join(self.characters[i - 1] for i in np.asarray(ids).reshape(-1).tolist() if i > 0)

    def save(self, path):
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.characters, file, ensure_ascii=False)
        return path

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as file:
            return cls(json.load(file))


def split(ids, validation_fraction=0.1):
    """`(train, validation)`: the first `1 - validation_fraction` of the ids and the rest, in file order
    (nanoGPT's split)."""
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            f"`validation_fraction` must be in (0, 1). Received: validation_fraction={validation_fraction}"
        )
    cut = int(len(ids) * (1.0 - validation_fraction))
    return ids[:cut], ids[cut:]


def _check_length(ids, length, name):
    if len(ids) < length + 1:
        raise ValueError(f"The {name} text has {len(ids)} tokens: too few for one window of {length} + 1.")


def random_windows(ids, length, batch_size, seed=0):
    """An endless `tf.data.Dataset` of `(x, y)` batches, each row a random crop of `length + 1` tokens with
    `x = crop[:-1]`, `y = crop[1:]`, shapes `(batch_size, length)` (nanoGPT's `get_batch`), seeded."""
    _check_length(ids, length, "training")
    ids = tf.constant(np.asarray(ids, "int32"))
    starts = tf.data.Dataset.random(seed=seed).map(lambda r: tf.cast(r % (len(ids) - length), "int32"))

    def crop(start):
        window = ids[start : start + length + 1]  # (length + 1,)
        return window[:-1], window[1:]

    return starts.map(crop).batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def consecutive_windows(ids, length):
    """`(x, y)` NumPy arrays `(n, length)` covering `ids` with non-overlapping windows (the last incomplete one
    dropped): every validation token is predicted once."""
    _check_length(ids, length, "validation")
    count = (len(ids) - 1) // length
    x = np.asarray(ids[: count * length], "int32").reshape(count, length)
    y = np.asarray(ids[1 : count * length + 1], "int32").reshape(count, length)
    return x, y
