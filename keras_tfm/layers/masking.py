"""Attention masks as pure functions.

keras_tfm follows the Keras convention everywhere: a mask is boolean (or 0/1), and **True / 1 means "may
attend"**. An attention mask has shape `(batch, query_len, key_len)`; a padding mask has shape
`(batch, length)` and is True at real tokens.

PyTorch uses the opposite convention (`True` = blocked, or an additive float mask with `-inf` at blocked
places); `attention_mask_from_torch` converts such a mask.
"""

import keras
from keras import ops


def causal_mask(query_length, key_length=None, offset=0):
    """Lower-triangular "may attend" mask: query `i` sees keys `0 .. offset + i`.

    `offset` is the position of the first query among the keys: during incremental decoding with a key/value
    cache of `key_length` slots, the new token at position `offset` may look at every key up to and including
    itself, and at none of the (still empty) slots after it.

    Args:
        query_length: number of queries (int or scalar tensor).
        key_length: number of keys; defaults to `query_length`.
        offset: int or scalar tensor, position of query 0 among the keys.

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.

    Example:

    >>> causal_mask(3)  # doctest: +SKIP
    [[ True, False, False],
     [ True,  True, False],
     [ True,  True,  True]]
    """
    if key_length is None:
        key_length = query_length
    query_positions = ops.arange(query_length)[:, None] + ops.cast(offset, "int32")  # (q, 1)
    key_positions = ops.arange(key_length)[None, :]  # (1, k)
    return ops.greater_equal(query_positions, key_positions)  # (q, k)


def same_position(query_length, key_length=None, offset=0):
    """True where query `i` and key `offset + i` are the same token: the diagonal that locality self-attention
    masks (Lee et al., 2021) so that a token attends to the *other* tokens.

    Args:
        query_length: number of queries (int or scalar tensor).
        key_length: number of keys; defaults to `query_length`.
        offset: int or scalar tensor, position of query 0 among the keys (as in `causal_mask`).

    Returns:
        Boolean tensor of shape `(query_length, key_length)`.

    Example:

    >>> same_position(2, 3)  # doctest: +SKIP
    [[ True, False, False],
     [False,  True, False]]
    """
    if key_length is None:
        key_length = query_length
    query_positions = ops.arange(query_length)[:, None] + ops.cast(offset, "int32")  # (q, 1)
    key_positions = ops.arange(key_length)[None, :]  # (1, k)
    return ops.equal(query_positions, key_positions)  # (q, k)


def attention_mask_from_torch(mask):
    """Converts a PyTorch-style mask (True = blocked, or additive 0 / -inf) to the Keras convention.

    `torch.nn.MultiheadAttention` takes `attn_mask` and `key_padding_mask` where `True` marks a position that
    may **not** be attended, or a float mask that is added to the attention logits (0 = allowed,
    `-inf` = blocked). Keras and keras_tfm use `True` = may attend. The shape is kept, so a PyTorch
    `key_padding_mask` of shape `(batch, key_len)` becomes a Keras `value_mask`, and an `attn_mask` of shape
    `(batch, query_len, key_len)` becomes an `attention_mask`.

    Args:
        mask: boolean or float array/tensor in the PyTorch convention.

    Returns:
        Boolean tensor of the same shape, True where attention is allowed.

    Raises:
        TypeError: for a mask that is neither boolean nor floating point.

    Example:

    >>> blocked = np.array([[False, True]])  # PyTorch: key 1 is padding
    >>> attention_mask_from_torch(blocked)  # doctest: +SKIP
    [[ True, False]]
    """
    mask = ops.convert_to_tensor(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if "bool" in dtype:
        return ops.logical_not(mask)
    if "float" in dtype:
        # Additive masks: 0 is "allowed", -inf (or a very large negative bias) is "blocked".
        return ops.greater(mask, -1e4)
    raise TypeError(
        "`mask` must be a boolean mask (True = blocked) or an additive float mask (0 / -inf) in the PyTorch "
        f"convention. Received: mask with dtype={dtype}"
    )
