"""The Transformer encoder block (Vaswani et al., 2017, section 3.1; pre-norm as in ViT and most modern models).

    pre-norm  (default):  x = x + Attention(LN(x));   x = x + FFN(LN(x))
    post-norm (2017):     x = LN(x + Attention(x));   x = LN(x + FFN(x))

Pre-norm keeps an unnormalised residual path from input to output, so gradients reach early layers intact
and deep stacks train without a learning-rate warm-up; post-norm is the paper's original layout.
"""

import keras

from keras_tfm.layers import _checks
from keras_tfm.layers.attention import MultiHeadAttention
from keras_tfm.layers.drop_path import DropPath
from keras_tfm.layers.feed_forward import FeedForward


def check_width(dim, num_heads, key_dim):
    """The block width must split evenly into heads unless the head size is given."""
    if key_dim is None and dim is not None and dim % num_heads:
        raise ValueError(
            f"`dim` ({dim}) must be divisible by `num_heads` ({num_heads}): each head gets dim / num_heads "
            "channels. Change the width or the number of heads, or pass `key_dim`."
        )


@keras.saving.register_keras_serializable(package="keras_tfm")
class EncoderBlock(keras.layers.Layer):
    """Self-attention and a feed-forward network, each wrapped in a residual connection and layer norm.

    Args:
        num_heads: number of attention heads.
        mlp_dim: hidden width of the feed-forward network.
        dropout: dropout rate on the attention output and inside the feed-forward network.
        attention_dropout: dropout rate on the attention weights.
        norm_first: pre-norm (True, default) or the paper's post-norm (False).
        layer_norm_epsilon: epsilon of the layer norms.
        activation: activation of the feed-forward network.
        drop_path: stochastic-depth rate of both residual branches.
        key_dim: size of each head; defaults to `dim // num_heads`.
        attention_scale: factor on the attention logits; None = `1/√key_dim` (see `MultiHeadAttention`).
        seed: seed of the dropouts.
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

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout=0.0,
        attention_dropout=0.0,
        norm_first=True,
        layer_norm_epsilon=1e-6,
        activation="gelu",
        drop_path=0.0,
        key_dim=None,
        attention_scale=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _checks.positive_int("num_heads", num_heads)
        _checks.positive_int("mlp_dim", mlp_dim)
        _checks.rate("dropout", dropout)
        _checks.rate("attention_dropout", attention_dropout)
        _checks.rate("drop_path", drop_path)
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = keras.activations.get(activation)
        self.drop_path = drop_path
        self.key_dim = key_dim
        self.attention_scale = attention_scale
        self.seed = seed
        self.supports_masking = True

        policy = self.dtype_policy
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="attention_norm"
        )
        self.attention = MultiHeadAttention(
            num_heads, key_dim=key_dim, scale=attention_scale, dropout=attention_dropout, seed=seed, dtype=policy,
            name="attention",
        )
        self.attention_output_dropout = keras.layers.Dropout(dropout, seed=seed, dtype=policy)
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="feed_forward_norm"
        )
        self.feed_forward = FeedForward(
            mlp_dim, activation=activation, dropout=dropout, seed=seed, dtype=policy, name="feed_forward"
        )
        self.drop_path_layer = DropPath(drop_path, seed=seed, dtype=policy)

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

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "activation": keras.activations.serialize(self.activation),
                "drop_path": self.drop_path,
                "key_dim": self.key_dim,
                "attention_scale": self.attention_scale,
                "seed": self.seed,
            }
        )
        return config
