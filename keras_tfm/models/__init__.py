"""Ready models assembled from keras_tfm layers."""

from keras_tfm.models.language_model import TransformerLM
from keras_tfm.models.masked_lm import MaskedLanguageModel
from keras_tfm.presets import LANGUAGE_MODEL_PRESETS, SEQ2SEQ_PRESETS, TEXT_CLASSIFIER_PRESETS, VIT_PRESETS
from keras_tfm.models.seq2seq import Seq2SeqTransformer
from keras_tfm.models.text_classifier import TextClassifier
from keras_tfm.models.text_encoder import TextEncoder
from keras_tfm.models.vit import ViT, ViTBackbone
from keras_tfm.models.vit_weights import load_vit_weights

__all__ = [
    "LANGUAGE_MODEL_PRESETS",
    "MaskedLanguageModel",
    "SEQ2SEQ_PRESETS",
    "Seq2SeqTransformer",
    "TEXT_CLASSIFIER_PRESETS",
    "TextClassifier",
    "TextEncoder",
    "TransformerLM",
    "VIT_PRESETS",
    "ViT",
    "ViTBackbone",
    "load_vit_weights",
]
