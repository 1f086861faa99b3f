"""A classifier that takes strings, as a TensorFlow SavedModel: the checkpoint's WordPiece tokenizer inside the
graph, so a server needs TensorFlow (and TF Text's kernels), not Python, keras_tfm or `tokenizers`.

    export_saved_model(pipeline, "served/")          # a TextClassifierPipeline with a pretrained (BERT) tokenizer
    served = tf.saved_model.load("served/")          # anywhere: import tensorflow, tensorflow_text
    served.serve(tf.constant(["A wonderful, moving film."]))
    # {"label": [b"positive"], "probabilities": [[0.02, 0.98]]}

`StringTokenizer` rebuilds the checkpoint's `tokenizer.json` (a BERT WordPiece tokenizer: BertNormalizer,
BertPreTokenizer, WordPiece, [CLS] text [SEP]) from TensorFlow ops, step for step as the `tokenizers` library does:

    clean the text        control characters out (Unicode C*, \x85 too), then every kind of space to a space
    Chinese characters    spaced out, each its own word
    strip accents         NFD, then the combining marks (Unicode Mn) removed
    lower-case            Unicode lower case
    word pieces           TF Text's FastWordpieceTokenizer, which also splits on whitespace and punctuation as
                          BERT does (its definition of punctuation is BERT's)
    cut and wrap          "head" or "head_tail" truncation, the template's special tokens, padding

so its ids equal `PretrainedTokenizer`'s (tests/text/test_serving.py; 1,000 IMDB reviews in docs/results.md). A
byte-level BPE tokenizer (RoBERTa, GPT-2) has no equivalent among TF Text's kernels, and is refused with a
`ValueError`; so is a pipeline on a word vocabulary (its model alone exports with `model.export`).
"""

import json

import keras
import numpy as np

# Code points BERT's tokenizer spaces out as words of their own (CJK Unified Ideographs and their extensions).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _settings(tokenizer):
    """The WordPiece vocabulary and normaliser settings of a `PretrainedTokenizer`'s tokenizer.json; a
    `ValueError` for anything else."""
    spec = json.loads(tokenizer.tokenizer.to_str())
    model, normalizer, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer" or pre.get(
            "type") != "BertPreTokenizer":
        raise ValueError("export_saved_model exports BERT-style WordPiece tokenizers (BertNormalizer, "
                         "BertPreTokenizer, WordPiece); this tokenizer.json has model "
                         f"{model.get('type')!r}, normalizer {normalizer.get('type')!r} and pre-tokenizer "
                         f"{pre.get('type')!r}. Byte-level BPE (RoBERTa, GPT-2) has no TF Text kernel.")
    vocabulary = sorted(model["vocab"], key=model["vocab"].get)
    if [model["vocab"][piece] for piece in vocabulary] != list(range(len(vocabulary))):
        raise ValueError("the WordPiece vocabulary's ids must be 0..n-1 without gaps")
    lowercase = normalizer.get("lowercase", True)
    strip_accents = normalizer.get("strip_accents")
    return {"vocabulary": vocabulary, "unknown": model.get("unk_token", "[UNK]"),
            "prefix": model.get("continuing_subword_prefix", "##"),
            "max_chars": model.get("max_input_chars_per_word", 100),
            "clean": normalizer.get("clean_text", True), "chinese": normalizer.get("handle_chinese_chars", True),
            "strip_accents": lowercase if strip_accents is None else strip_accents, "lowercase": lowercase}


