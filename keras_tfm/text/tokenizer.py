"""A subword tokenizer learned from training text.

`SubwordTokenizer` wraps SentencePiece (Kudo & Richardson, 2018), the tokenizer of many translation systems:
it learns a vocabulary of word pieces (unigram language model or BPE) from raw sentences, needs no
pre-tokenization, and is lossless — `decode(encode(text)) == text` — so a translation can be scored against
the raw reference text. With `byte_fallback` (the default) a character never seen in training is spelled as
its UTF-8 bytes instead of becoming "unknown", so even that round-trips.

Token ids follow the keras_tfm convention: 0 = padding, then 1 = unknown, 2 = start, 3 = end.

    tokenizer = SubwordTokenizer.train(english + german, vocab_size=8000)
    ids = tokenizer.encode(["A man rides a bike."])            # [[ 6, 15, 202, ...]]
    tokenizer.decode(ids)                                      # ["A man rides a bike."]
"""

import io
import os

import numpy as np

from keras_tfm.presets import SUBWORD_MODEL_TYPES as MODEL_TYPES

PAD, UNK, START, END = 0, 1, 2, 3


class SubwordTokenizer:
    """A SentencePiece subword tokenizer: text <-> token ids (0 = padding, 1 = unknown, 2 = start, 3 = end).

    Make one with `SubwordTokenizer.train(texts, vocab_size)`, save it with `save(path)` (one `.model` file,
    the serialized SentencePiece model) and read it back with `SubwordTokenizer.load(path)`.

    Args:
        model_proto: a serialized SentencePiece model (`bytes`), as `train` makes and `save` writes.

    Example:

    >>> tokenizer = SubwordTokenizer.train(["a cat sat", "a dog ran"] * 50, vocab_size=300)  # doctest: +SKIP
    >>> tokenizer.decode(tokenizer.encode(["a cat ran"]))  # doctest: +SKIP
    ['a cat ran']
    """

    def __init__(self, model_proto):
        import sentencepiece

        if not isinstance(model_proto, (bytes, bytearray)):
            raise TypeError(f"`model_proto` must be bytes (a serialized SentencePiece model). Received: {type(model_proto).__name__}")
        self.model_proto = bytes(model_proto)
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=self.model_proto)
        special = (self._processor.pad_id(), self._processor.unk_id(), self._processor.bos_id(), self._processor.eos_id())
        if special != (PAD, UNK, START, END):
            raise ValueError(
                "The SentencePiece model must use ids 0 = padding, 1 = unknown, 2 = start, 3 = end "
                f"(as `SubwordTokenizer.train` makes it). Received: pad, unk, bos, eos = {special}"
            )

    @classmethod
    def train(cls, texts, vocab_size=8000, model_type="unigram", character_coverage=1.0, byte_fallback=True,
              max_sentences=2_000_000, seed_sentencepiece_size=1_000_000):
        """Learns a vocabulary from sentences.

        Args:
            texts: an iterable of strings (one sentence or line each).
            vocab_size: number of tokens, the 4 special ones included. On a small corpus the vocabulary may come
                out smaller (SentencePiece stops when no more pieces are worth adding).
            model_type: `"unigram"` (SentencePiece's default) or `"bpe"` (byte-pair encoding).
            character_coverage: fraction of characters covered by the vocabulary (1.0 for alphabets; 0.9995 is
                usual for Chinese or Japanese).
            byte_fallback: spell characters outside the vocabulary as UTF-8 byte tokens (lossless) instead of
                the unknown token.
            max_sentences: at most this many sentences are used for learning.
            seed_sentencepiece_size: size of the initial piece set of the unigram model.
        """
        import sentencepiece

        if model_type not in MODEL_TYPES:
            raise ValueError(f"`model_type` must be one of {list(MODEL_TYPES)}. Received: model_type={model_type!r}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 8:
            raise ValueError(f"`vocab_size` must be an integer >= 8. Received: vocab_size={vocab_size!r}")
        texts = [text for text in texts if text.strip()]
        if not texts:
            raise ValueError("`texts` has no non-empty sentence to learn a vocabulary from.")
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, byte_fallback=byte_fallback, hard_vocab_limit=False,
            pad_id=PAD, unk_id=UNK, bos_id=START, eos_id=END, input_sentence_size=max_sentences,
            shuffle_input_sentence=True, seed_sentencepiece_size=seed_sentencepiece_size, num_threads=2,
            minloglevel=2,
        )
        return cls(model.getvalue())

    @property
    def vocab_size(self):
        return self._processor.get_piece_size()

    def tokenize(self, text):
        """One string -> its pieces as strings (e.g. `["▁A", "▁man", ...]`; "▁" marks a preceding space)."""
        return self._processor.encode(text, out_type=str)

    def id_to_piece(self, token_id):
        return self._processor.id_to_piece(int(token_id))

    def encode(self, texts, add_start=False, add_end=False):
        """A list of strings -> a list of lists of token ids, optionally framed by the start and end tokens.
        One string -> one list of ids (so `decode(encode(text)) == text`)."""
        if isinstance(texts, str):
            return self.encode([texts], add_start=add_start, add_end=add_end)[0]
        texts = list(texts)
        if not all(isinstance(text, str) for text in texts):
            kinds = sorted({type(text).__name__ for text in texts if not isinstance(text, str)})
            raise TypeError(f"`texts` must be a string or a list of strings. Received a list holding {kinds}.")
        ids = self._processor.encode(texts, out_type=int)
        return [([START] if add_start else []) + row + ([END] if add_end else []) for row in ids]

    def encode_padded(self, texts, length, add_start=False, add_end=False, truncate=True, multiple=None):
        """Strings -> a `(len(texts), length)` int32 array, 0-padded. Longer rows are cut to `length` (keeping
        the end token if asked for) or, with `truncate=False`, raise a `ValueError`. With `multiple`, the array
        is only as wide as the longest row rounded up to a multiple of it (and at most `length`)."""
        rows = self.encode(texts, add_start=add_start, add_end=add_end)
        if multiple is not None:
            longest = max((len(row) for row in rows), default=1)
            length = min(length, -(-max(longest, 1) // multiple) * multiple)
        array = np.zeros((len(rows), length), "int32")
        for i, row in enumerate(rows):
            if len(row) > length:
                if not truncate:
                    raise ValueError(f"Text {i} has {len(row)} tokens, more than `length`={length}: {texts[i]!r}")
                row = row[: length - 1] + [END] if add_end else row[:length]
            array[i, : len(row)] = row
        return array

    def decode(self, ids):
        """Token ids (a `(batch, length)` array or a list of lists) -> strings. Each row stops at the end token;
        padding and start tokens are skipped. One row (a list of ints or a 1-D array) -> one string."""
        if isinstance(ids, np.ndarray) and ids.ndim == 1 or (
            isinstance(ids, (list, tuple)) and ids and all(isinstance(token, (int, np.integer)) for token in ids)
        ):
            return self.decode([ids])[0]
        texts = []
        for row in ids:
            row = [int(token) for token in np.asarray(row).reshape(-1)]
            if END in row:
                row = row[: row.index(END)]
            texts.append(self._processor.decode([token for token in row if token not in (PAD, START)]))
        return texts

    def save(self, path):
        """Writes the SentencePiece model (`bytes`) to `path` (conventionally `*.model`)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as file:
            file.write(self.model_proto)
        return path

    @classmethod
    def load(cls, path):
        with open(path, "rb") as file:
            return cls(file.read())

    def __eq__(self, other):
        return isinstance(other, SubwordTokenizer) and other.model_proto == self.model_proto

    def __repr__(self):
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"
