"""Text in, text out: a subword tokenizer, corpus BLEU, a `Translator` that pairs a trained
`Seq2SeqTransformer` with its tokenizers so generation takes and returns strings, and a `TextClassifierPipeline`
that pairs a trained `TextClassifier` with its vocabulary so it classifies strings; `serving` exports such a
pipeline as a TensorFlow SavedModel that takes strings (its WordPiece tokenizer inside the graph)."""

from keras_tfm.text.bleu import ValidationBLEU, corpus_bleu
from keras_tfm.text.classifier_pipeline import TextClassifierPipeline
from keras_tfm.text.pretrained_tokenizer import PretrainedTokenizer
from keras_tfm.text.serving import StringTokenizer, export_saved_model
from keras_tfm.text.tokenizer import END, MODEL_TYPES, PAD, START, UNK, SubwordTokenizer
from keras_tfm.text.translator import Translator

__all__ = [
    "END", "MODEL_TYPES", "PAD", "PretrainedTokenizer", "START", "StringTokenizer", "UNK", "SubwordTokenizer",
    "TextClassifierPipeline", "Translator", "ValidationBLEU", "corpus_bleu", "export_saved_model",
]
