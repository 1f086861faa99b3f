"""A learnable [CLS] token prepended to a sequence (BERT, ViT): its final state summarises the sequence."""

import keras
from keras import ops

from keras_tfm.layers import _checks


@keras.saving.register_keras_serializable(package="keras_tfm")
class ClassToken(keras.layers.Layer):
    """Prepends one learned vector to every sequence and extends the padding mask with a True for it.

    Attention lets the [CLS] position gather from every real token; a classifier then reads its final state.
    (`PatchEmbedding` has this built in; this layer gives token sequences the same option.)

    Args:
        initializer: initializer of the token vector.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        x: `(batch, length, dim)`.
        mask: `(batch, length)` padding mask; Keras fills it in from `x`'s implicit mask.

    Returns:
        `(batch, 1 + length, dim)`, with the mask `(batch, 1 + length)` when `x` had one.

    Example:

    >>> tokens = ClassToken()(np.zeros((2, 5, 16), "float32"))
    >>> tuple(tokens.shape)
    (2, 6, 16)
    """

    def __init__(self, initializer="zeros", **kwargs):
        _checks.known_keywords(ClassToken, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, x_shape):
        _checks.rank("x", x_shape, 3, "(batch, length, dim)")
        self.token = self.add_weight(name="token", shape=(1, 1, x_shape[-1]), initializer=self.initializer)
        self.built = True

    def call(self, x, mask=None):
        _checks.rank("x", x.shape, 3, "(batch, length, dim)")
        batch = ops.shape(x)[0]
        token = ops.cast(ops.broadcast_to(self.token, (batch, 1, ops.shape(x)[-1])), x.dtype)  # (batch, 1, dim)
        return ops.concatenate([token, x], axis=1)  # (batch, 1 + length, dim)

    def compute_mask(self, x, mask=None):
        if mask is None:
            return None
        return ops.concatenate([ops.ones_like(mask[:, :1], dtype="bool"), ops.cast(mask, "bool")], axis=1)

    def compute_output_shape(self, x_shape):
        length = None if x_shape[1] is None else x_shape[1] + 1
        return (x_shape[0], length, x_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update({"initializer": keras.initializers.serialize(self.initializer)})
        return config
