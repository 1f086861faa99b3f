"""Multi-head attention, written out so it can be read (Vaswani et al., 2017, section 3.2).

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V
    MultiHead(X_q, X_kv) = Concat(head_1, ..., head_h) W_O,   head_i = Attention(X_q W_Q_i, X_kv W_K_i, X_kv W_V_i)

Each query scores every key with a dot product; dividing by √d_k keeps the logits' variance near 1 whatever
the head size, so the softmax does not saturate; the softmax turns the scores into weights that sum to 1 over
the keys; the output is the weighted average of the values. `h` heads do this in parallel in `d_k`-sized
subspaces and their results are concatenated and mixed by W_O.

Locality self-attention (LSA; Lee et al., 2021, "Vision Transformer for Small-Size Datasets", section 3.2) is
two changes that sharpen the attention of a ViT trained on little data: the logit scale becomes a trained
weight (a learnable temperature, initialised at `1/√d_k`), and each token is blocked from attending to itself
(diagonal masking), so the weights go to the *other* tokens instead of mostly to the token's own key.
"""

import math

import keras
from keras import ops

from keras_tfm.layers import _checks
from keras_tfm.layers._utils import clone_initializer
from keras_tfm.layers.dropout import Dropout
from keras_tfm.layers.masking import causal_mask, same_position

# Logits of blocked keys are replaced by this (in float32) before the softmax. It is finite, so a query
# whose keys are *all* blocked gets a uniform (finite) distribution instead of 0/0 = NaN, which is also what
# `keras.layers.MultiHeadAttention` and `keras.ops.dot_product_attention` do.
_BLOCKED_LOGIT = -0.7 * 3.4028235e38


def _fused_kernel_options(mask, key):
    """Extra arguments of `ops.dot_product_attention`. On JAX a masked call whose key length is not a multiple of 8
    (a [CLS] token added to 256 tokens: 257) stays off cuDNN's fused kernel, which can refuse such shapes when XLA
    compiles the step, after Keras' own fallback had its chance; XLA's attention runs instead."""
    length = _checks.static(key.shape[1])
    if keras.backend.backend() == "jax" and mask is not None and (length is None or length % 8):
        return {"flash_attention": False}
    return {}


class _HeadProjection(keras.layers.EinsumDense):
    """An `EinsumDense` whose product is a `tensordot` on TensorFlow: the last `contracted` axes of the input with
    the first `contracted` axes of the kernel (`abc,cde->abde` splits a width into heads, `abcd,cde->abe` merges
    them back).

    It computes what `EinsumDense` computes and keeps its weights, LoRA (`self.kernel` includes the update) and
    quantization (Keras runs `quantized_call` then, not `call`). Only TensorFlow's product differs: its `einsum`
    lowers these equations to a batched matrix product that broadcasts the kernel over the batch, 2.7x the time of
    the plain matrix product `tensordot` is forward and 4x for the kernel's gradient (2 CPU cores; a ViT-S/14
    training step: 8.3 s -> 7.0 s). On PyTorch the two take the same time and on JAX the `einsum` is faster, so
    they keep it.
    """

    def __init__(self, equation, contracted, **kwargs):
        super().__init__(equation, **kwargs)
        self.contracted = contracted

    def call(self, inputs, training=None):
        if keras.backend.backend() != "tensorflow":
            return super().call(inputs, training=training)
        outputs = ops.tensordot(inputs, ops.cast(self.kernel, inputs.dtype), axes=self.contracted)
        return outputs if self.bias is None else ops.add(outputs, ops.cast(self.bias, outputs.dtype))

    def quantize(self, mode=None, **kwargs):
        # Keras quantizes EinsumDense itself but not its subclasses, which might compute something else
        # (`model.quantize` would skip these with a warning); this one computes EinsumDense's product.
        return super().quantize(mode, **{**kwargs, "type_check": False})

    def get_config(self):
        return {**super().get_config(), "contracted": self.contracted}


