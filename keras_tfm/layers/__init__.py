"""The building blocks of keras_tfm, from positional encodings up to encoder and decoder blocks."""

from keras_tfm.layers.attention import MultiHeadAttention
from keras_tfm.layers.class_token import ClassToken
from keras_tfm.layers.conv_tokenizer import ConvTokenizer
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.drop_path import DropPath
from keras_tfm.layers.dropout import Dropout
from keras_tfm.layers.encoder_block import EncoderBlock
from keras_tfm.layers.feed_forward import FeedForward
from keras_tfm.layers.masking import attention_mask_from_torch, causal_mask, same_position
from keras_tfm.layers.patch_embedding import PatchEmbedding, resample_position_embeddings
from keras_tfm.layers.position_encoding import (
    sincos_2d_position_encoding,
    sinusoidal_encoding_at,
    sinusoidal_position_encoding,
)
from keras_tfm.layers.sequence_pooling import SequencePooling
from keras_tfm.layers.shifted_patch_tokenization import ShiftedPatchTokenization
from keras_tfm.layers.token_embedding import TokenEmbedding

__all__ = [
    "ClassToken",
    "ConvTokenizer",
    "DecoderBlock",
    "DropPath",
    "Dropout",
    "EncoderBlock",
    "FeedForward",
    "MultiHeadAttention",
    "PatchEmbedding",
    "SequencePooling",
    "ShiftedPatchTokenization",
    "TokenEmbedding",
    "attention_mask_from_torch",
    "causal_mask",
    "resample_position_embeddings",
    "same_position",
    "sincos_2d_position_encoding",
    "sinusoidal_encoding_at",
    "sinusoidal_position_encoding",
]
