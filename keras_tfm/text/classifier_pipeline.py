"""A trained `TextClassifier` paired with its vocabulary and standardisation, so it classifies strings:
`TextClassifierPipeline.load(folder).predict(["A wonderful, moving film."])` -> class probabilities.

The model reads token ids; this is the way from raw text to those ids that the model was trained with (Keras'
`TextVectorization` with the same vocabulary, standardisation and sequence length), kept with the model so that
nobody has to rebuild it by hand. Saved as one folder, which `TextClassifierPipeline.load` reads back:

    classifier.json   what the folder holds: sequence length, class names, standardisation
    model.keras       the TextClassifier                  vocabulary.txt   line i = the word of token id i
                                                          (or tokenizer/: a PretrainedTokenizer's files)

A classifier fine-tuned from a pretrained checkpoint reads word pieces instead: give the checkpoint's own
`PretrainedTokenizer` as `vocabulary` (`TextClassifierPipeline(model, tokenizer, class_names)`).
"""

import json
import os
import zipfile

import keras
import numpy as np

from keras_tfm.data.word_ids import load_vocabulary, save_vocabulary, standardize_review, vectorize
from keras_tfm.files import atomic_path, write_json
from keras_tfm.models.text_classifier import TextClassifier
from keras_tfm.text.pretrained_tokenizer import PretrainedTokenizer
from keras_tfm.text.serving import export_saved_model

FORMAT = "keras_tfm.TextClassifierPipeline"
# TextVectorization's own standardisations, saved by name like a registered function.
BUILT_IN_STANDARDIZE = (None, "lower", "strip_punctuation", "lower_and_strip_punctuation")


