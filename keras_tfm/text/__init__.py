"""Text in, text out: a subword tokenizer, corpus BLEU, and a `Translator` that pairs a trained
`Seq2SeqTransformer` with its tokenizers so generation takes and returns strings."""

from keras_tfm.text.bleu import corpus_bleu
from keras_tfm.text.tokenizer import END, MODEL_TYPES, PAD, START, UNK, SubwordTokenizer
from keras_tfm.text.translator import Translator

__all__ = ["END", "MODEL_TYPES", "PAD", "START", "UNK", "SubwordTokenizer", "Translator", "corpus_bleu"]
