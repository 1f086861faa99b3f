"""A `Seq2SeqTransformer` paired with its tokenizers, so it translates strings: `translator.generate(["..."])`.

Saved as one folder, which `Translator.load` reads back:

    translator.json   what the folder holds          model.keras       the Seq2SeqTransformer
    source.model      the source SubwordTokenizer    target.model      the target SubwordTokenizer
"""

import json
import os

import numpy as np

from keras_tfm.files import atomic_path, write_json
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.models.seq2seq import Seq2SeqTransformer
from keras_tfm.text.classifier_pipeline import load_pipeline_model
from keras_tfm.text.tokenizer import END, START, UNK, SubwordTokenizer

FORMAT = "keras_tfm.Translator"


class Translator:
    """Strings in, strings out: tokenize, `Seq2SeqTransformer.generate`, detokenize.

    Args:
        model: a trained `Seq2SeqTransformer` whose start and end tokens are the tokenizers' (2 and 3).
        source_tokenizer: `keras_tfm.text.SubwordTokenizer` for the source language.
        target_tokenizer: the one for the target language; defaults to `source_tokenizer` (shared vocabulary).

    Example:

    >>> translator = Translator(model, tokenizer)  # doctest: +SKIP
    >>> translator.generate(["A dog runs on the beach."], strategy="beam")  # doctest: +SKIP
    ['Ein Hund läuft am Strand.']
    >>> translator.save("runs/translate/translator")  # doctest: +SKIP
    >>> Translator.load("runs/translate/translator").generate(["A dog runs."])  # doctest: +SKIP
    """

    def __init__(self, model, source_tokenizer, target_tokenizer=None):
        target_tokenizer = source_tokenizer if target_tokenizer is None else target_tokenizer
        if not isinstance(model, Seq2SeqTransformer):
            raise TypeError(f"`model` must be a Seq2SeqTransformer. Received: {type(model).__name__}")
        for name, tokenizer, size in (("source_tokenizer", source_tokenizer, model.source_vocab_size),
                                      ("target_tokenizer", target_tokenizer, model.target_vocab_size)):
            if not isinstance(tokenizer, SubwordTokenizer):
                raise TypeError(f"`{name}` must be a SubwordTokenizer. Received: {type(tokenizer).__name__}")
            if tokenizer.vocab_size > size:
                raise ValueError(
                    f"`{name}` has {tokenizer.vocab_size} tokens but the model's vocabulary has only {size}."
                )
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer

    def encode_source(self, texts):
        """Strings -> `(n, length)` source ids, `length` a multiple of 8 (fewer compiled shapes), sentences cut
        to the model's `max_length` tokens."""
        return self.source_tokenizer.encode_padded(texts, self.model.max_length, multiple=8)

    def generate(self, texts, max_new_tokens=None, strategy="greedy", batch_size=64, **generate_kwargs):
        """Translates a list of strings.

        Args:
            texts: source sentences (list of str).
            max_new_tokens: most target tokens per sentence (default: the model's `max_length`).
            strategy: `"greedy"`, `"beam"`, `"top_k"` or `"top_p"` (see `Seq2SeqTransformer.generate`).
            batch_size: sentences per `generate` call. The last batch is filled up with copies of its last
                sentence so that every call has the same shape (one compiled loop).
            **generate_kwargs: `num_beams`, `length_penalty`, `k`, `p`, `temperature`, `seed`.

        Returns:
            list of translated strings, detokenized.
        """
        if isinstance(texts, str):
            raise TypeError(f"`texts` must be a list of strings, not one string. Received: {texts!r}")
        texts = list(texts)
        if not texts:
            return []
        source = self.encode_source(texts)
        outputs = []
        for first in range(0, len(texts), batch_size):
            batch = source[first : first + batch_size]
            real = len(batch)
            if len(texts) > batch_size and real < batch_size:
                batch = np.concatenate([batch, np.repeat(batch[-1:], batch_size - real, axis=0)])
            tokens = self.model.generate(batch, max_new_tokens, start_id=START, end_id=END, strategy=strategy,
                                         **generate_kwargs)
            # A model's vocabulary may be larger than the tokenizer's (checked in __init__): an id with no piece
            # decodes as unknown instead of failing.
            tokens = np.where(tokens < self.target_tokenizer.vocab_size, tokens, UNK)
            outputs.extend(self.target_tokenizer.decode(tokens[:real]))
        return outputs

    def alignment(self, source_text, target_text):
        """Cross-attention of the last decoder block for one sentence pair, averaged over heads.

        The decoder reads the start token and `target_text`; row `i` is where it looked while producing target
        piece `i` (the last row produces the end token).

        Returns:
            `(source_pieces, target_pieces, weights)`: the subword pieces as strings (the target's end with
            "</s>") and `(target_len, source_len)` weights; draw it with `keras_tfm.insight.visualize.plot_alignment`.
        """
        source = self.source_tokenizer.encode_padded([source_text], self.model.max_length)
        target = self.target_tokenizer.encode_padded([target_text], self.model.max_length + 1, add_start=True,
                                                     add_end=True)
        source_length, target_length = int((source > 0).sum()), int((target > 0).sum())
        maps = attention_maps(self.model, (source[:, :source_length], target[:, : target_length - 1]))
        cross = maps.of_kind("cross")[-1].weights  # the last decoder block's: (1, heads, tgt, src)
        weights = np.asarray(cross)[0].mean(axis=0)
        source_pieces = [self.source_tokenizer.id_to_piece(t) for t in source[0, :source_length]]
        target_pieces = [self.target_tokenizer.id_to_piece(t) for t in target[0, 1:target_length]]
        return source_pieces, target_pieces, weights

    def save(self, directory):
        """Writes the model and both tokenizers into `directory` (created)."""
        os.makedirs(directory, exist_ok=True)
        with atomic_path(os.path.join(directory, "model.keras")) as partial:
            self.model.save(partial)
        self.source_tokenizer.save(os.path.join(directory, "source.model"))
        self.target_tokenizer.save(os.path.join(directory, "target.model"))
        write_json(os.path.join(directory, "translator.json"),  # last: a folder without it is no translator
                   {"format": FORMAT, "version": 1, "shared_vocabulary": self.source_tokenizer == self.target_tokenizer,
                    "files": ["model.keras", "source.model", "target.model"]}, indent=2)
        return directory

    @classmethod
    def load(cls, directory):
        """The `Translator` that `save(directory)` wrote."""
        manifest = os.path.join(directory, "translator.json")
        if not os.path.isfile(manifest):
            raise ValueError(f"{directory!r} is not a saved Translator: it has no translator.json.")
        with open(manifest) as file:
            info = json.load(file)
        if info.get("format") != FORMAT:
            raise ValueError(f"{manifest!r} is not a keras_tfm Translator manifest (format={info.get('format')!r}).")
        model = load_pipeline_model(directory)
        source = SubwordTokenizer.load(os.path.join(directory, "source.model"))
        target = source if info.get("shared_vocabulary") else SubwordTokenizer.load(os.path.join(directory, "target.model"))
        return cls(model, source, target)