class TextClassifierPipeline:
    """Strings in, class probabilities out: standardise, look the words up, `TextClassifier`, softmax.

    Args:
        model: a trained `keras_tfm.models.TextClassifier`.
        vocabulary: its words in id order, starting with `""` (padding, id 0) and `"[UNK]"` (unknown words,
            id 1), as `TextVectorization.get_vocabulary()` returns it; or a `PretrainedTokenizer` (a classifier
            fine-tuned from a checkpoint; `standardize` is then the tokenizer's own and `sequence_length` its
            `max_length`).
        class_names: a name per class (default: `"0"`, `"1"`, ...).
        standardize: what was done to the text before splitting it into words in training: a function
            registered with `keras.saving.register_keras_serializable` (so that it can be saved; default the IMDB
            recipes' `keras_tfm.data.word_ids.standardize_review`), or one of TextVectorization's names
            (`"lower_and_strip_punctuation"`, `"lower"`, `"strip_punctuation"`, `None`).
        sequence_length: words read per text, longer texts are cut (default: the model's `max_length`).

    Example:

    >>> vocabulary = vectorizer.get_vocabulary()  # doctest: +SKIP
    >>> pipeline = TextClassifierPipeline(model, vocabulary, ["negative", "positive"])  # doctest: +SKIP
    >>> pipeline.predict(["A wonderful, moving film.", "Dull and far too long."])  # doctest: +SKIP
    array([[0.08, 0.92], [0.85, 0.15]], dtype=float32)
    >>> pipeline.save("runs/imdb/classifier")  # doctest: +SKIP
    >>> TextClassifierPipeline.load("runs/imdb/classifier").predict(["Great!"])  # doctest: +SKIP
    """

    def __init__(self, model, vocabulary, class_names=None, standardize=standardize_review, sequence_length=None):
        if not isinstance(model, TextClassifier):
            raise TypeError(f"`model` must be a TextClassifier. Received: model of type {type(model).__name__}")
        self.tokenizer = None
        if isinstance(vocabulary, PretrainedTokenizer):
            if vocabulary.vocab_size > model.vocab_size:
                raise ValueError(f"The tokenizer has {vocabulary.vocab_size} word pieces but the model only "
                                 f"{model.vocab_size} token ids.")
            self.tokenizer, self.model, self.vocabulary = vocabulary, model, None
            self.class_names = self._class_names(model, class_names)
            self.standardize = self.standardize_name = None
            self.sequence_length = vocabulary.max_length
            return
        if isinstance(vocabulary, str) or not all(isinstance(word, str) for word in vocabulary):
            raise TypeError("`vocabulary` must be a list of words (str), id order. Received: "
                            f"{type(vocabulary).__name__}")
        vocabulary = list(vocabulary)
        if vocabulary[:2] != ["", "[UNK]"]:
            raise ValueError('`vocabulary` must start with "" (padding) and "[UNK]" (unknown words), as '
                             f"TextVectorization.get_vocabulary() returns it. Received: {vocabulary[:2]!r}...")
        if len(vocabulary) > model.vocab_size:
            raise ValueError(f"`vocabulary` has {len(vocabulary)} words but the model has only {model.vocab_size} "
                             "token ids.")
        class_names = self._class_names(model, class_names)
        sequence_length = model.max_length if sequence_length is None else sequence_length
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or not (
                1 <= sequence_length <= model.max_length):
            raise ValueError(f"`sequence_length` must be an integer in [1, {model.max_length}] (the model's "
                             f"max_length). Received: sequence_length={sequence_length!r}")
        self.standardize_name = _standardize_name(standardize)
        self.model = model
        self.vocabulary = vocabulary
        self.class_names = class_names
        self.standardize = standardize
        self.sequence_length = sequence_length
        self.vectorizer = keras.layers.TextVectorization(
            standardize=standardize, output_mode="int", output_sequence_length=sequence_length, vocabulary=vocabulary
        )

    @staticmethod
    def _class_names(model, class_names):
        class_names = [str(i) for i in range(model.num_classes)] if class_names is None else list(class_names)
        if len(class_names) != model.num_classes:
            raise ValueError(f"`class_names` must name the model's {model.num_classes} classes. Received "
                             f"{len(class_names)}: {class_names!r}")
        return class_names

    def token_ids(self, texts):
        """`(n, sequence_length)` int32 token ids of a list of strings, exactly as the model reads them (with a
        `PretrainedTokenizer`: its dict of token ids, padding mask and segment ids)."""
        if isinstance(texts, str):
            raise TypeError(f"`texts` must be a list of strings, not one string. Received: {texts!r}")
        texts = list(texts)
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("`texts` must be a list of strings. Received items of type "
                            f"{sorted({type(text).__name__ for text in texts})}")
        if not texts:
            return np.zeros((0, self.sequence_length), "int32")
        if self.tokenizer is not None:
            return self.tokenizer(texts)  # the dict: token ids, padding mask, segment ids
        return vectorize(self.vectorizer, texts)  # a string tensor: non-ASCII text on every backend

    def predict(self, texts, batch_size=256):
        """Class probabilities `(len(texts), num_classes)` float32 of a list of strings (rows sum to 1). A blank
        text is a ValueError, as on the recipe's command line: it has no words, and the model's answer for it
        (its prior) would read as a judgement."""
        ids = self.token_ids(texts)
        blank = [i for i, text in enumerate(texts) if not text.strip()]
        if blank:
            raise ValueError(f"every text must hold at least one non-blank character (an empty text has no words to "
                             f"classify). Received: texts[{blank[0]}]={texts[blank[0]]!r}"
                             + (f" and {len(blank) - 1} more blank" if len(blank) > 1 else ""))
        if not len(ids["token_ids"] if isinstance(ids, dict) else ids):
            return np.zeros((0, len(self.class_names)), "float32")
        outputs = self.model.predict(ids, batch_size=batch_size, verbose=0)  # (n, num_classes)
        if self.model.head_activation != "softmax":  # logits
            outputs = keras.ops.softmax(outputs, axis=-1)
        return np.asarray(keras.ops.convert_to_numpy(outputs), "float32")

    def reading_note(self, text):
        """What the model could not read of `text`, in words, or None when it read all of it: the pieces or words
        truncation dropped, or that every word is unknown to the vocabulary (then the score is the model's prior
        for a text it cannot see, not a judgement of this one).

        Example:

        >>> pipeline.reading_note("🎬🍿")  # doctest: +SKIP
        'every one of its word pieces is unknown to the tokenizer ([UNK]): the score says nothing about this text'
        """
        if self.tokenizer is not None:
            pieces, kept, unknown = self.tokenizer.reading(text)
            unit = "word pieces"
        else:
            if getattr(self, "_uncut", None) is None:  # the same words, not cut to sequence_length
                self._uncut = keras.layers.TextVectorization(standardize=self.standardize, output_mode="int",
                                                             vocabulary=self.vocabulary)
            ids = vectorize(self._uncut, [text])[0]
            ids = ids[ids != 0]  # padding
            pieces, kept, unknown, unit = len(ids), min(len(ids), self.sequence_length), int((ids == 1).sum()), "words"
        if pieces and unknown == pieces:
            return (f"every one of its {unit} is unknown to the {'tokenizer' if self.tokenizer else 'vocabulary'} "
                    "([UNK]): the score says nothing about this text")
        if kept < pieces:
            how = ("the first and the last of them" if self.tokenizer is not None
                   and self.tokenizer.truncation == "head_tail" else "the first of them")
            return f"read {kept:,} of its {pieces:,} {unit} ({how})"
        return None

    def classify(self, texts, batch_size=256):
        """The most probable class name of each string."""
        return [self.class_names[i] for i in self.predict(texts, batch_size).argmax(-1)]

    def save(self, directory):
        """Writes the model (its weights and architecture, without the optimizer's state: predicting never reads
        it, and AdamW's two moments are twice the weights), the vocabulary or tokenizer and `classifier.json` into
        `directory` (created)."""
        os.makedirs(directory, exist_ok=True)
        # Saved without the optimizer and without the compile arguments, then both given back (the model can train
        # on). A file that named an optimizer but held none of its variables would make `keras.saving.load_model`
        # build one and warn "Skipping variable loading for optimizer".
        optimizer, compiled = getattr(self.model, "optimizer", None), getattr(self.model, "compiled", False)
        self.model.optimizer, self.model.compiled = None, False
        try:
            with atomic_path(os.path.join(directory, "model.keras")) as partial:
                self.model.save(partial)
        finally:
            self.model.optimizer, self.model.compiled = optimizer, compiled
        if self.tokenizer is not None:
            self.tokenizer.save(os.path.join(directory, "tokenizer"))
            write_json(os.path.join(directory, "classifier.json"),  # last: a folder without it is no pipeline
                       {"format": FORMAT, "version": 1, "class_names": self.class_names, "tokenizer": "tokenizer",
                        "sequence_length": self.sequence_length, "files": ["model.keras", "tokenizer/"]}, indent=2)
            return directory
        save_vocabulary(self.vocabulary, os.path.join(directory, "vocabulary.txt"))
        write_json(os.path.join(directory, "classifier.json"),
                   {"format": FORMAT, "version": 1, "class_names": self.class_names,
                    "standardize": self.standardize_name, "sequence_length": self.sequence_length,
                    "files": ["model.keras", "vocabulary.txt"]}, indent=2)
        return directory

    def export(self, path):
        """Writes a TensorFlow SavedModel that takes strings (`keras_tfm.text.serving.export_saved_model`): the
        pretrained tokenizer inside the graph, `label` and `probabilities` out. TensorFlow backend; a pipeline
        with a pretrained WordPiece tokenizer. Returns `path`."""
        return export_saved_model(self, path)

    @classmethod
    def load(cls, directory):
        """The `TextClassifierPipeline` that `save(directory)` wrote."""
        manifest = os.path.join(directory, "classifier.json")
        if not os.path.isfile(manifest):
            raise ValueError(f"{os.fspath(directory)!r} is not a saved TextClassifierPipeline: it has no "
                             "classifier.json.")
        with open(manifest) as file:
            info = json.load(file)
        if info.get("format") != FORMAT:
            raise ValueError(f"{manifest!r} is not a keras_tfm TextClassifierPipeline manifest "
                             f"(format={info.get('format')!r}).")
        if info.get("tokenizer"):
            model = load_pipeline_model(directory)
            tokenizer = PretrainedTokenizer.load(os.path.join(directory, info["tokenizer"]))
            return cls(model, tokenizer, info["class_names"])
        standardize = info["standardize"]
        if standardize not in BUILT_IN_STANDARDIZE:
            function = keras.saving.get_registered_object(standardize)
            if function is None:
                raise ValueError(f"{manifest!r} names the standardisation {standardize!r}, which is not registered "
                                 "with Keras: import the module that defines it before loading.")
            standardize = function
        model = load_pipeline_model(directory)
        vocabulary = load_vocabulary(os.path.join(directory, "vocabulary.txt"))
        return cls(model, vocabulary, info["class_names"], standardize, info["sequence_length"])