@keras.saving.register_keras_serializable(package="keras_tfm")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention with Keras masks and a key/value cache.

    Drop-in compatible with `keras.layers.MultiHeadAttention` for 3D inputs: the weights have the same order
    and shapes (query, key, value, output projections; kernel then bias), so
    `ours.set_weights(keras_mha.get_weights())` ports a trained Keras layer, and the same call with the same
    masks gives the same output.

    Two code paths compute the same thing. When attention weights are not requested (and attention dropout
    is off, and the value heads are as wide as the key heads), the fused `keras.ops.dot_product_attention` runs (cuDNN/flash kernels where the backend has
    them). When `return_attention_scores=True` (or attention dropout is active in training), the explicit
    path below computes `softmax(QKᵀ/√d_k)` itself and returns the weights. A causal mask with no other mask
    reaches the fused kernel as `is_causal=True` (PyTorch's flash attention and JAX's cuDNN causal mode stay on),
    not as a dense mask.

    Args:
        num_heads: number of attention heads `h`.
        key_dim: size of each query/key head `d_k`. Defaults to `query_dim // num_heads`, in which case the
            query width must be divisible by `num_heads`.
        value_dim: size of each value head `d_v`. Defaults to `key_dim`.
        dropout: dropout rate on the attention weights.
        use_bias: whether the four projections have biases.
        output_dim: width of the output. Defaults to the query width.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        seed: seed of the attention dropout.
        attention_scale: factor applied to the logits `QKᵀ`. None (default) is the paper's `1/√d_k`, which keeps
            the logits' variance near 1 whatever the head size; `attention_scale=1.0` switches the scaling off (an
            ablation: `python -m recipes.experiments scaling`). The same name as in `EncoderBlock`/`DecoderBlock`;
            the old name `scale` still works, with a FutureWarning, for one release.
        locality: locality self-attention (LSA, Lee et al. 2021): the logit scale is a trained scalar weight
            `locality_scale`, initialised at `attention_scale` (or `1/√d_k`), and query `i` is blocked from key
            `i` (key `cache_index + i` with a cache). Meant for self-attention; it cannot be combined with
            `use_causal_mask` (the first token would have no key left).
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, query_len, query_dim)`.
        value: `(batch, key_len, value_dim_in)`; defaults to `query` (self-attention).
        key: `(batch, key_len, key_dim_in)`; defaults to `value`.
        query_mask, value_mask, key_mask: `(batch, query_len)` / `(batch, key_len)` padding masks, True at
            real tokens. Keras fills them in from the inputs' implicit masks (e.g. an `Embedding` or
            `TokenEmbedding` with `mask_zero=True`). Padded keys get zero weight. Padded queries are not
            blocked (unlike `keras.layers.MultiHeadAttention`, which gives them uniform weights): they attend
            to the real keys like any query, so every row of the weights is a distribution over allowed keys;
            the query's implicit mask is passed on to the output.
        attention_mask: `(batch, query_len, key_len)`, True (1) where query `i` may attend to key `j`.
            Use `attention_mask_from_torch` for PyTorch-style masks (True = blocked).
        use_causal_mask: whether query `i` is blocked from keys after it (decoder self-attention).
        return_attention_scores: also return the `(batch, num_heads, query_len, key_len)` attention weights.
        training: whether attention dropout is active.
        cache: optional key/value cache for incremental decoding, a tuple `(key_cache, value_cache)` of
            shapes `(batch, cache_len, num_heads, key_dim)` and `(batch, cache_len, num_heads, value_dim)`.
            With `cache_index=None` the cache is used as is (cross-attention over a fixed encoder output; build
            it with `precompute_cache`). With an integer `cache_index` the projections of `value`/`key`
            (default: `query`) are written into the cache at `cache_index` before attending over all of it
            (self-attention; start from `empty_cache`). Masks on keys then refer to the `cache_len` slots;
            with `use_causal_mask=True` query `i` sees slots `0 .. cache_index + i`.
        cache_index: int or scalar int tensor; see `cache`.

    Returns:
        `output` of shape `(batch, query_len, output_dim)`, followed, as a tuple, by the attention weights when
        `return_attention_scores=True` and by the updated cache when `cache` is given:
        `output`, `(output, scores)`, `(output, cache)` or `(output, scores, cache)`.

    A query whose keys are all masked (an all-padding sample) gets uniform weights and a finite output.

    Attributes:
        score_recorder: None, or a callable `(layer, weights)` that the explicit path calls with the
            `(batch, heads, query_len, key_len)` attention weights of every call while it is set (and the
            explicit path is then used even when the weights are not returned). `keras_tfm.attention_maps` sets
            it for one forward pass to read the weights of layers nested anywhere in a model; set it yourself to
            log or probe attention without changing the model's outputs.

    Example:

    >>> mha = MultiHeadAttention(num_heads=4)
    >>> x = np.random.rand(2, 10, 32).astype("float32")
    >>> y, scores = mha(x, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 10, 32), (2, 4, 10, 10))
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        attention_scale=None,
        locality=False,
        **kwargs,
    ):
        attention_scale = _checks.renamed("MultiHeadAttention", kwargs, "scale", "attention_scale", attention_scale)
        _checks.known_keywords(MultiHeadAttention, kwargs, _checks.layer_keywords())
        _checks.booleans(MultiHeadAttention, locals())
        super().__init__(**kwargs)
        _checks.positive_int("num_heads", num_heads)
        _checks.positive_number("attention_scale", attention_scale, allow_none=True)
        _checks.positive_int("key_dim", key_dim, allow_none=True)
        _checks.positive_int("value_dim", value_dim, allow_none=True)
        _checks.positive_int("output_dim", output_dim, allow_none=True)
        _checks.rate("dropout", dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.attention_scale = attention_scale
        self.locality = bool(locality)
        self.supports_masking = True
        self.attention_dropout = Dropout(dropout, seed=seed, dtype=self.dtype_policy)
        # A hook, part of the layer's API (see "Attributes" above): `keras_tfm.attention_maps` sets it for one call.
        self.score_recorder = None

    def __call__(self, query, value=None, key=None, **kwargs):
        # Self-attention: pass `value` explicitly so that Keras fills in both `query_mask` and `value_mask`
        # from the input's implicit padding mask. With a cache, the keys live in the cache instead.
        if value is None and kwargs.get("cache") is None:
            value = query
        return super().__call__(query, value, key, **kwargs)

    def _projection(self, equation, contracted, output_shape, bias_axes, name):
        projection = _HeadProjection(
            equation,
            contracted,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        # A per-position projection keeps a padding mask valid; saying so lets Keras carry it through
        # instead of warning that the mask is destroyed.
        projection.supports_masking = True
        return projection

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            _checks.rank(name, shape, 3, "(batch, length, dim)")
        query_width = query_shape[-1]
        if self.key_dim is None and query_width % self.num_heads:
            raise ValueError(
                f"The query width ({query_width}) must be divisible by `num_heads` ({self.num_heads}) when "
                "`key_dim` is not given. Pass `key_dim` explicitly or change the width or the number of heads."
            )
        # The sizes actually used; the constructor arguments stay as given (and are what get_config returns).
        self.head_key_dim = self.key_dim or query_width // self.num_heads
        self.head_value_dim = self.value_dim or self.head_key_dim
        heads = self.num_heads
        # Same names, order and shapes as keras.layers.MultiHeadAttention, so weights can be swapped.
        self.query_dense = self._projection("abc,cde->abde", 1, (None, heads, self.head_key_dim), "de", "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._projection("abc,cde->abde", 1, (None, heads, self.head_key_dim), "de", "key")
        self.key_dense.build(key_shape)
        self.value_dense = self._projection("abc,cde->abde", 1, (None, heads, self.head_value_dim), "de", "value")
        self.value_dense.build(value_shape)
        self.output_dense = self._projection(
            "abcd,cde->abe", 2, (None, self.output_dim or query_width), "e", "attention_output"
        )
        self.output_dense.build((None, None, heads, self.head_value_dim))
        if self.locality:
            # A layer's own weights come before its sublayers': this one is first in `weights`, then the four
            # projections in keras.layers.MultiHeadAttention's order.
            self.locality_scale = self.add_weight(
                name="locality_scale", shape=(), initializer=keras.initializers.Constant(self._initial_scale()),
            )
        self.built = True

    # ------------------------------------------------------------------------------------------------------
    # Caches for incremental decoding.

    def empty_cache(self, batch_size, length):
        """A zero-filled self-attention cache with room for `length` positions.

        Returns:
            `(key_cache, value_cache)` of shapes `(batch_size, length, num_heads, key_dim)` and
            `(batch_size, length, num_heads, value_dim)`, in the layer's compute dtype.
        """
        self._check_built("empty_cache")
        dtype = self.compute_dtype
        return (
            ops.zeros((batch_size, length, self.num_heads, self.head_key_dim), dtype=dtype),
            ops.zeros((batch_size, length, self.num_heads, self.head_value_dim), dtype=dtype),
        )

    def precompute_cache(self, value, key=None):
        """Projects a fixed `value`/`key` sequence once (cross-attention over an encoder output).

        Returns:
            `(key_cache, value_cache)` of shapes `(batch, key_len, num_heads, key_dim)` and
            `(batch, key_len, num_heads, value_dim)`; pass it as `cache` with `cache_index=None`.
        """
        self._check_built("precompute_cache")
        key = value if key is None else key
        return self.key_dense(key), self.value_dense(value)

    def _check_built(self, method):
        if not self.built:
            raise ValueError(
                f"`{method}` needs the layer's sizes: call the layer once (or `build` it) first. "
                f"Layer '{self.name}' is not built yet."
            )

    # ------------------------------------------------------------------------------------------------------

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_index=None,
    ):
        _checks.rank("query", query.shape, 3, "(batch, length, dim)")
        query_heads = self.query_dense(query)  # (batch, query_len, heads, key_dim)
        causal_offset = 0
        value = query if value is None else value
        key = value if key is None else key
        if cache is None:
            key_heads = self.key_dense(key)  # (batch, key_len, heads, key_dim)
            value_heads = self.value_dense(value)  # (batch, key_len, heads, value_dim)
        elif cache_index is None:
            key_heads, value_heads = cache  # fixed keys/values, e.g. the encoder output
        else:
            key_cache, value_cache = cache
            start = [0, cache_index, 0, 0]
            key_heads = ops.slice_update(key_cache, start, ops.cast(self.key_dense(key), key_cache.dtype))
            value_heads = ops.slice_update(value_cache, start, ops.cast(self.value_dense(value), value_cache.dtype))
            cache = (key_heads, value_heads)  # (batch, cache_len, heads, dim) each
            causal_offset = cache_index

        if self.locality and use_causal_mask:
            raise ValueError(
                "`locality=True` blocks each token from attending to itself; with `use_causal_mask=True` the first "
                f"token would have no key left. Use one of the two. Layer '{self.name}'."
            )
        attention_dropout_active = bool(training) and self.dropout > 0
        # The fused kernel wants one head size for queries, keys and values (JAX's rejects value_dim != key_dim).
        # A subclass that overrides `compute_attention` always gets it called: the fused kernels compute the paper's.
        overridden = type(self).compute_attention is not MultiHeadAttention.compute_attention
        fused = self.head_value_dim == self.head_key_dim and not overridden and not (
            return_attention_scores or attention_dropout_active or self.score_recorder is not None or self.locality
        )
        # A causal mask and nothing else: the backends' causal kernels (flash attention on PyTorch, cuDNN's causal
        # mode on JAX) are told `is_causal=True` instead of getting a dense mask, which turns them off.
        causal_kernel = (fused and use_causal_mask and cache is None and attention_mask is None
                         and value_mask is None and key_mask is None)
        mask = self._attention_mask(
            query_heads, key_heads, query_mask, value_mask, key_mask, attention_mask,
            use_causal_mask and not causal_kernel, causal_offset,
        )  # (batch, query_len, key_len) or None
        if self.locality:
            # Diagonal masking: query i does not see key i (the key at its own position).
            lengths = ops.shape(query_heads)[1], ops.shape(key_heads)[1]
            off_diagonal = ops.logical_not(same_position(*lengths, causal_offset))[None]  # (1, query_len, key_len)
            full = (ops.shape(query_heads)[0],) + lengths
            mask = ops.broadcast_to(off_diagonal, full) if mask is None else ops.logical_and(mask, off_diagonal)
        if not fused:
            attended, scores = self.compute_attention(query_heads, key_heads, value_heads, mask, training)
            if self.score_recorder is not None:
                self.score_recorder(self, scores)
        else:
            # Scaling the queries first (rather than the logits after Q·Kᵀ) keeps the float16 products in
            # range: they are then already the final logits.
            scaled_query = query_heads * ops.cast(self.logit_scale, query_heads.dtype)
            if mask is not None:
                # A query with no allowed key gets uniform weights, as on the explicit path. Backends differ
                # here (an additive -large mask cancels in the softmax on PyTorch), so say it explicitly: such a
                # row attends everywhere with a zero query, i.e. with equal logits.
                has_key = ops.any(mask, axis=-1)  # (batch, query_len)
                scaled_query = ops.where(has_key[:, :, None, None], scaled_query, ops.zeros_like(scaled_query))
                mask = ops.logical_or(mask, ops.logical_not(has_key)[:, :, None])
            attended = ops.dot_product_attention(
                scaled_query,
                key_heads,
                value_heads,
                mask=None if mask is None else mask[:, None, :, :],  # (batch, 1, query_len, key_len)
                scale=1.0,
                is_causal=causal_kernel,
                **_fused_kernel_options(mask, key_heads),
            )  # (batch, query_len, heads, value_dim)
            scores = None
        output = self.output_dense(attended)  # (batch, query_len, output_dim)

        extras = ((scores,) if return_attention_scores else ()) + ((cache,) if cache is not None else ())
        return (output,) + extras if extras else output

    def _initial_scale(self):
        return 1.0 / math.sqrt(self.head_key_dim) if self.attention_scale is None else float(self.attention_scale)

    @property
    def logit_scale(self):
        """The factor on `QKᵀ`: `attention_scale`, or `1/√d_k` (the paper); the trained `locality_scale` weight
        with `locality=True`."""
        return ops.cast(self.locality_scale, "float32") if self.locality else self._initial_scale()

    def compute_attention(self, query, key, value, mask=None, training=None):
        """The explicit scaled dot-product attention; subclasses may override it (a layer whose class does is never
        sent down the fused kernels' path, so the override is what runs).

        Args:
            query: `(batch, query_len, heads, key_dim)`.
            key: `(batch, key_len, heads, key_dim)`.
            value: `(batch, key_len, heads, value_dim)`.
            mask: boolean `(batch, query_len, key_len)` or None; True = may attend.
            training: whether attention dropout is active.

        Returns:
            `(output, weights)`: `(batch, query_len, heads, value_dim)` and `(batch, heads, query_len, key_len)`.
        """
        # Logits and softmax in float32: under mixed_float16 the products can exceed float16's range, and the
        # blocked-key logit must be representable.
        logits = ops.einsum("bqhd,bkhd->bhqk", ops.cast(query, "float32"), ops.cast(key, "float32"))
        logits = logits * self.logit_scale  # (batch, heads, query_len, key_len)
        if mask is not None:
            logits = ops.where(mask[:, None, :, :], logits, _BLOCKED_LOGIT)
        weights = ops.cast(ops.softmax(logits, axis=-1), value.dtype)  # rows sum to 1 over the keys
        dropped = self.attention_dropout(weights, training=training)
        output = ops.einsum("bhqk,bkhd->bqhd", dropped, value)  # (batch, query_len, heads, value_dim)
        return output, weights

    def _attention_mask(self, query, key, query_mask, value_mask, key_mask, attention_mask, causal, offset):
        """Combines every source of masking into one boolean `(batch, query_len, key_len)` mask (or None)."""
        query_len, key_len = query.shape[1], key.shape[1]
        mask = None

        def combine(mask, extra):
            extra = ops.cast(extra, "bool")
            return extra if mask is None else ops.logical_and(mask, extra)

        if query_mask is not None:
            # Checked but not applied: a padded *query* still attends to the real keys, so every row of the
            # weights is a proper distribution over allowed keys (its output is ignored downstream anyway).
            _checks.mask_shape("query_mask", query_mask, (None, query_len), "(batch, query_len)")
        for name, padding in (("value_mask", value_mask), ("key_mask", key_mask)):
            if padding is not None:
                _checks.mask_shape(name, padding, (None, key_len), "(batch, key_len)")
                mask = combine(mask, padding[:, None, :])  # (batch, 1, key_len)
        if attention_mask is not None:
            _checks.mask_shape(
                "attention_mask", attention_mask, (None, query_len, key_len), "(batch, query_len, key_len)"
            )
            mask = combine(mask, attention_mask)
        if causal:
            lower = causal_mask(ops.shape(query)[1], ops.shape(key)[1], offset)  # (query_len, key_len)
            mask = combine(mask, lower[None, :, :])
        if mask is None:
            return None
        # Broadcast the (batch, query_len, 1)-style pieces to the full (batch, query_len, key_len).
        full = (ops.shape(query)[0], ops.shape(query)[1], ops.shape(key)[1])
        return ops.broadcast_to(mask, full)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
                "attention_scale": self.attention_scale,
                "locality": self.locality,
            }
        )
        return config
