"""Words to token ids with Keras' `TextVectorization`, for a model trained from scratch on a word vocabulary.

`make_vectorizer` builds the layer (standardised with `standardize_review`: lower case, no HTML line breaks, no
punctuation), `vectorize` turns a list of strings into ids on every backend, and `save_vocabulary` /
`load_vocabulary` keep the vocabulary beside a trained model (`TextClassifierPipeline` saves it so). The IMDB
recipes use them; nothing here is specific to a data set.
"""

import re
import string

import keras
import numpy as np


@keras.saving.register_keras_serializable(package="keras_tfm")
def standardize_review(text):
    """Lower-cases a batch of reviews and removes the `<br />` line breaks IMDB keeps as HTML, and punctuation.

    Punctuation becomes a space, so "great.It" splits into two words.
    """
    import tensorflow as tf  # TextVectorization runs on TensorFlow strings; `import keras_tfm` needs no TensorFlow

    text = tf.strings.lower(text)
    text = tf.strings.regex_replace(text, r"<br\s*/?>", " ")
    return tf.strings.regex_replace(text, f"[{re.escape(string.punctuation)}]", " ")


def make_vectorizer(vocab_size, sequence_length, vocabulary=None):
    """A `TextVectorization` layer: text -> `(batch, sequence_length)` token ids, 0 = padding, 1 = unknown word.

    Adapt it on training text (`vectorizer.adapt(texts)`) or pass a saved `vocabulary` (a list whose first two
    entries are "" and "[UNK]", as `get_vocabulary()` returns it). Reviews longer than `sequence_length` words
    are cut at the end.
    """
    return keras.layers.TextVectorization(
        max_tokens=vocab_size, standardize=standardize_review, output_mode="int",
        output_sequence_length=sequence_length, vocabulary=vocabulary,
    )


def vectorize(vectorizer, texts, batch_size=1024):
    """Token ids `(len(texts), sequence_length)` int32 of a list of strings, `batch_size` texts at a time.

    The strings reach `vectorizer` as a TensorFlow string tensor, on every Keras backend: handed a NumPy array of
    Python strings, Keras' `TextVectorization` on JAX and PyTorch encodes them as ASCII and fails on the first
    other character ("UnicodeEncodeError: 'ascii' codec", e.g. the "\\x97" dashes of some IMDB reviews).

    Args:
        vectorizer: a `TextVectorization` (`make_vectorizer`) with its vocabulary.
        texts: a list of strings.
        batch_size: texts per call.
    """
    import tensorflow as tf

    batches = [np.asarray(vectorizer(tf.constant(texts[i: i + batch_size], tf.string)), "int32")
               for i in range(0, len(texts), batch_size)]
    return np.concatenate(batches) if batches else np.zeros((0, vectorizer.get_config()["output_sequence_length"]),
                                                             "int32")


def save_vocabulary(vocabulary, path):
    """Writes one token per line (line i = token id i; line 0 is the padding token "")."""
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(f"{token}\n" for token in vocabulary)
    return path


def load_vocabulary(path):
    """The token list written by `save_vocabulary` (pass it to `make_vectorizer(..., vocabulary=...)`)."""
    with open(path, encoding="utf-8") as file:
        return file.read().split("\n")[:-1]