def _standardize_name(standardize):
    """How `standardize` is written into classifier.json: its registered Keras name, or TextVectorization's."""
    if standardize in BUILT_IN_STANDARDIZE:
        return standardize
    name = keras.saving.get_registered_name(standardize) if callable(standardize) else None
    if name is None or keras.saving.get_registered_object(name) is not standardize:
        raise ValueError(
            "`standardize` must be one of TextVectorization's names "
            f"{list(BUILT_IN_STANDARDIZE)} or a function registered with "
            "`keras.saving.register_keras_serializable` (so that the pipeline can be saved and loaded). "
            f"Received: standardize={standardize!r}"
        )
    return name


def load_pipeline_model(directory):
    """The `model.keras` of a saved pipeline (this one, `Translator`), for inference (no optimizer state), with
    the file named when it is missing or cut short (a crash while it was written), as `keras_tfm.load_model` does."""
    path = os.path.join(directory, "model.keras")
    if not os.path.isfile(path):
        raise ValueError(f"{os.fspath(directory)!r} holds no model.keras: not a complete saved pipeline.")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path!r} is not a complete .keras file ({os.path.getsize(path):,} bytes, not a readable "
                         "zip archive): it was cut short, perhaps by a crash while it was written.")
    return keras.saving.load_model(path, compile=False)
