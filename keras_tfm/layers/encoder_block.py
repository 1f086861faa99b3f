"""The Transformer encoder block (Vaswani et al., 2017, section 3.1; pre-norm as in ViT and most modern models).

    pre-norm  (default):  x = x + Attention(LN(x));   x = x + FFN(LN(x))
    post-norm (2017):     x = LN(x + Attention(x));   x = LN(x + FFN(x))

Pre-norm keeps an unnormalised residual path from input to output, so gradients reach early layers intact
and deep stacks train without a learning-rate warm-up; post-norm is the paper's original layout.
"""

import keras

from keras_tfm.layers import _checks
from keras_tfm.layers._block import TransformerBlockBase, check_width

@keras.saving.register_keras_serializable(package="keras_tfm")
class EncoderBlock(TransformerBlockBase):
    """Self-attention and a feed-forward network, each wrapped in a residual connection and layer norm.

    Args:
        num_heads: number of attention heads.
        mlp_dim: hidden width of the feed-forward network.
        dropout: dropout rate on the attention output and inside the feed-forward network.
        attention_dropout: dropout rate on the attention weights.
        activation_dropout: dropout rate after the feed-forward network's activation; None = `dropout`, 0.0 =
            none (BERT).
        norm_first: pre-norm (True, default) or the paper's post-norm (False).
        layer_norm_epsilon: epsilon of the layer norms.
        activation: activation of the feed-forward network.
        drop_path: stochastic-depth rate of both residual branches.
        key_dim: size of each head; defaults to `dim // num_heads`.
        attention_scale: factor on the attention logits; None = `1/√key_dim` (see `MultiHeadAttention`).
        seed: seed of the dropouts; each random sublayer gets its own seed derived from it.
        locality: locality self-attention (Lee et al. 2021, "Vision Transformer for Small-Size Datasets"): a
            trained logit scale and no attention from a token to itself (see `MultiHeadAttention`). For ViTs
            trained from scratch on small data sets. Encoder only: a causal decoder cannot mask the diagonal.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        x: `(batch, length, dim)`.
        mask: `(batch, length)` padding mask, True at real tokens; filled in by Keras from `x`'s implicit mask.
        x_mask: the same; Keras passes the implicit mask under this name when several tensors are given
            (e.g. together with `attention_mask`).
        attention_mask: `(batch, length, length)`, True where token `i` may attend to token `j`.
        return_attention_scores: also return the `(batch, num_heads, length, length)` attention weights.
        training: whether dropout is active.

    Returns:
        `(batch, length, dim)`, or `(output, scores)`. The padding mask passes through to the output; outputs at
        real tokens do not depend on padded tokens.

    Example:

    >>> block = EncoderBlock(num_heads=4, mlp_dim=128)
    >>> y, scores = block(np.zeros((2, 10, 32), "float32"), return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 10, 32), (2, 4, 10, 10))
    """

    CONFIG = TransformerBlockBase.CONFIG + ("locality",)

    def __init__(self, num_heads, mlp_dim, locality=False, **kwargs):
        _checks.booleans(EncoderBlock, locals())
        super().__init__(num_heads, mlp_dim, **kwargs)
        self.locality = bool(locality)
        self.attention_norm = self._norm("attention_norm")
        self.attention = self._attention("attention", locality=self.locality)
        self.attention_output_dropout = self._dropout()
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward = self._feed_forward()
        self.drop_path_layer = self._drop_path()

    def build(self, x_shape):
        _checks.rank("x", x_shape, 3, "(batch, length, dim)")
        check_width(x_shape[-1], self.num_heads, self.key_dim)
        self.attention_norm.build(x_shape)
        self.attention.build(x_shape, x_shape)
        self.feed_forward_norm.build(x_shape)
        self.feed_forward.build(x_shape)
        self.built = True

    def call(self, x, mask=None, x_mask=None, attention_mask=None, return_attention_scores=False, training=None):
        _checks.rank("x", x.shape, 3, "(batch, length, dim)")
        padding = mask if mask is not None else x_mask  # (batch, length) or None

        h = self.attention_norm(x) if self.norm_first else x
        attended = self.attention(
            h,
            h,
            query_mask=padding,
            value_mask=padding,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        attended, scores = attended if return_attention_scores else (attended, None)
        x = x + self.drop_path_layer(self.attention_output_dropout(attended, training=training), training=training)
        if not self.norm_first:
            x = self.attention_norm(x)

        h = self.feed_forward_norm(x) if self.norm_first else x
        x = x + self.drop_path_layer(self.feed_forward(h, training=training), training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)
        return (x, scores) if return_attention_scores else x
