"""Shifted patch tokenization (SPT; Lee et al., 2021, "Vision Transformer for Small-Size Datasets", section 3.1).

A 4x4 patch token sees only its own 16 pixels. SPT widens what each token sees before the image is cut: the
image is shifted by half a patch in the four diagonal directions (the vacated border is filled with zeros), the
four shifted copies are stacked onto the image's channels, and only then cut into patches:

    image (H, W, C) -> concat[image, 4 diagonal half-patch shifts] (H, W, 5C)
                    -> patches (H/P, W/P, P*P*5C) -> LayerNorm -> Dense(dim)

so every token also holds the pixels of its neighbours' halves, a spatial prior at the price of a wider
projection.
"""

import keras
from keras import ops

from keras_tfm.layers import _checks


@keras.saving.register_keras_serializable(package="keras_tfm")
class ShiftedPatchTokenization(keras.layers.Layer):
    """Cuts an image and its four diagonal half-patch shifts into patches and projects them to `dim`.

    Args:
        patch_size: int or `(height, width)` of a patch; each side at least 2 (the shift is half a patch).
        dim: width of each patch token.
        layer_norm_epsilon: epsilon of the layer norm on the flattened patches.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        images: `(batch, height, width, channels)`; height and width divisible by the patch size.

    Returns:
        `(batch, height / P_h, width / P_w, dim)`, the token grid. The layer emits no mask.

    Example:

    >>> tokenizer = ShiftedPatchTokenization(patch_size=4, dim=64)
    >>> tuple(tokenizer(np.zeros((2, 32, 32, 3), "float32")).shape)
    (2, 8, 8, 64)
    """

    def __init__(self, patch_size, dim, layer_norm_epsilon=1e-6, **kwargs):
        _checks.known_keywords(ShiftedPatchTokenization, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        patch_shape = tuple(patch_size) if isinstance(patch_size, (tuple, list)) else (patch_size, patch_size)
        if len(patch_shape) != 2 or any(isinstance(p, bool) or not isinstance(p, int) or p < 2 for p in patch_shape):
            raise ValueError("`patch_size` must be an int or a pair of ints, each at least 2 (the image is shifted "
                             f"by half a patch). Received: patch_size={patch_size!r}")
        _checks.positive_int("dim", dim)
        self.patch_size = patch_size
        self.patch_shape = patch_shape
        self.dim = dim
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="norm")
        self.projection = keras.layers.Dense(dim, dtype=self.dtype_policy, name="projection")

    def build(self, images_shape):
        _checks.rank("images", images_shape, 4, "(batch, height, width, channels)")
        if images_shape[-1] is None:
            raise ValueError(f"The channel count of `images` must be known. Received shape {tuple(images_shape)}")
        patch_width = self.patch_shape[0] * self.patch_shape[1] * 5 * images_shape[-1]
        self.norm.build((None, None, None, patch_width))
        self.projection.build((None, None, None, patch_width))
        self.built = True

    def shifted_images(self, images):
        """`images` and its four diagonal half-patch shifts, stacked on the channels: `(batch, H, W, 5C)`."""
        dy, dx = self.patch_shape[0] // 2, self.patch_shape[1] // 2
        padded = ops.pad(images, [(0, 0), (dy, dy), (dx, dx), (0, 0)])  # (batch, H + 2dy, W + 2dx, C), zeros
        # A window of the padded image at offset (0, 0) is the image moved down-right by (dy, dx), at
        # (2dy, 2dx) moved up-left, and so on; each keeps the image's size.
        rows = (slice(0, -2 * dy), slice(2 * dy, None))
        columns = (slice(0, -2 * dx), slice(2 * dx, None))
        shifts = [padded[:, r, c, :] for r in rows for c in columns]  # 4 x (batch, H, W, C)
        return ops.concatenate([images] + shifts, axis=-1)  # (batch, H, W, 5C)

    def call(self, images):
        stacked = self.shifted_images(images)  # (batch, H, W, 5C)
        patches = ops.image.extract_patches(
            stacked, self.patch_shape, strides=self.patch_shape, padding="valid", data_format="channels_last"
        )  # (batch, H / P_h, W / P_w, P_h * P_w * 5C)
        return self.projection(self.norm(patches))  # (batch, H / P_h, W / P_w, dim)

    def compute_output_shape(self, images_shape):
        rows, columns = (None if s is None else s // p for s, p in zip(images_shape[1:3], self.patch_shape))
        return (images_shape[0], rows, columns, self.dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"patch_size": self.patch_size, "dim": self.dim, "layer_norm_epsilon": self.layer_norm_epsilon}
        )
        return config
