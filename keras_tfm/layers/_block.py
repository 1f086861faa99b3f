"""What the encoder and decoder blocks share: their arguments, the checks on them, the sublayer factories and
`get_config`. Each block file then shows only its own wiring (which sublayers, in which order)."""

import inspect

import keras

from keras_tfm.layers import _checks
from keras_tfm.layers.attention import MultiHeadAttention
from keras_tfm.layers.drop_path import DropPath
from keras_tfm.layers.dropout import Dropout
from keras_tfm.layers.feed_forward import FeedForward, get_activation, serialize_activation


def check_width(dim, num_heads, key_dim):
    """The block width must split evenly into heads unless the head size is given."""
    if key_dim is None and dim is not None and dim % num_heads:
        raise ValueError(
            f"`dim` ({dim}) must be divisible by `num_heads` ({num_heads}): each head gets dim / num_heads "
            "channels. Change the width or the number of heads, or pass `key_dim`."
        )


class TransformerBlockBase(keras.layers.Layer):
    """Base of `EncoderBlock` and `DecoderBlock`; see their docstrings for the arguments.

    Every random sublayer gets its own seed, derived from the block's `seed` (`seed + 2`, `seed + 4`, ... in
    the order the sublayers are made; a stride of 2 because `FeedForward` uses its seed and the next), so the dropout masks of the attention, the feed-forward network and the
    residual branches are independent draws, yet the whole block is reproducible from one number.
    """

    CONFIG = ("num_heads", "mlp_dim", "dropout", "attention_dropout", "norm_first", "layer_norm_epsilon",
              "activation", "drop_path", "key_dim", "attention_scale", "seed", "activation_dropout")

    def __init__(self, num_heads, mlp_dim, dropout=0.0, attention_dropout=0.0, norm_first=True,
                 layer_norm_epsilon=1e-6, activation="gelu", drop_path=0.0, key_dim=None, attention_scale=None,
                 seed=None, activation_dropout=None, **kwargs):
        # A subclass's own arguments (EncoderBlock's `locality`) are taken before this; name them in the hint too.
        own = set(inspect.signature(type(self).__init__).parameters) - {"self", "kwargs"}
        _checks.known_keywords(type(self), kwargs, _checks.layer_keywords() | own, signature_of=TransformerBlockBase)
        _checks.booleans(TransformerBlockBase, locals())
        super().__init__(**kwargs)
        _checks.positive_int("num_heads", num_heads)
        _checks.positive_int("mlp_dim", mlp_dim)
        _checks.rate("dropout", dropout)
        _checks.rate("attention_dropout", attention_dropout)
        if activation_dropout is not None:
            _checks.rate("activation_dropout", activation_dropout)
        _checks.rate("drop_path", drop_path)
        _checks.positive_int("key_dim", key_dim, allow_none=True)
        _checks.positive_number("attention_scale", attention_scale, allow_none=True)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"`seed` must be an int or None. Received: seed={seed!r}")
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = get_activation(activation)
        self.drop_path = drop_path
        self.key_dim = key_dim
        self.attention_scale = attention_scale
        self.seed = seed
        self.supports_masking = True
        self._seeds_used = 0

    def _next_seed(self):
        """A distinct seed for each random sublayer (None when the block has no seed)."""
        self._seeds_used += 1
        return None if self.seed is None else self.seed + 2 * self._seeds_used

    def _norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def _attention(self, name, locality=False, seed="next"):
        return MultiHeadAttention(
            self.num_heads, key_dim=self.key_dim, attention_scale=self.attention_scale, locality=locality,
            dropout=self.attention_dropout, seed=self._next_seed() if seed == "next" else seed,
            dtype=self.dtype_policy, name=name,
        )

    def _feed_forward(self):
        return FeedForward(self.mlp_dim, activation=self.activation, dropout=self.dropout,
                           activation_dropout=self.activation_dropout, seed=self._next_seed(),
                           dtype=self.dtype_policy, name="feed_forward")

    def _dropout(self):
        return Dropout(self.dropout, seed=self._next_seed(), dtype=self.dtype_policy)

    def _drop_path(self):
        return DropPath(self.drop_path, seed=self._next_seed(), dtype=self.dtype_policy)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.CONFIG})
        config["activation"] = serialize_activation(self.activation)
        return config
