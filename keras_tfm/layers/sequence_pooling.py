"""Sequence pooling (Hassani et al., 2021, "Escaping the Big Data Paradigm with Compact Transformers", section 3.2).

Instead of a [CLS] token that the blocks must learn to fill, the model reads its output tokens through a learned
attention over the sequence: one linear score per token, a softmax over the tokens, and the weighted sum:

    weights = softmax(x W)          (batch, length, 1), sums to 1 over the tokens
    pooled  = weightsᵀ x            (batch, dim)

It costs `dim + 1` weights and lets the model decide which tokens matter, where mean pooling weighs all alike.
"""

import keras
from keras import ops

from keras_tfm.layers import _checks

# Scores of padded tokens are replaced by this before the softmax (finite, as in MultiHeadAttention).
_BLOCKED_SCORE = -0.7 * 3.4028235e38


@keras.saving.register_keras_serializable(package="keras_tfm")
class SequencePooling(keras.layers.Layer):
    """Attention-weighted average of a token sequence: `(batch, length, dim)` -> `(batch, dim)`.

    Args:
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        tokens: `(batch, length, dim)`.
        mask: `(batch, length)` padding mask, True at real tokens (filled in by Keras from the input's implicit
            mask). Padded tokens get zero weight; a sample with no real token gets uniform weights.
        return_weights: also return the `(batch, length)` pooling weights.

    Returns:
        `(batch, dim)`, or `(pooled, weights)`. The output carries no mask.

    Example:

    >>> pool = SequencePooling()
    >>> tuple(pool(np.zeros((2, 65, 32), "float32")).shape)
    (2, 32)
    """

    def __init__(self, **kwargs):
        _checks.known_keywords(SequencePooling, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        self.supports_masking = True
        self.score = keras.layers.Dense(1, dtype=self.dtype_policy, name="score")

    def build(self, tokens_shape):
        _checks.rank("tokens", tokens_shape, 3, "(batch, length, dim)")
        self.score.build(tokens_shape)
        self.built = True

    def call(self, tokens, mask=None, return_weights=False):
        _checks.rank("tokens", tokens.shape, 3, "(batch, length, dim)")
        # Softmax in float32: under mixed precision a long sequence's weights would lose their small terms.
        scores = ops.cast(self.score(tokens)[..., 0], "float32")  # (batch, length)
        if mask is not None:
            scores = ops.where(ops.cast(mask, "bool"), scores, _BLOCKED_SCORE)
        weights = ops.softmax(scores, axis=-1)  # (batch, length), sums to 1 over the tokens
        pooled = ops.einsum("bl,bld->bd", ops.cast(weights, tokens.dtype), tokens)  # (batch, dim)
        return (pooled, weights) if return_weights else pooled

    def compute_mask(self, tokens, mask=None):
        return None  # one vector per sample: nothing left to mask
