"""The Transformer decoder block (Vaswani et al., 2017, section 3.1).

Three sublayers, each with a residual connection and layer norm (pre-norm by default, post-norm with
`norm_first=False`):

1. causal (masked) self-attention: position t sees positions 0..t of the target only, so the model can be
   trained on whole sequences at once (teacher forcing) and still generate one token at a time;
2. cross-attention: every target position queries the encoder output (`context`);
3. the position-wise feed-forward network.

For generation the block keeps a key/value cache: the keys and values of tokens already generated are
computed once and stored, so each new token costs one position's work instead of re-running the whole prefix.
"""

import keras

from keras_tfm.layers import _checks
from keras_tfm.layers._block import TransformerBlockBase, check_width


@keras.saving.register_keras_serializable(package="keras_tfm")
class DecoderBlock(TransformerBlockBase):
    """Causal self-attention, optional cross-attention over `context`, and a feed-forward network.

    Whether the block has cross-attention is decided by its first call (or `build`): called with a
    `context` it is an encoder-decoder block, without one a decoder-only (GPT-style) block, whose
    `cross_attention` and `cross_attention_norm` are None.

    Args:
        num_heads: number of attention heads (self- and cross-attention).
        mlp_dim: hidden width of the feed-forward network.
        dropout: dropout rate on the attention outputs and inside the feed-forward network.
        attention_dropout: dropout rate on the attention weights.
        activation_dropout: dropout rate after the feed-forward network's activation; None = `dropout`, 0.0 =
            none (BERT).
        norm_first: pre-norm (True, default) or the paper's post-norm (False).
        layer_norm_epsilon: epsilon of the layer norms.
        activation: activation of the feed-forward network.
        drop_path: stochastic-depth rate of the residual branches.
        key_dim: size of each head; defaults to `dim // num_heads`.
        attention_scale: factor on the attention logits; None = `1/√key_dim` (see `MultiHeadAttention`).
        seed: seed of the dropouts; each random sublayer gets its own seed derived from it.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        x: `(batch, target_len, dim)` target-side tokens.
        context: `(batch, source_len, context_dim)` encoder output, or None.
        mask, x_mask: `(batch, target_len)` padding mask of `x` (Keras fills one of them in from `x`'s implicit
            mask: `mask` when `x` is the only tensor argument, `x_mask` otherwise).
        context_mask: `(batch, source_len)` padding mask of `context`, filled in from its implicit mask.
        attention_mask: extra `(batch, target_len, key_len)` self-attention mask, True = may attend.
        use_causal_mask: block attention to later positions (default True).
        cache: the dict made by `build_cache` (keys `"self"` and, with cross-attention, `"cross"`), for
            incremental decoding; `x` then holds the new token(s) at positions `cache_index, ...`.
        cache_index: int or scalar int tensor, position of `x`'s first token; required with `cache`.
        return_attention_scores: also return the attention weights.
        training: whether dropout is active.

    Returns:
        `output` `(batch, target_len, dim)`; with `return_attention_scores=True` followed by the self-attention
        weights `(batch, heads, target_len, key_len)` and (with cross-attention) the cross-attention weights
        `(batch, heads, target_len, source_len)`; with `cache` followed by the updated cache. The padding mask of
        `x` passes through to the output.

    Example:

    >>> block = DecoderBlock(num_heads=4, mlp_dim=128)
    >>> target, source = np.zeros((2, 7, 32), "float32"), np.zeros((2, 9, 32), "float32")
    >>> y, self_scores, cross_scores = block(target, source, return_attention_scores=True)
    >>> tuple(y.shape), tuple(self_scores.shape), tuple(cross_scores.shape)
    ((2, 7, 32), (2, 4, 7, 7), (2, 4, 7, 9))
    """

    def __init__(self, num_heads, mlp_dim, **kwargs):
        super().__init__(num_heads, mlp_dim, **kwargs)
        self.has_cross_attention = False
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention = self._attention("self_attention")
        # Made by `build` when there is a context: a decoder-only block has none. (An unbuilt sublayer would make
        # Keras trace the whole model again at every `train_on_batch` on JAX and PyTorch, to build it.)
        self.cross_attention_norm = self.cross_attention = None
        self._cross_attention_seed = self._next_seed()  # its place in the order of seeds, kept
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward = self._feed_forward()
        self.attention_output_dropout = self._dropout()
        self.drop_path_layer = self._drop_path()

    def build(self, x_shape, context_shape=None):
        _checks.rank("x", x_shape, 3, "(batch, target_len, dim)")
        check_width(x_shape[-1], self.num_heads, self.key_dim)
        self.self_attention_norm.build(x_shape)
        self.self_attention.build(x_shape, x_shape)
        if context_shape is not None:
            _checks.rank("context", context_shape, 3, "(batch, source_len, dim)")
            self.has_cross_attention = True
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention = self._attention("cross_attention", seed=self._cross_attention_seed)
            self.cross_attention_norm.build(x_shape)
            self.cross_attention.build(x_shape, context_shape)
        self.feed_forward_norm.build(x_shape)
        self.feed_forward.build(x_shape)
        self.built = True

    def build_cache(self, batch_size, max_length, context=None):
        """Starts a key/value cache for generating up to `max_length` tokens.

        Args:
            batch_size: number of sequences generated together.
            max_length: number of positions the self-attention cache holds.
            context: `(batch_size, source_len, context_dim)` encoder output; required when the block has
                cross-attention (its keys and values are computed here, once).

        Returns:
            `{"self": (keys, values), "cross": (keys, values)}` (no `"cross"` for a decoder-only block).
        """
        if not self.built:
            raise ValueError(f"Call DecoderBlock '{self.name}' once (or build it) before `build_cache`.")
        cache = {"self": self.self_attention.empty_cache(batch_size, max_length)}
        if self.has_cross_attention:
            if context is None:
                raise ValueError(
                    f"DecoderBlock '{self.name}' has cross-attention: `build_cache` needs the encoder output as "
                    "`context`. Received: context=None"
                )
            cache["cross"] = self.cross_attention.precompute_cache(context)
        return cache

    def call(
        self,
        x,
        context=None,
        mask=None,
        x_mask=None,
        context_mask=None,
        attention_mask=None,
        use_causal_mask=True,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        _checks.rank("x", x.shape, 3, "(batch, target_len, dim)")
        padding = mask if mask is not None else x_mask  # (batch, target_len) or None
        if context is not None and not self.has_cross_attention:
            raise ValueError(
                f"DecoderBlock '{self.name}' was built without cross-attention (its first call had no "
                "`context`), so it cannot attend to a `context` now."
            )
        if cache is not None and cache_index is None:
            raise ValueError("`cache_index` (the position of the first token of `x`) is required with `cache`.")
        cross_cache = None if cache is None else cache.get("cross")
        if self.has_cross_attention and context is None and cross_cache is None:
            raise ValueError(
                f"DecoderBlock '{self.name}' has cross-attention and needs `context` (the encoder output), "
                "or a cache made by `build_cache(..., context=...)`. Received: context=None"
            )
        new_cache = {} if cache is not None else None
        scores = []

        def residual(x, branch_output, norm):
            x = x + self.drop_path_layer(branch_output, training=training)
            return x if self.norm_first else norm(x)

        # 1. Causal self-attention. With a cache the keys/values are the cache's slots.
        h = self.self_attention_norm(x) if self.norm_first else x
        attended = self.self_attention(
            h,
            h if cache is None else None,
            query_mask=padding,
            value_mask=padding if cache is None else None,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            return_attention_scores=return_attention_scores,
            cache=None if cache is None else cache["self"],
            cache_index=cache_index,
            training=training,
        )
        attended, extras = (attended[0], attended[1:]) if isinstance(attended, tuple) else (attended, ())
        if return_attention_scores:
            scores.append(extras[0])
        if cache is not None:
            new_cache["self"] = extras[-1]
        attended = self.attention_output_dropout(attended, training=training)
        x = residual(x, attended, self.self_attention_norm)

        # 2. Cross-attention over the encoder output (or its cached keys/values).
        if self.has_cross_attention:
            h = self.cross_attention_norm(x) if self.norm_first else x
            attended = self.cross_attention(
                h,
                context if cross_cache is None else None,
                query_mask=padding,
                value_mask=context_mask,
                return_attention_scores=return_attention_scores,
                cache=cross_cache,
                training=training,
            )
            attended, extras = (attended[0], attended[1:]) if isinstance(attended, tuple) else (attended, ())
            if return_attention_scores:
                scores.append(extras[0])
            if cache is not None:
                new_cache["cross"] = cross_cache
            attended = self.attention_output_dropout(attended, training=training)
            x = residual(x, attended, self.cross_attention_norm)

        # 3. Position-wise feed-forward network.
        h = self.feed_forward_norm(x) if self.norm_first else x
        x = residual(x, self.feed_forward(h, training=training), self.feed_forward_norm)

        outputs = (x,) + tuple(scores) + ((new_cache,) if cache is not None else ())
        return outputs if len(outputs) > 1 else x