class StringTokenizer:
    """`PretrainedTokenizer`'s ids (`token_ids`, `padding_mask`, and `segment_ids` where the checkpoint has them)
    for a batch of strings, computed by TensorFlow ops, so that it can live inside a SavedModel.

    Args:
        tokenizer: a `keras_tfm.text.PretrainedTokenizer` of a BERT-style WordPiece checkpoint; its `max_length`,
            truncation, padding id and special tokens are kept.

    Call arguments:
        texts: a `tf.string` tensor `(batch,)`.

    Returns:
        A dict of int32 tensors `(batch, max_length)`, as `PretrainedTokenizer` returns NumPy arrays.

    Example:

    >>> tokenize = StringTokenizer(PretrainedTokenizer("all-MiniLM-L6-v2", max_length=8))  # doctest: +SKIP
    >>> tokenize(tf.constant(["A wonderful, moving film."]))["token_ids"]  # doctest: +SKIP
    <tf.Tensor: shape=(1, 8), dtype=int32, numpy=array([[ 101, 1037, 6919, 1010, 3048, 2143, 1012,  102]])>
    """

    def __init__(self, tokenizer):
        import tensorflow_text

        self.settings = _settings(tokenizer)
        self.max_length, self.padding_id, self.segments = tokenizer.max_length, tokenizer.padding_id, tokenizer.segments
        (self.before, _), (self.after, _) = tokenizer.wrapping()
        self.head, self.tail = tokenizer.kept_pieces()
        self.wordpiece = tensorflow_text.FastWordpieceTokenizer(
            vocab=self.settings["vocabulary"], suffix_indicator=self.settings["prefix"],
            max_bytes_per_word=self.settings["max_chars"], token_out_type="int64",
            unknown_token=self.settings["unknown"], no_pretokenization=False, support_detokenization=False)

    def normalize(self, texts):
        """BertNormalizer's text, for a `tf.string` batch."""
        import tensorflow as tf
        import tensorflow_text

        settings = self.settings
        if settings["clean"]:  # as `tokenizers` does: control characters out first (\x0b, \x85 too), then spaces
            texts = tf.strings.regex_replace(texts, r"[\t\n\r\p{Z}]", " ")
            texts = tf.strings.regex_replace(texts, r"[\x{0}\x{FFFD}\p{C}]", "")
        if settings["chinese"]:
            ranges = "".join(f"\\x{{{low:X}}}-\\x{{{high:X}}}" for low, high in CJK_RANGES)
            texts = tf.strings.regex_replace(texts, f"([{ranges}])", r" \1 ")
        if settings["strip_accents"]:
            texts = tf.strings.regex_replace(tensorflow_text.normalize_utf8(texts, "NFD"), r"\p{Mn}", "")
        if settings["lowercase"]:
            texts = tf.strings.lower(texts, encoding="utf-8")
        return texts

    def __call__(self, texts):
        import tensorflow as tf

        pieces = self.wordpiece.tokenize(self.normalize(texts))  # ragged (batch, pieces), int64
        lengths = pieces.row_lengths()
        positions = tf.ragged.range(lengths)
        keep = (positions < self.head) | (positions >= tf.expand_dims(lengths - self.tail, 1))
        pieces = tf.ragged.boolean_mask(pieces, keep)  # the first `head` and the last `tail` where too long
        batch = tf.shape(texts, out_type=tf.int64)[:1]
        wrap = [tf.RaggedTensor.from_tensor(tf.tile(tf.constant([ids], tf.int64), tf.concat([batch, [1]], 0)))
                for ids in (self.before, self.after)]
        ids = tf.concat([wrap[0], pieces, wrap[1]], axis=1)
        token_ids = tf.cast(ids.to_tensor(self.padding_id, shape=[None, self.max_length]), tf.int32)
        padding_mask = tf.sequence_mask(ids.row_lengths(), self.max_length, dtype=tf.int32)
        inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
        if self.segments:
            inputs["segment_ids"] = tf.zeros_like(token_ids)
        return inputs


def export_saved_model(pipeline, path):
    """Writes a TensorFlow SavedModel of `pipeline` (a `TextClassifierPipeline` with a pretrained WordPiece
    tokenizer) to `path`, whose `serve` function and `serving_default` signature take a batch of strings and
    return `label` (the class names, bytes) and `probabilities` `(batch, classes)` float32.

    Load it with `tf.saved_model.load(path)` after `import tensorflow_text` (its kernels); nothing of keras_tfm is
    needed. The TensorFlow backend only: a SavedModel is a TensorFlow graph. Returns `path`.
    """
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"export_saved_model writes a TensorFlow graph: run it on the TensorFlow backend "
                         f"(KERAS_BACKEND=tensorflow). This is {keras.backend.backend()!r}; a .keras file saved "
                         "on any backend loads there.")
    if pipeline.tokenizer is None:
        raise ValueError("export_saved_model needs a pipeline with a pretrained tokenizer (imdb_classifier "
                         "--pretrained); a word-vocabulary pipeline's model exports with `model.export` and takes "
                         "the ids of `pipeline.vectorize`.")
    tokenize = StringTokenizer(pipeline.tokenizer)
    model = pipeline.model
    class_names = tf.constant(pipeline.class_names)
    taken = {tensor.name for tensor in model.inputs}  # segment ids only for an encoder with a segment table

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def serve(texts):
        inputs = {name: value for name, value in tokenize(texts).items() if name in taken}
        logits = model(inputs, training=False)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        return {"label": tf.gather(class_names, tf.argmax(probabilities, axis=-1)), "probabilities": probabilities}

    module = tf.Module()
    module.model, module.serve = model, serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve})
    return path


def tokenize_like_pretrained(tokenizer, texts):
    """`StringTokenizer(tokenizer)`'s ids of `texts` (a list of str) as NumPy arrays, for comparing with
    `tokenizer(texts)`."""
    import tensorflow as tf

    return {name: np.asarray(value) for name, value in StringTokenizer(tokenizer)(tf.constant(texts)).items()}
