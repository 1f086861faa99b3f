"""Small helpers shared by the layers."""

import keras


def clone_initializer(initializer):
    """A fresh copy of `initializer`, so that two sublayers never share one (an unseeded Keras initializer
    object reused for two weights warns and may give them identical values)."""
    return keras.initializers.get(keras.initializers.serialize(keras.initializers.get(initializer)))
