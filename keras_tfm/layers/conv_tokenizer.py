"""A convolutional tokenizer: a small CNN stem instead of cutting the image into patches.

The hybrid ViT (Dosovitskiy et al., 2021, section 3.1) and the Compact Convolutional Transformer (CCT; Hassani
et al., 2021, "Escaping the Big Data Paradigm with Compact Transformers") feed the Transformer the feature map of
a few convolutions. Each stage is

    3x3 convolution (stride 1, no bias) -> ReLU -> 3x3 max-pooling with stride 2

so every stage halves the grid, and the pixels of neighbouring tokens overlap. The convolutions bring the
locality prior a plain ViT lacks, which is what lets a Transformer learn from 50,000 images instead of millions.

When JAX traces the layer on a CPU (every training step: `jax.grad`, `jax.jit`), both steps are written out by
hand, because XLA's CPU code for Keras' own layers is slow there (docs/results.md, "The conv stem on JAX"):

* the convolution: XLA differentiates `conv_general_dilated` with respect to its kernel as another convolution,
  the slowest part of the stem. Here it is one matrix product of each pixel's 3x3 neighbourhood (im2col) with the
  kernel, whose gradients are two more matrix products.
* the max-pool: `MaxPooling2D` differentiates through XLA's select-and-scatter; maxima of strided slices, rows
  then columns, differentiate as plain selects.

The weights and values are the same (to float rounding); `benchmarks/conv_stem.py` times both stems side by side.
TensorFlow, PyTorch and JAX on other devices run Keras' layers. On TensorFlow the sliced pool helps under XLA but
makes a plain graph slower, and a layer cannot tell which of the two compiles it.
"""

import keras
from keras import ops

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
                                data_format="channels_last", dtype=self.dtype_policy, name=f"conv_{i}")
            for i, width in enumerate(widths)
        ]
        self.poolings = [
            keras.layers.MaxPooling2D(3, strides=2, padding="same", data_format="channels_last",
                                      dtype=self.dtype_policy, name=f"pool_{i}")
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
        hand_written = _traced_by_jax_on_cpu(images)
        for convolution, pooling in zip(self.convolutions, self.poolings):
            if hand_written:
                x = _neighbourhood_product(convolution, x)
                x = _max_pool_3x3_stride_2(x) if _even(x.shape[1]) and _even(x.shape[2]) else pooling(x)
            else:
                x = pooling(convolution(x))  # (batch, height / 2, width / 2, channels)
        return x  # (batch, height / 2**stages, width / 2**stages, dim)

    def compute_output_shape(self, images_shape):
        shape = tuple(images_shape)
        for convolution, pooling in zip(self.convolutions, self.poolings):
            shape = pooling.compute_output_shape(convolution.compute_output_shape(shape))
        return shape

    def get_config(self):
        config = super().get_config()
        config.update({"dim": self.dim, "stages": self.stages, "hidden_dim": self.hidden_dim})
        return config


def _traced_by_jax_on_cpu(x):
    if keras.backend.backend() != "jax":
        return False
    import jax

    return isinstance(x, jax.core.Tracer) and jax.default_backend() == "cpu"


def _even(size):
    return isinstance(size, int) and size % 2 == 0


def _max_pool_3x3_stride_2(x):
    """`MaxPooling2D(3, strides=2, padding="same")` on an even-sized grid, as maxima of strided slices.

    Window i covers pixels 2i, 2i + 1 and 2i + 2; the last window's third pixel is Keras' padding (never the
    maximum). So along each axis the pool is max(x[0::2], x[1::2], x[2::2] with a -inf row appended)."""
    for axis in (1, 2):
        evens = x[:, 0::2] if axis == 1 else x[:, :, 0::2]
        odds = x[:, 1::2] if axis == 1 else x[:, :, 1::2]
        after = evens[:, 1:] if axis == 1 else evens[:, :, 1:]  # the next window's first pixel
        padding = [[0, 0]] * 4
        padding[axis] = [0, 1]
        after = ops.pad(after, padding, constant_values=float("-inf"))
        x = ops.maximum(ops.maximum(evens, odds), after)
    return x


def _neighbourhood_product(convolution, x):
    """`convolution(x)` for a 3x3, stride 1, "same", bias-free `Conv2D` with ReLU, as one matrix product of each
    pixel's 3x3 neighbourhood (9 shifted copies of `x`, side by side) with the kernel: (batch, h, w, 9 * c_in) @
    (9 * c_in, c_out). The kernel's (3, 3, c_in, c_out) layout flattens in the same (row, column, channel) order."""
    height, width, channels = x.shape[1], x.shape[2], x.shape[3]
    padded = ops.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    neighbourhoods = ops.concatenate(
        [padded[:, row:row + height, column:column + width] for row in range(3) for column in range(3)], axis=-1)
    kernel = ops.reshape(ops.cast(convolution.kernel, x.dtype), (9 * channels, -1))
    return ops.relu(ops.matmul(neighbourhoods, kernel))
