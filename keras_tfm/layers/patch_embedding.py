"""Patch embedding: the input layer of the Vision Transformer (Dosovitskiy et al., 2021, section 3.1).

"An image is worth 16x16 words": the image is cut into non-overlapping P×P patches, each patch is flattened and
linearly projected to `dim` (a Conv2D with kernel = stride = P does exactly that), the patches are read in
row-major order as a sequence of tokens, a learnable [CLS] token is prepended, and a position encoding is
added so the Transformer knows where each patch came from.
"""

import keras
from keras import ops

from keras_tfm.layers import _checks
from keras_tfm.layers.position_encoding import sincos_2d_position_encoding

POSITIONS = ("sincos2d", "learned", None)
INTERPOLATIONS = ("bilinear", "bicubic")


def resample_position_embeddings(table, old_grid, new_grid, num_prefix_tokens=1, interpolation="bicubic"):
    """Resizes a learned ViT position table to a new patch grid (for another image or patch size).

    The first `num_prefix_tokens` rows (the [CLS] token's) are kept; the rest are laid out on `old_grid`,
    resized as an image to `new_grid`, and flattened back in row-major order.

    Args:
        table: `(num_prefix_tokens + old_h * old_w, dim)` position table.
        old_grid: `(old_h, old_w)`.
        new_grid: `(new_h, new_w)`.
        num_prefix_tokens: rows before the patch rows (1 for a class token, else 0).
        interpolation: `"bilinear"` or `"bicubic"`.

    Returns:
        `(num_prefix_tokens + new_h * new_w, dim)` table.
    """
    _checks.one_of("interpolation", interpolation, INTERPOLATIONS)
    old_h, old_w = old_grid
    new_h, new_w = new_grid
    if (old_h, old_w) == (new_h, new_w):
        return table
    dim = table.shape[-1]
    prefix, grid = table[:num_prefix_tokens], table[num_prefix_tokens:]
    grid = ops.reshape(grid, (1, old_h, old_w, dim))  # one "image" with dim channels
    grid = ops.image.resize(
        ops.cast(grid, "float32"), (new_h, new_w), interpolation=interpolation, antialias=False,
        data_format="channels_last",
    )  # (1, new_h, new_w, dim)
    grid = ops.cast(ops.reshape(grid, (new_h * new_w, dim)), table.dtype)
    return ops.concatenate([prefix, grid], axis=0)


