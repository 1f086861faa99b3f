"""Token embedding plus positional encoding: the input layer of the 2017 Transformer (section 3.4-3.5)."""

import math
import warnings

import keras
from keras import ops

from keras_tfm import checks
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.layers.position_encoding import sinusoidal_encoding_at

POSITIONS = ("sinusoidal", "learned", None)
COMBINES = ("add", "concat")


@keras.saving.register_keras_serializable(package="keras_tfm")
class TokenEmbedding(keras.layers.Layer):
    """Looks up token vectors, scales them by √dim and adds a positional encoding.

    The paper multiplies the embeddings by √d_model (so that, with small initial weights, the token signal is
    not drowned by the unit-amplitude positional encoding) and adds the fixed sinusoidal encoding. "learned"
    uses a trainable table of `max_length` positions instead (BERT, GPT), and `None` adds nothing (a bag of
    tokens; see the experiments recipe for why that fails on order-dependent tasks).

    `combine="concat"` concatenates instead of adding: the first `dim - dim // 2` channels hold the (scaled)
    token vector, the last `dim // 2` the positional encoding, so the two never share a channel (the same
    width, a token table half as wide).

    Id 0 is padding (`padding_id`; RoBERTa pads with 1): with `mask_zero=True` the layer emits a Keras padding
    mask (True at real tokens), which every keras_tfm attention layer downstream uses to ignore padded keys.

    Args:
        vocab_size: number of token ids (ids must lie in `[0, vocab_size)`).
        dim: width of the embedding (`d_model`).
        max_length: longest sequence allowed. Required with `position="learned"` (it is the size of the
            table); optional otherwise, where it only guards against sequences longer than expected.
        position: `"sinusoidal"`, `"learned"` or `None`.
        combine: `"add"` (the paper) or `"concat"`: how token vectors and positions are combined.
        mask_zero: whether `padding_id` is padding and produces a mask.
        padding_id: the id of the padding token (0; RoBERTa's checkpoints use 1).
        position_offset: the row of the learned position table the first token reads (RoBERTa's checkpoints
            start at 2: rows 0 and 1 belong to padding); the table has `max_length + position_offset` rows.
        scale: whether to multiply the token vectors by the square root of their width (√dim when adding).
        dropout: dropout rate applied to the sum.
        embeddings_initializer: initializer of the token table.
        seed: seed of the dropout.
        check_ids: whether ids outside `[0, vocab_size)` raise an error naming the layer, also inside a compiled
            `fit` of a model of your own: an assertion in TensorFlow's graph (not under XLA, which drops it) and a
            host callback in JAX's training steps, 0.1 ms or less a step (docs/results.md). Without it an id that is
            too large is a TensorFlow gather error or a NaN loss on JAX. The ready models check their data before
            the step and compile no check in. False turns it off.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: int tensor `(batch, length)` of token ids.
        start_position: position of the first token (int or scalar int tensor), for one-token-at-a-time
            decoding: the token generated at step `t` is embedded with `start_position=t`.
        reverse: if True, `inputs` are vectors `(batch, length, dim)` and the layer returns logits
            `x @ embeddingsᵀ` of shape `(batch, length, vocab_size)`: an output projection that shares the
            token table (weight tying). With `combine="concat"` only the token channels of `x` are used.
        training: whether dropout is active.

    Returns:
        `(batch, length, dim)` in the compute dtype, with a `(batch, length)` mask when `mask_zero`.

    Example:

    >>> embed = TokenEmbedding(vocab_size=100, dim=32, max_length=64)
    >>> ids = np.array([[5, 7, 9, 0, 0]])
    >>> x = embed(ids)
    >>> tuple(x.shape), embed.compute_mask(ids).tolist()  # doctest: +SKIP
    ((1, 5, 32), [[True, True, True, False, False]])
    """

    def __init__(
        self,
        vocab_size,
        dim,
        max_length=None,
        position="sinusoidal",
        combine="add",
        mask_zero=True,
        scale=True,
        dropout=0.0,
        embeddings_initializer="uniform",
        seed=None,
        padding_id=0,
        position_offset=0,
        check_ids=True,
        **kwargs,
    ):
        _checks.known_keywords(TokenEmbedding, kwargs, _checks.layer_keywords())
        _checks.booleans(TokenEmbedding, locals())
        super().__init__(**kwargs)
        _checks.positive_int("vocab_size", vocab_size)
        _checks.positive_int("dim", dim)
        _checks.positive_int("max_length", max_length, allow_none=True)
        _checks.one_of("position", position, POSITIONS)
        _checks.one_of("combine", combine, COMBINES)
        _checks.rate("dropout", dropout)
        concat = combine == "concat" and position is not None
        # Widths: positions get all `dim` channels when added, the last `dim // 2` when concatenated.
        self.position_dim = dim // 2 if concat else dim
        self.token_dim = dim - self.position_dim if concat else dim
        if position == "sinusoidal" and self.position_dim % 2:
            raise ValueError(
                f"The sinusoidal encoding needs an even width: dim={dim} gives {self.position_dim} position "
                f"channels with combine={combine!r}. Use a dim divisible by {4 if concat else 2}."
            )
        if position == "learned" and max_length is None:
            raise ValueError(
                "`max_length` is required with position='learned' (it is the size of the position table). "
                "Received: max_length=None"
            )
        self.vocab_size = vocab_size
        self.dim = dim
        self.max_length = max_length
        self.position = position
        self.combine = combine
        self.mask_zero = mask_zero
        self.scale = scale
        self.dropout = dropout
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.seed = seed
        if isinstance(padding_id, bool) or not isinstance(padding_id, int) or not 0 <= padding_id < vocab_size:
            raise ValueError(f"`padding_id` must be an int in [0, vocab_size) = [0, {vocab_size}). "
                             f"Received: padding_id={padding_id!r}")
        if isinstance(position_offset, bool) or not isinstance(position_offset, int) or position_offset < 0:
            raise ValueError(f"`position_offset` must be a non-negative int. Received: position_offset={position_offset!r}")
        self.padding_id = padding_id
        self.position_offset = position_offset
        self.check_ids = check_ids
        self.supports_masking = True
        self.token_embedding = keras.layers.Embedding(
            vocab_size,
            self.token_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.dropout_layer = Dropout(dropout, seed=seed, dtype=self.dtype_policy)

    def build(self, inputs_shape):
        _checks.rank("inputs", inputs_shape, 2, "(batch, length) of token ids")
        self.token_embedding.build(inputs_shape)
        if self.position == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_length + self.position_offset, self.position_dim),
                initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            )
        self.built = True

    @property
    def embeddings(self):
        """The `(vocab_size, token_dim)` token table (e.g. for tying the output projection to it)."""
        return self.token_embedding.embeddings

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, keras.KerasTensor) and not kwargs.get("reverse", False):
            dtype = keras.backend.standardize_dtype(inputs.dtype)
            if "float" in dtype:
                # A symbolic float input (keras.Input's default, and what `keras.Sequential` makes when it has
                # no Input): inside `fit` its values are never seen, and the lookup casts 5.7 to 5 at every step.
                # Not an error: Keras' own Embedding takes float inputs, and Sequential models rely on it.
                warnings.warn(
                    f"{self.name!r} is called on a symbolic {dtype} input: non-integer token ids fed to it would "
                    "be truncated unseen inside `fit`. Give the model an integer input, e.g. "
                    "keras.Input((None,), dtype='int32') (first in a keras.Sequential).", UserWarning, stacklevel=2)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, start_position=0, reverse=False, training=None):
        if reverse:
            # Output projection tied to the token table (Press & Wolf, 2017; the paper shares it too):
            # logits = x Eᵀ, (batch, length, dim) -> (batch, length, vocab_size).
            _checks.rank("inputs", inputs.shape, 3, "(batch, length, dim) with reverse=True")
            tokens = inputs[..., : self.token_dim]  # all channels, unless positions were concatenated
            return ops.matmul(tokens, ops.transpose(ops.cast(self.embeddings, inputs.dtype)))
        _checks.rank("inputs", inputs.shape, 2, "(batch, length) of token ids")
        inputs = self._check_ids(inputs, training)
        length = None if _checks.is_shape_placeholder(inputs) else _checks.static(inputs.shape[1])
        if self.max_length is not None and length is not None and isinstance(start_position, int):
            if start_position + length > self.max_length:
                raise ValueError(
                    f"The sequence is longer than `max_length` ({self.max_length}): received length {length} "
                    f"starting at position {start_position}. Truncate the input or build with a larger max_length."
                )
        x = self.token_embedding(inputs)  # (batch, length, token_dim)
        if self.scale:
            x = x * ops.cast(math.sqrt(self.token_dim), x.dtype)
        if self.position is not None:
            positions = ops.arange(ops.shape(inputs)[1], dtype="int32") + ops.cast(start_position, "int32")
            if self.position == "sinusoidal":
                encoding = sinusoidal_encoding_at(positions, self.position_dim, dtype=x.dtype)  # (length, width)
            else:
                rows = positions + self.position_offset
                encoding = ops.cast(ops.take(self.position_embeddings, rows, axis=0), x.dtype)
            if self.token_dim == self.dim:
                x = x + encoding[None, :, :]
            else:  # concatenate: (batch, length, token_dim) ++ (batch, length, position_dim)
                encoding = ops.broadcast_to(encoding[None, :, :], (ops.shape(x)[0], ops.shape(x)[1], self.position_dim))
                x = ops.concatenate([x, encoding], axis=-1)
        return self.dropout_layer(x, training=training)

    def _check_ids(self, ids, training=None):
        """Out-of-range and non-integer ids raise a ValueError when their values are known (eager calls). Inside a
        compiled step the range is checked where the backend allows (`checks.token_ids_in_step`); the ready
        models check their data before the step instead, and switch this off for their own loops. Returns the
        ids to look up."""
        if not self.check_ids:
            return ids
        values = checks.concrete_value(ids)
        if values is not None:
            checks.token_ids("inputs", values, self.vocab_size)
            return ids
        return checks.token_ids_in_step("inputs", ids, self.vocab_size, self.name, training=training)

    def compute_mask(self, inputs, mask=None):
        if len(inputs.shape) == 3:  # reverse=True: vectors in, logits out; their mask passes through
            return mask
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, self.padding_id)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "dim": self.dim,
                "max_length": self.max_length,
                "position": self.position,
                "combine": self.combine,
                "mask_zero": self.mask_zero,
                "scale": self.scale,
                "dropout": self.dropout,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
                "seed": self.seed,
                "padding_id": self.padding_id,
                "position_offset": self.position_offset,
                "check_ids": self.check_ids,
            }
        )
        return config
