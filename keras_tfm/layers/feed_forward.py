"""The position-wise feed-forward network (Vaswani et al., 2017, section 3.3): FFN(x) = W₂ act(W₁ x + b₁) + b₂.

Attention mixes information *between* positions; this two-layer MLP then transforms each position on its
own (the same weights at every position), widening to `mlp_dim` (4 × d_model in the paper) and back.
"""

import keras

from keras import ops

from keras_tfm.layers import _checks
from keras_tfm.layers._utils import clone_initializer
from keras_tfm.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_tfm")
def gelu_tanh(x):
    """GELU with the tanh approximation, `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`: the activation of GPT-2 and
    of checkpoints whose config says `"gelu_new"` / `"gelu_pytorch_tanh"`. Keras' `"gelu"` is the exact one (BERT)."""
    return ops.gelu(x, approximate=True)


_OWN_ACTIVATIONS = {"gelu_tanh": gelu_tanh}


def get_activation(identifier):
    """`keras.activations.get`, plus the name `"gelu_tanh"`."""
    if isinstance(identifier, str) and identifier in _OWN_ACTIVATIONS:
        return _OWN_ACTIVATIONS[identifier]
    return keras.activations.get(identifier)


def serialize_activation(activation):
    """The name `get_activation` reads back."""
    for name, function in _OWN_ACTIVATIONS.items():
        if activation is function:
            return name
    return keras.activations.serialize(activation)


@keras.saving.register_keras_serializable(package="keras_tfm")
class FeedForward(keras.layers.Layer):
    """Two dense layers with an activation and dropout between them, applied to every position alike.

    Args:
        mlp_dim: width of the hidden layer (`d_ff`); the same name as in the blocks and models (the old name
            `hidden_dim` still works, with a FutureWarning, for one release).
        activation: activation of the hidden layer (`"gelu"` as in ViT/BERT; the paper used `"relu"`;
            `"gelu_tanh"` for the tanh approximation of GELU).
        dropout: dropout rate after the output projection, and after the activation unless
            `activation_dropout` is given.
        activation_dropout: dropout rate after the activation, inside the network; None = `dropout` (ViT and
            timm's MLP drop there too); 0.0 = none (BERT and keras-hub's `TransformerEncoder` drop only after the
            output projection; a fine-tune of a BERT checkpoint matches its reference this way).
        output_dim: width of the output; defaults to the input width.
        kernel_initializer: initializer of both kernels.
        seed: seed of the dropouts.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        x: `(batch, ..., dim)`.
        training: whether dropout is active.

    Returns:
        `(batch, ..., output_dim or dim)`. A mask on `x` passes through unchanged.

    Example:

    >>> ffn = FeedForward(mlp_dim=128)
    >>> tuple(ffn(np.zeros((2, 10, 32), "float32")).shape)
    (2, 10, 32)
    """

    def __init__(
        self,
        mlp_dim=None,
        activation="gelu",
        dropout=0.0,
        activation_dropout=None,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        seed=None,
        **kwargs,
    ):
        mlp_dim = _checks.renamed("FeedForward", kwargs, "hidden_dim", "mlp_dim", mlp_dim)
        _checks.known_keywords(FeedForward, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        _checks.positive_int("mlp_dim", mlp_dim)
        _checks.positive_int("output_dim", output_dim, allow_none=True)
        _checks.rate("dropout", dropout)
        if activation_dropout is not None:
            _checks.rate("activation_dropout", activation_dropout)
        self.mlp_dim = mlp_dim
        self.activation = get_activation(activation)
        self.dropout = dropout
        self.activation_dropout = activation_dropout
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.seed = seed
        self.supports_masking = True
        self.hidden = keras.layers.Dense(
            mlp_dim,
            activation=self.activation,
            kernel_initializer=clone_initializer(kernel_initializer),
            dtype=self.dtype_policy,
            name="hidden",
        )
        self.hidden_dropout = Dropout(dropout if activation_dropout is None else activation_dropout, seed=seed,
                                      dtype=self.dtype_policy)
        self.output_dropout = Dropout(
            dropout, seed=None if seed is None else seed + 1, dtype=self.dtype_policy
        )

    def build(self, x_shape):
        self.hidden.build(x_shape)
        self.output_projection = keras.layers.Dense(
            self.output_dim or x_shape[-1],
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_projection.build(tuple(x_shape[:-1]) + (self.mlp_dim,))
        self.built = True

    def call(self, x, training=None):
        h = self.hidden(x)  # (batch, ..., mlp_dim)
        h = self.hidden_dropout(h, training=training)
        y = self.output_projection(h)  # (batch, ..., output_dim)
        return self.output_dropout(y, training=training)

    def compute_output_shape(self, x_shape):
        return tuple(x_shape[:-1]) + (self.output_dim or x_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mlp_dim": self.mlp_dim,
                "activation": serialize_activation(self.activation),
                "dropout": self.dropout,
                "activation_dropout": self.activation_dropout,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "seed": self.seed,
            }
        )
        return config
