"""keras_tfm: Transformer building blocks on Keras 3, written to be read.

    import keras_tfm
    block = keras_tfm.EncoderBlock(num_heads=4, mlp_dim=256)
    model = keras_tfm.load_model("runs/reverse_digits/<timestamp>")  # a saved model, or a run's folder

`import keras_tfm` imports its parts, and Keras with them, as keras_hub does: each class registers itself with
Keras where it is defined (`@keras.saving.register_keras_serializable(package="keras_tfm")`), so after `import
keras_tfm`, in either order with `import keras`, `keras.saving.load_model` finds every class a saved model names.
`import keras_tfm` does not import TensorFlow on the JAX and PyTorch backends: only the parts that are TensorFlow's
by nature need it (the `tf.data` pipelines of `keras_tfm.data`, the string-serving SavedModel of
`keras_tfm.text.serving`, and `keras_tfm.distribute`, which `import keras_tfm` leaves out).

Example:

>>> import keras_tfm
>>> sorted(keras_tfm.presets.SEQ2SEQ_PRESETS)
['base', 'small', 'tiny']
>>> keras_tfm.EncoderBlock is keras_tfm.layers.EncoderBlock
True
"""

from keras_tfm import callbacks, checks, files, hardware, insight, layers, metrics, models, presets, schedules, text
from keras_tfm.insight.attention_probe import AttentionMap, AttentionMaps, attention_maps
from keras_tfm.layers import *  # noqa: F403  (the names of keras_tfm.layers.__all__)
from keras_tfm.models import *  # noqa: F403  (the names of keras_tfm.models.__all__)
from keras_tfm.saving import load_model
from keras_tfm.text import TextClassifierPipeline, Translator

__version__ = "0.4.0"

# What `from keras_tfm import *` binds: the layers, the models, the few functions a user calls first, and the parts
# a user works with (not `files`, whose short name would shadow the user's own).
__all__ = [
    *layers.__all__, *models.__all__,
    "AttentionMap", "AttentionMaps", "attention_maps", "load_model", "TextClassifierPipeline", "Translator",
    "callbacks", "checks", "hardware", "insight", "layers", "metrics", "models", "presets", "schedules", "text",
]