@keras.saving.register_keras_serializable(package="keras_tfm")
class PatchEmbedding(keras.layers.Layer):
    """Cuts images into patches, projects each to `dim`, prepends [CLS] and adds positions.

    Args:
        patch_size: int or `(height, width)` of a patch.
        dim: width of each patch token.
        position: `"sincos2d"` (fixed 2D sin-cos, works for any image size whose sides are multiples of the
            patch size), `"learned"` (a trainable table for the build-time grid, resampled with
            `interpolation` when called on another grid), or `None`.
        class_token: whether to prepend a learnable [CLS] token (it gets no fixed position encoding with
            "sincos2d", its own learned row with "learned", as in the original ViT).
        dropout: dropout rate applied to the token sequence.
        interpolation: `"bicubic"` or `"bilinear"`, how a learned table is resampled to a new grid.
        seed: seed of the dropout.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        images: `(batch, height, width, channels)`; height and width divisible by the patch size.
        training: whether dropout is active.

    Returns:
        `(batch, num_patches + class_token, dim)` where `num_patches = (height / P_h) * (width / P_w)`,
        patches in row-major order after the [CLS] token. The layer emits no mask.

    Example:

    >>> embed = PatchEmbedding(patch_size=4, dim=64)
    >>> tokens = embed(np.zeros((2, 32, 32, 3), "float32"))
    >>> tuple(tokens.shape)
    (2, 65, 64)
    """

    def __init__(
        self,
        patch_size,
        dim,
        position="sincos2d",
        class_token=True,
        dropout=0.0,
        interpolation="bicubic",
        seed=None,
        **kwargs,
    ):
        _checks.known_keywords(PatchEmbedding, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        patch_shape = tuple(patch_size) if isinstance(patch_size, (tuple, list)) else (patch_size, patch_size)
        if len(patch_shape) != 2:
            raise ValueError(f"`patch_size` must be an int or a pair of ints. Received: patch_size={patch_size!r}")
        for size in patch_shape:
            _checks.positive_int("patch_size", size)
        _checks.positive_int("dim", dim)
        _checks.one_of("position", position, POSITIONS)
        _checks.one_of("interpolation", interpolation, INTERPOLATIONS)
        _checks.rate("dropout", dropout)
        if position == "sincos2d" and dim % 4:
            raise ValueError(f"`dim` must be divisible by 4 for position='sincos2d'. Received: dim={dim}")
        self.patch_size = patch_size
        self.patch_shape = patch_shape  # (patch height, patch width)
        self.dim = dim
        self.position = position
        self.class_token = class_token
        self.dropout = dropout
        self.interpolation = interpolation
        self.seed = seed
        self.projection = keras.layers.Conv2D(
            dim, kernel_size=patch_shape, strides=patch_shape, padding="valid", dtype=self.dtype_policy,
            name="projection",
        )
        self.dropout_layer = keras.layers.Dropout(dropout, seed=seed, dtype=self.dtype_policy)

    def grid_size(self, height, width):
        """The `(rows, columns)` patch grid of a `height` × `width` image; raises if a side does not divide."""
        height, width = _checks.static(height), _checks.static(width)
        for name, size, patch in (("height", height, self.patch_shape[0]), ("width", width, self.patch_shape[1])):
            if size is not None and size % patch:
                raise ValueError(
                    f"The image {name} ({size}) must be divisible by the patch {name} ({patch}). "
                    f"Resize or crop the images, or choose another `patch_size`. Received: patch_size={self.patch_size!r}"
                )
        return (
            None if height is None else height // self.patch_shape[0],
            None if width is None else width // self.patch_shape[1],
        )

    def build(self, images_shape):
        _checks.rank("images", images_shape, 4, "(batch, height, width, channels)")
        if images_shape[-1] is None:
            raise ValueError(f"The channel count of `images` must be known. Received shape {tuple(images_shape)}")
        self.input_channels = images_shape[-1]
        self.projection.build(images_shape)
        if self.class_token:
            self.cls_token = self.add_weight(name="cls_token", shape=(1, 1, self.dim), initializer="zeros")
        if self.position == "learned":
            self.build_grid = self.grid_size(images_shape[1], images_shape[2])
            if None in self.build_grid:
                raise ValueError(
                    "position='learned' needs the image size at build time (the table has one row per patch). "
                    f"Received images with shape {tuple(images_shape)}"
                )
            rows = self.build_grid[0] * self.build_grid[1] + int(self.class_token)
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(rows, self.dim),
                initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            )
        self.built = True

    def call(self, images, training=None):
        _checks.rank("images", images.shape, 4, "(batch, height, width, channels)")
        if _checks.static(images.shape[-1]) is not None and images.shape[-1] != self.input_channels:
            raise ValueError(
                f"`images` must have {self.input_channels} channels, as when the layer was built. "
                f"Received: images with shape {tuple(images.shape)}"
            )
        rows, columns = self.grid_size(images.shape[1], images.shape[2])
        patches = self.projection(images)  # (batch, rows, columns, dim)
        batch = ops.shape(patches)[0]
        rows = ops.shape(patches)[1] if rows is None else rows
        columns = ops.shape(patches)[2] if columns is None else columns
        tokens = ops.reshape(patches, (batch, -1, self.dim))  # (batch, rows*columns, dim), row-major

        if self.position == "sincos2d":
            encoding = sincos_2d_position_encoding(rows, columns, self.dim, dtype=tokens.dtype)
            tokens = tokens + encoding[None, :, :]
        if self.class_token:
            cls = ops.cast(ops.broadcast_to(self.cls_token, (batch, 1, self.dim)), tokens.dtype)
            tokens = ops.concatenate([cls, tokens], axis=1)  # (batch, 1 + rows*columns, dim)
        if self.position == "learned":
            if None in (_checks.static(images.shape[1]), _checks.static(images.shape[2])):
                raise ValueError(
                    "position='learned' needs static image sizes at call time to resample its table. "
                    f"Received images with shape {tuple(images.shape)}"
                )
            table = resample_position_embeddings(
                self.position_embeddings, self.build_grid, (rows, columns), int(self.class_token), self.interpolation
            )
            tokens = tokens + ops.cast(table, tokens.dtype)[None, :, :]
        return self.dropout_layer(tokens, training=training)

    def compute_output_shape(self, images_shape):
        rows, columns = self.grid_size(images_shape[1], images_shape[2])
        length = None if None in (rows, columns) else rows * columns + int(self.class_token)
        return (images_shape[0], length, self.dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "dim": self.dim,
                "position": self.position,
                "class_token": self.class_token,
                "dropout": self.dropout,
                "interpolation": self.interpolation,
                "seed": self.seed,
            }
        )
        return config
