"""Fixed sinusoidal positional encodings: 1D for text (Vaswani et al., 2017), 2D for image patches.

Attention is blind to order: permuting the tokens permutes the outputs and nothing else. The paper adds to
each token a vector that depends only on its position,

    PE(pos, 2i)   = sin(pos / base^(2i / dim))
    PE(pos, 2i+1) = cos(pos / base^(2i / dim))

so each pair of channels (2i, 2i+1) is a clock hand turning at its own speed; wavelengths grow geometrically
from 2π to base·2π. Because sin/cos of a shifted angle are a rotation of the unshifted pair, PE(pos + k) is a
linear function of PE(pos), which makes relative offsets easy for attention to pick up.

For images (ViT, MAE, big_vision) the same idea is applied to the two grid coordinates: half of the channels
encode the patch's row, half its column.
"""

import math

from keras import ops

from keras_tfm.layers import _checks


def _check_base(base):
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"`base` must be a number greater than 1. Received: base={base!r}")


def sinusoidal_encoding_at(positions, dim, base=10000.0, dtype="float32"):
    """Sinusoidal encoding of arbitrary (possibly shifted or fractional) positions.

    This is the formula behind `sinusoidal_position_encoding`, exposed for incremental decoding where the
    positions of the new tokens start at an offset.

    Args:
        positions: tensor of shape `(length,)` (any numeric dtype) holding the positions to encode.
        dim: even number of channels.
        base: the wavelength base (10000 in the paper).
        dtype: dtype of the result.

    Returns:
        Tensor of shape `(length, dim)`.
    """
    _checks.positive_int("dim", dim)
    if dim % 2:
        raise ValueError(
            f"`dim` must be even for the sinusoidal encoding (sin and cos channels come in pairs). "
            f"Received: dim={dim}"
        )
    _check_base(base)
    positions = ops.cast(positions, "float32")
    # 1 / base^(2i/dim) for i = 0 .. dim/2 - 1, written with exp/log so it stays accurate in float32.
    frequencies = ops.exp(ops.arange(0, dim, 2, dtype="float32") * (-math.log(base) / dim))  # (dim/2,)
    angles = positions[:, None] * frequencies[None, :]  # (length, dim/2)
    # Interleave so channel 2i is sin and channel 2i+1 is cos, exactly the paper's layout.
    encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (length, dim/2, 2)
    encoding = ops.reshape(encoding, (-1, dim))  # (length, dim)
    return ops.cast(encoding, dtype)


def sinusoidal_position_encoding(length, dim, base=10000.0, dtype="float32"):
    """The 1D positional encoding of "Attention Is All You Need" (Vaswani et al., 2017, section 3.5).

    `PE[pos, 2i] = sin(pos / base^(2i/dim))` and `PE[pos, 2i+1] = cos(pos / base^(2i/dim))`.

    Args:
        length: number of positions (a positive int, or a scalar tensor when tracing with a dynamic length).
        dim: number of channels; must be even.
        base: the wavelength base (10000 in the paper).
        dtype: dtype of the result.

    Returns:
        Tensor of shape `(length, dim)` with values in [-1, 1]; row `pos` is the encoding of position `pos`.

    Example:

    >>> pe = sinusoidal_position_encoding(50, 16)
    >>> tuple(pe.shape)
    (50, 16)
    """
    if isinstance(length, (int, bool)):
        _checks.positive_int("length", length)
    return sinusoidal_encoding_at(ops.arange(length), dim, base=base, dtype=dtype)


def sincos_2d_position_encoding(height, width, dim, base=10000.0, dtype="float32"):
    """2D sin-cos positional encoding for a grid of image patches (as in MAE, big_vision's ViT).

    The first `dim // 2` channels are the 1D sinusoidal encoding of the patch's row, the last `dim // 2` that
    of its column. Patches are listed in row-major order, the order `PatchEmbedding` flattens them in, so row
    `r * width + c` of the result belongs to the patch at grid position `(r, c)`.

    Args:
        height: number of patch rows (positive int or scalar tensor).
        width: number of patch columns (positive int or scalar tensor).
        dim: number of channels; must be divisible by 4 (sin and cos for each of the two axes).
        base: the wavelength base.
        dtype: dtype of the result.

    Returns:
        Tensor of shape `(height * width, dim)` with values in [-1, 1].

    Example:

    >>> pe = sincos_2d_position_encoding(4, 4, 64)  # a 32x32 image cut into 8x8 patches
    >>> tuple(pe.shape)
    (16, 64)
    """
    _checks.positive_int("dim", dim)
    if dim % 4:
        raise ValueError(
            "`dim` must be divisible by 4 for the 2D sin-cos encoding (sin and cos for rows and for columns). "
            f"Received: dim={dim}"
        )
    for name, value in (("height", height), ("width", width)):
        if isinstance(value, int):
            _checks.positive_int(name, value)
    rows = ops.repeat(ops.arange(height), width)  # (height*width,): 0,0,..,0,1,1,..
    columns = ops.tile(ops.arange(width), [height])  # (height*width,): 0,1,..,w-1,0,1,..
    row_encoding = sinusoidal_encoding_at(rows, dim // 2, base=base, dtype=dtype)  # (h*w, dim/2)
    column_encoding = sinusoidal_encoding_at(columns, dim // 2, base=base, dtype=dtype)  # (h*w, dim/2)
    return ops.concatenate([row_encoding, column_encoding], axis=-1)  # (h*w, dim)
