"""A convolutional tokenizer: a small CNN stem instead of cutting the image into patches.

The hybrid ViT (Dosovitskiy et al., 2021, section 3.1) and the Compact Convolutional Transformer (CCT; Hassani
et al., 2021, "Escaping the Big Data Paradigm with Compact Transformers") feed the Transformer the feature map of
a few convolutions. Each stage is

    3x3 convolution (stride 1, no bias) -> ReLU -> 3x3 max-pooling with stride 2

so every stage halves the grid, and the pixels of neighbouring tokens overlap. The convolutions bring the
locality prior a plain ViT lacks, which is what lets a Transformer learn from 50,000 images instead of millions.
"""

import keras

from keras_tfm.layers import _checks


@keras.saving.register_keras_serializable(package="keras_tfm")
class ConvTokenizer(keras.layers.Layer):
    """`stages` convolution + ReLU + max-pool stages that turn an image into a grid of `dim`-wide tokens.

    Args:
        dim: channels of the last stage (the token width).
        stages: number of stages; the grid is `2 ** stages` times smaller than the image on each side.
        hidden_dim: channels of the stages before the last. None (default) = `dim // 2`.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        images: `(batch, height, width, channels)`; height and width divisible by `2 ** stages`.

    Returns:
        `(batch, height / 2**stages, width / 2**stages, dim)`. The layer emits no mask.

    Example:

    >>> tokenizer = ConvTokenizer(dim=64, stages=2)
    >>> tuple(tokenizer(np.zeros((2, 32, 32, 3), "float32")).shape)
    (2, 8, 8, 64)
    """

    def __init__(self, dim, stages=2, hidden_dim=None, **kwargs):
        _checks.known_keywords(ConvTokenizer, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        _checks.positive_int("dim", dim)
        _checks.positive_int("stages", stages)
        _checks.positive_int("hidden_dim", hidden_dim, allow_none=True)
        self.dim = dim
        self.stages = stages
        self.hidden_dim = hidden_dim
        widths = [hidden_dim or max(dim // 2, 1)] * (stages - 1) + [dim]
        self.convolutions = [
            keras.layers.Conv2D(width, 3, padding="same", use_bias=False, activation="relu",
                                dtype=self.dtype_policy, name=f"conv_{i}")
            for i, width in enumerate(widths)
        ]
        self.poolings = [
            keras.layers.MaxPooling2D(3, strides=2, padding="same", dtype=self.dtype_policy, name=f"pool_{i}")
            for i in range(stages)
        ]

    def build(self, images_shape):
        _checks.rank("images", images_shape, 4, "(batch, height, width, channels)")
        shape = tuple(images_shape)
        for convolution, pooling in zip(self.convolutions, self.poolings):
            convolution.build(shape)
            shape = pooling.compute_output_shape(convolution.compute_output_shape(shape))
        self.built = True

    def call(self, images):
        x = images
        for convolution, pooling in zip(self.convolutions, self.poolings):
            x = pooling(convolution(x))  # (batch, height / 2, width / 2, channels) per stage
        return x

    def compute_output_shape(self, images_shape):
        shape = tuple(images_shape)
        for convolution, pooling in zip(self.convolutions, self.poolings):
            shape = pooling.compute_output_shape(convolution.compute_output_shape(shape))
        return shape

    def get_config(self):
        config = super().get_config()
        config.update({"dim": self.dim, "stages": self.stages, "hidden_dim": self.hidden_dim})
        return config
