"""Patch embedding: the input layer of the Vision Transformer (Dosovitskiy et al., 2021, section 3.1).

"An image is worth 16x16 words": the image is cut into non-overlapping P×P patches, each patch is flattened and
linearly projected to `dim` (a Conv2D with kernel = stride = P does exactly that), the patches are read in
row-major order as a sequence of tokens, a learnable [CLS] token is prepended, and a position encoding is
added so the Transformer knows where each patch came from.

The step that makes the token grid is the `tokenizer`; three are built in, and all give the same grid (one
token per `patch_size` block of pixels), so the positions, the [CLS] token and everything downstream are the same:

    "linear"   the paper's: each patch flattened and projected (a Conv2D with kernel = stride = patch size)
    "conv"     a convolutional stem (CCT, Hassani et al. 2021; the ViT paper's hybrid, section 3.1):
               log2(patch size) stages of 3x3 conv + ReLU + stride-2 max-pool  (`ConvTokenizer`)
    "shifted"  shifted patch tokenization (SPT, Lee et al. 2021): the image and its four diagonal half-patch
               shifts, cut into patches, layer-normed and projected  (`ShiftedPatchTokenization`)

The last two give a ViT the spatial prior that lets it learn from small data sets such as CIFAR-10.
"""

import keras
from keras import ops

from keras_tfm.layers import _checks
from keras_tfm.layers.conv_tokenizer import ConvTokenizer
from keras_tfm.layers.dropout import Dropout
from keras_tfm.layers.position_encoding import sincos_2d_position_encoding
from keras_tfm.layers.shifted_patch_tokenization import ShiftedPatchTokenization

POSITIONS = ("sincos2d", "learned", None)
TOKENIZERS = ("linear", "conv", "shifted")
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
        tokenizer: how the token grid is made (see the module docstring): `"linear"` (default, the paper's
            patches), `"conv"` (a `ConvTokenizer` stem of log2(patch size) stages; the patch size must be a
            square power of two) or `"shifted"` (`ShiftedPatchTokenization`; patch sides at least 2). The
            sublayer is the `projection` attribute in every case.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        images: `(batch, height, width, channels)`; height and width divisible by the patch size. The pixels go
            into the projection as they are: this layer does not rescale. Give it values of a small range
            (e.g. `keras.layers.Rescaling(1 / 255)` before it for 0-255 pixels); `ViT` does that itself
            (`rescale=True`, its default).
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
        tokenizer="linear",
        **kwargs,
    ):
        _checks.known_keywords(PatchEmbedding, kwargs, _checks.layer_keywords())
        _checks.booleans(PatchEmbedding, locals())
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
        _checks.one_of("tokenizer", tokenizer, TOKENIZERS)
        square = patch_shape[0] == patch_shape[1]
        if tokenizer == "conv" and (not square or patch_shape[0] < 2 or patch_shape[0] & (patch_shape[0] - 1)):
            raise ValueError("tokenizer='conv' halves the grid in each stage, so `patch_size` must be a square power "
                             f"of two (2, 4, 8, ...). Received: patch_size={patch_size!r}")
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
        self.tokenizer = tokenizer
        self.projection = self._tokenizer_layer()  # images -> (batch, rows, columns, dim)
        self.dropout_layer = Dropout(dropout, seed=seed, dtype=self.dtype_policy)

    def _tokenizer_layer(self):
        if self.tokenizer == "conv":
            stages = self.patch_shape[0].bit_length() - 1  # log2(patch size): each stage halves the grid
            return ConvTokenizer(self.dim, stages, dtype=self.dtype_policy, name="projection")
        if self.tokenizer == "shifted":
            return ShiftedPatchTokenization(self.patch_shape, self.dim, dtype=self.dtype_policy, name="projection")
        return keras.layers.Conv2D(
            self.dim, kernel_size=self.patch_shape, strides=self.patch_shape, padding="valid",
            dtype=self.dtype_policy, name="projection",
        )

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
                "tokenizer": self.tokenizer,
            }
        )
        return config
