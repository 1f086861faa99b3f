"""keras_tfm: Transformer building blocks on Keras 3, written to be read.

    import keras_tfm
    block = keras_tfm.EncoderBlock(num_heads=4, mlp_dim=256)
    model = keras_tfm.load_model("runs/reverse_digits/<timestamp>")  # a saved model, or a run's folder
"""

from keras_tfm import callbacks, layers, metrics, models, schedules, text, visualize
from keras_tfm.attention_probe import AttentionMap, AttentionMaps, attention_maps
from keras_tfm.layers import *  # noqa: F401,F403  (the layers and models are the package's public API)
from keras_tfm.layers import __all__ as _layer_names
from keras_tfm.models import *  # noqa: F401,F403
from keras_tfm.models import __all__ as _model_names
from keras_tfm.saving import load_model
from keras_tfm.text import TextClassifierPipeline, Translator

__version__ = "0.1.0"
__all__ = ["AttentionMap", "AttentionMaps", "attention_maps", "load_model", "callbacks", "layers", "metrics", "models", "schedules", "text", "visualize", "TextClassifierPipeline", "Translator", *_layer_names, *_model_names]
