"""Runnable recipes: `python -m recipes.NAME --help`.

Every recipe imports keras_tfm, and Keras and TensorFlow with it, at its top; this package imports TensorFlow
first with its C++ start-up lines silenced (`flags.import_tensorflow_quietly`), so that a run's output starts
with the recipe's own lines. `TF_CPP_MIN_LOG_LEVEL` set in the environment wins.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO/WARNING lines off

from recipes.flags import import_tensorflow_quietly  # noqa: E402  (after the line above: TensorFlow reads it once)

import_tensorflow_quietly()
