"""A pretrained checkpoint's own tokenizer, read from its `tokenizer.json` with the HuggingFace `tokenizers`
library: strings in, the `TextEncoder`'s input dict out.

A pretrained encoder only works with the word pieces it was trained on: the same vocabulary, lower-casing,
accent stripping and special tokens ([CLS] text [SEP] for BERT, <s> text </s> for RoBERTa). All of that is in
`tokenizer.json`, so it is read, not re-implemented.

Long texts are cut to `max_length` word pieces (special tokens included) in one of two ways:

    truncation="head"        the first pieces                  (what `transformers`' tokenizer does)
    truncation="head_tail"   the first `head` and the last      (Sun et al. 2019, "How to Fine-Tune BERT for
                             ones                               Text Classification": on IMDB, the first 128
                                                                and last 382 pieces do best)
"""

import json
import os

import numpy as np

TRUNCATIONS = ("head", "head_tail")


class PretrainedTokenizer:
    """Tokenizes strings exactly as a pretrained checkpoint's tokenizer does.

    Args:
        folder: a folder with `tokenizer.json` (a HuggingFace checkpoint folder), or the file itself.
        max_length: word pieces per text, special tokens included (longer texts are cut, shorter are padded).
        truncation: `"head"` (keep the start) or `"head_tail"` (keep the first `head` pieces and the end).
        head: pieces kept from the start with `truncation="head_tail"`; None = a quarter of the room (Sun et
            al.'s 128 of 510).

    Call arguments:
        texts: a list of strings, or two lists (text pairs: segment ids 0 for the first text, 1 for the second;
            pairs are cut from the longer text first, as `transformers` does).
        max_length: overrides the tokenizer's `max_length` for this call.

    Returns:
        `{"token_ids", "padding_mask", "segment_ids"}`, int32 arrays `(len(texts), max_length)`, padded with the
        checkpoint's padding id — what `TextEncoder` and `TextClassifier` take. Without `segment_ids` where the
        folder's `config.json` names a model that has no segment table (DistilBERT), as `transformers` gives no
        `token_type_ids` for it.

    Example:

    >>> tokenizer = PretrainedTokenizer("all-MiniLM-L6-v2", max_length=256)  # doctest: +SKIP
    >>> tokenizer(["A wonderful, moving film."])["token_ids"][0, :8]  # doctest: +SKIP
    array([ 101, 1037, 6919, 1010, 3048, 2143, 1012,  102], dtype=int32)
    """

    def __init__(self, folder, max_length=512, truncation="head", head=None):
        from tokenizers import Tokenizer

        path = folder if os.path.isfile(folder) else os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            raise ValueError(f"No tokenizer.json in {folder!r}: PretrainedTokenizer reads a HuggingFace "
                             "checkpoint's tokenizer.json (a fast tokenizer).")
        if truncation not in TRUNCATIONS:
            raise ValueError(f"`truncation` must be one of {list(TRUNCATIONS)}. Received: truncation={truncation!r}")
        self.path = path
        self.tokenizer = Tokenizer.from_file(path)
        self.tokenizer.no_truncation()  # a tokenizer.json may carry its own settings (MiniLM's: 128); ours apply
        self.tokenizer.no_padding()
        self.special_tokens = self.tokenizer.num_special_tokens_to_add(False)
        self._check_length("max_length", max_length)
        self.max_length = max_length
        self.truncation = truncation
        self.head = head
        self.padding_id = self._padding_id(os.path.dirname(path))
        self.segments = _has_segments(os.path.dirname(path))

    @property
    def vocab_size(self):
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _check_length(self, name, value):
        if isinstance(value, bool) or not isinstance(value, int) or value <= self.special_tokens:
            raise ValueError(f"`{name}` must be an int larger than the {self.special_tokens} special tokens "
                             f"added to each text. Received: {name}={value!r}")

    def _padding_id(self, folder):
        with open(self.path) as file:
            padding = json.load(file).get("padding") or {}
        if "pad_id" in padding:
            return int(padding["pad_id"])
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            file = os.path.join(folder, name)
            if os.path.isfile(file):
                with open(file) as opened:
                    token = json.load(opened).get("pad_token")
                token = token.get("content") if isinstance(token, dict) else token
                if token is not None and self.tokenizer.token_to_id(token) is not None:
                    return self.tokenizer.token_to_id(token)
        for token in ("[PAD]", "<pad>"):
            if self.tokenizer.token_to_id(token) is not None:
                return self.tokenizer.token_to_id(token)
        raise ValueError(f"{self.path} names no padding token (no padding section, no pad_token in "
                         "special_tokens_map.json or tokenizer_config.json, no [PAD] or <pad> in the vocabulary).")

    def __call__(self, texts, pairs=None, max_length=None):
        max_length = self.max_length if max_length is None else max_length
        self._check_length("max_length", max_length)
        texts = _strings("texts", texts)
        if pairs is not None:
            pairs = _strings("pairs", pairs)
            if len(pairs) != len(texts):
                raise ValueError(f"`pairs` must have one text per text of `texts`: received {len(texts)} texts "
                                 f"and {len(pairs)} pairs.")
            if self.truncation != "head":
                raise ValueError('Text pairs are cut with truncation="head" only (the longer text first).')
        token_ids = np.full((len(texts), max_length), self.padding_id, dtype="int32")
        padding_mask = np.zeros((len(texts), max_length), dtype="int32")
        segment_ids = np.zeros((len(texts), max_length), dtype="int32")
        # In chunks: the tokenizer's `Encoding`s (offsets, strings, every piece of a whole review) are large; only
        # the id rows are kept, so memory holds the returned arrays plus one chunk's encodings.
        for start in range(0, len(texts), self.CHUNK):
            chunk = slice(start, start + self.CHUNK)
            for row, (ids, types) in enumerate(self._encode(texts[chunk], pairs and pairs[chunk], max_length),
                                               start):
                token_ids[row, :len(ids)] = ids
                padding_mask[row, :len(ids)] = 1
                segment_ids[row, :len(ids)] = types
        arrays = {"token_ids": token_ids, "padding_mask": padding_mask, "segment_ids": segment_ids}
        if not self.segments:
            del arrays["segment_ids"]
        return arrays

    CHUNK = 1024  # texts encoded at a time

    def _encode(self, texts, pairs, max_length):
        """`(ids, type_ids)` lists of each text (or text pair), cut to `max_length` with the special tokens."""
        if pairs is not None or self.truncation == "head":
            self.tokenizer.enable_truncation(max_length, strategy="longest_first")
            try:
                encodings = self.tokenizer.encode_batch(list(zip(texts, pairs)) if pairs is not None else texts)
            finally:
                self.tokenizer.no_truncation()
            return [(e.ids, e.type_ids) for e in encodings]
        # head_tail: the word pieces without special tokens, cut in Python, then wrapped as the checkpoint wraps
        # one text (`wrapping`). (Cutting and re-wrapping `Encoding` objects with the library's `merge`,
        # `truncate` and `post_process` kept ~1 MB per IMDB review alive: 24 GB for 25,000.)
        before, after = self.wrapping()
        head, tail = self.kept_pieces(max_length)
        rows = []
        for encoding in self.tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = encoding.ids
            if len(ids) > head + tail:
                ids = ids[:head] + ids[len(ids) - tail:]
            rows.append((before[0] + ids + after[0], before[1] + [0] * len(ids) + after[1]))
        return rows

    def reading(self, text):
        """`(pieces, kept, unknown)` of one text: its word pieces without special tokens, how many of them the
        model reads after truncation, and how many are the unknown-piece token (`[UNK]`, `<unk>`)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        room = sum(self.kept_pieces())
        unknown_id = next((self.tokenizer.token_to_id(token) for token in ("[UNK]", "<unk>")
                           if self.tokenizer.token_to_id(token) is not None), None)
        return len(ids), min(len(ids), room), sum(piece == unknown_id for piece in ids)

    def kept_pieces(self, max_length=None):
        """`(head, tail)`: how many word pieces of a text too long for `max_length` (default the tokenizer's) are
        kept from its start and from its end, the special tokens left room for. `truncation="head"`: `(room, 0)`."""
        before, after = self.wrapping()
        room = (self.max_length if max_length is None else max_length) - len(before[0]) - len(after[0])
        if self.truncation == "head":
            return room, 0
        head = room // 4 if self.head is None else min(self.head, room)
        return head, room - head

    def wrapping(self):
        """`((ids, type_ids) before, (ids, type_ids) after)`: the special tokens the checkpoint puts around one
        text ([CLS] … [SEP] for BERT, <s> … </s> for RoBERTa), read from its own post-processor."""
        if getattr(self, "_wrapping", None) is None:
            plain = self.tokenizer.encode("a", add_special_tokens=False)
            wrapped = self.tokenizer.encode("a")
            n = len(plain.ids)
            at = next(i for i in range(len(wrapped.ids) - n + 1) if wrapped.ids[i:i + n] == plain.ids)
            self._wrapping = ((wrapped.ids[:at], wrapped.type_ids[:at]),
                              (wrapped.ids[at + n:], wrapped.type_ids[at + n:]))
        return self._wrapping

    def token_labels(self, token_ids):
        """The word piece of each id (`"[CLS]"`, `"wonder"`, `"##ful"`...), for attention pictures."""
        return [self.tokenizer.id_to_token(int(i)) or "" for i in token_ids]

    def save(self, directory):
        """Copies `tokenizer.json` into `directory` and records the settings in `tokenizer_settings.json`."""
        os.makedirs(directory, exist_ok=True)
        self.tokenizer.save(os.path.join(directory, "tokenizer.json"))
        with open(os.path.join(directory, "tokenizer_settings.json"), "w") as file:
            json.dump({"max_length": self.max_length, "truncation": self.truncation, "head": self.head,
                       "padding_id": self.padding_id, "segments": self.segments}, file, indent=2)
        return directory

    @classmethod
    def load(cls, directory):
        """The tokenizer `save(directory)` wrote, with its settings."""
        with open(os.path.join(directory, "tokenizer_settings.json")) as file:
            settings = json.load(file)
        tokenizer = cls(directory, settings["max_length"], settings["truncation"], settings["head"])
        tokenizer.padding_id = settings["padding_id"]
        tokenizer.segments = settings.get("segments", True)
        return tokenizer


def _has_segments(folder):
    """Whether the checkpoint beside the tokenizer reads segment ids: not a DistilBERT (no token-type table)."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return True  # a tokenizer alone: give them, as a BERT tokenizer does
    with open(path) as file:
        return json.load(file).get("model_type") != "distilbert"


def _strings(name, texts):
    if isinstance(texts, str):
        raise TypeError(f"`{name}` must be a list of strings, not one string. Received: {texts[:40]!r}")
    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise TypeError(f"`{name}` must be a list of strings. Received items of type "
                        f"{sorted({type(text).__name__ for text in texts})}")
    return texts
