import math

import keras
import numpy as np
import pytest

from keras_tfm.layers import MultiHeadAttention, attention_mask_from_torch
from tests.helpers import assert_close, random_floats, to_numpy

BATCH, QUERY_LEN, KEY_LEN, DIM, HEADS = 2, 5, 7, 16, 4


def ported_pair(query_dim=DIM, value_dim_in=DIM, key_dim=None, **kwargs):
    """Our layer and keras.layers.MultiHeadAttention with the same weights (copied from Keras into ours)."""
    ref = keras.layers.MultiHeadAttention(HEADS, key_dim or query_dim // HEADS, **kwargs)
    ref(random_floats(1, 3, query_dim), random_floats(1, 4, value_dim_in))
    ours = MultiHeadAttention(HEADS, key_dim=key_dim, **kwargs)
    ours(random_floats(1, 3, query_dim), random_floats(1, 4, value_dim_in))
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in ref.weights]
    ours.set_weights(ref.get_weights())
    return ours, ref


def padding(lengths, length):
    return np.arange(length)[None, :] < np.array(lengths)[:, None]


def test_weights_have_keras_names_order_and_shapes():
    ours, ref = ported_pair()
    assert [w.path.split("/")[-2:] for w in ours.weights] == [w.path.split("/")[-2:] for w in ref.weights]


@pytest.mark.parametrize("mode", ["plain", "lora", "int8"])
def test_projections_compute_what_einsum_dense_computes(mode):
    """The projections' own product (a tensordot on TensorFlow) against Keras' EinsumDense with the same weights,
    also with a LoRA update and after int8 quantization."""
    layer = MultiHeadAttention(HEADS)
    query = random_floats(BATCH, QUERY_LEN, DIM)
    layer(query)
    for projection, inputs in ((layer.query_dense, query), (layer.output_dense, random_floats(BATCH, QUERY_LEN,
                                                                                                HEADS, DIM // HEADS))):
        reference = keras.layers.EinsumDense(projection.equation, projection.partial_output_shape,
                                             bias_axes=projection.bias_axes)
        reference.build(inputs.shape)
        reference.set_weights(projection.get_weights())
        if mode == "lora":
            for dense in (projection, reference):
                dense.enable_lora(2)
            for name in ("lora_kernel_a", "lora_kernel_b"):
                update = random_floats(*getattr(projection, name).shape)
                getattr(projection, name).assign(update)
                getattr(reference, name).assign(update)
        elif mode == "int8":
            for dense in (projection, reference):
                dense.quantize("int8")
        expected = to_numpy(reference(inputs))
        assert np.abs(expected).max() > 0.1  # a real product, not zeros
        assert_close(projection(inputs), expected, atol=1e-5)


def test_model_quantize_reaches_the_projections():
    inputs = keras.Input((QUERY_LEN, DIM))
    layer = MultiHeadAttention(HEADS)
    model = keras.Model(inputs, layer(inputs))
    model.quantize("int8")
    projections = (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    assert [dense.quantization_mode for dense in projections] == ["int8"] * 4


@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize(
    "masks",
    ["none", "padding", "attention_mask", "causal", "all"],
)
def test_equals_keras_multi_head_attention(masks, explicit):
    ours, ref = ported_pair()
    query, value = random_floats(BATCH, QUERY_LEN, DIM, seed=1), random_floats(BATCH, KEY_LEN, DIM, seed=2)
    kwargs = {}
    if masks in ("padding", "all"):
        kwargs.update(query_mask=padding([5, 3], QUERY_LEN), value_mask=padding([7, 4], KEY_LEN))
    if masks in ("attention_mask", "all"):
        kwargs["attention_mask"] = np.random.default_rng(3).random((BATCH, QUERY_LEN, KEY_LEN)) > 0.3
    if masks in ("causal", "all"):
        kwargs["use_causal_mask"] = True
    expected = ref(query, value, **kwargs)
    actual = ours(query, value, return_attention_scores=explicit, **kwargs)
    actual = actual[0] if explicit else actual
    assert_close(actual, expected, atol=1e-5)


@pytest.mark.parametrize("scale", [None, 1.0, 0.05])
def test_logit_scale_on_both_paths(scale):
    layer = MultiHeadAttention(HEADS, attention_scale=scale)
    query, value = random_floats(BATCH, QUERY_LEN, DIM, seed=1), random_floats(BATCH, KEY_LEN, DIM, seed=2)
    fused = layer(query, value)
    explicit, weights = layer(query, value, return_attention_scores=True)
    assert_close(fused, explicit, atol=1e-5)
    # The weights are softmax(scale · QKᵀ) computed here from the layer's own projections.
    q = np.einsum("bqc,chd->bqhd", query, to_numpy(layer.query_dense.kernel)) + to_numpy(layer.query_dense.bias)
    k = np.einsum("bkc,chd->bkhd", value, to_numpy(layer.key_dense.kernel)) + to_numpy(layer.key_dense.bias)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * (1 / math.sqrt(DIM // HEADS) if scale is None else scale)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    assert_close(weights, expected / expected.sum(-1, keepdims=True), atol=1e-5)
    assert layer.get_config()["attention_scale"] == scale


def test_a_subclass_that_overrides_compute_attention_is_what_runs():
    """The fused kernels compute the paper's attention; a subclass with its own `compute_attention` (here:
    uniform weights, the mean of the values) must get it called on every call, not only for the maps."""

    class MeanOfValues(MultiHeadAttention):
        def compute_attention(self, query, key, value, mask=None, training=None):
            weights = keras.ops.ones((query.shape[0], query.shape[2], query.shape[1], key.shape[1])) / key.shape[1]
            return keras.ops.einsum("bhqk,bkhd->bqhd", weights, value), weights

    layer = MeanOfValues(HEADS)
    query, value = random_floats(BATCH, QUERY_LEN, DIM, seed=1), random_floats(BATCH, KEY_LEN, DIM, seed=2)
    out = to_numpy(layer(query, value))
    v = np.einsum("bkc,chd->bkhd", value, to_numpy(layer.value_dense.kernel)) + to_numpy(layer.value_dense.bias)
    mean = np.broadcast_to(v.mean(1, keepdims=True), (BATCH, QUERY_LEN) + v.shape[2:])  # every query the same
    expected = np.einsum("bqhd,hdc->bqc", mean, to_numpy(layer.output_dense.kernel)) + to_numpy(layer.output_dense.bias)
    assert_close(out, expected, atol=1e-5)
    assert_close(layer(query, value, return_attention_scores=True)[0], out, atol=1e-6)


def test_cross_attention_with_other_widths_and_key_dim():
    ours, ref = ported_pair(query_dim=12, value_dim_in=20, key_dim=6)
    query, value = random_floats(BATCH, QUERY_LEN, 12), random_floats(BATCH, KEY_LEN, 20)
    out = ours(query, value)
    assert tuple(out.shape) == (BATCH, QUERY_LEN, 12)
    assert_close(out, ref(query, value))


def test_explicit_weights_rows_sum_to_one_and_ignore_masked_and_future_keys():
    mha = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, KEY_LEN, DIM)
    real = padding([7, 4], KEY_LEN)
    _, scores = mha(x, x, query_mask=real, value_mask=real, use_causal_mask=True, return_attention_scores=True)
    scores = to_numpy(scores)
    assert scores.shape == (BATCH, HEADS, KEY_LEN, KEY_LEN)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)
    future = np.triu(np.ones((KEY_LEN, KEY_LEN), dtype=bool), k=1)
    assert scores[:, :, future].max() < 1e-6
    # Sample 1 has 4 real tokens: its real queries put no weight on the 3 padded keys.
    assert scores[1, :, :4, 4:].max() < 1e-6


def test_fully_masked_rows_are_finite():
    mha = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, KEY_LEN, DIM)
    nothing = np.zeros((BATCH, KEY_LEN), dtype=bool)
    out, scores = mha(x, x, value_mask=nothing, return_attention_scores=True)
    assert np.all(np.isfinite(to_numpy(out))) and np.all(np.isfinite(to_numpy(scores)))
    assert np.all(np.isfinite(to_numpy(mha(x, x, value_mask=nothing))))  # fused path too


def test_self_attention_default_value_and_implicit_masks():
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, DIM, mask_zero=True)(ids)
    out = MultiHeadAttention(HEADS, name="mha")(x)  # value defaults to query, masks come from Embedding
    model = keras.Model(ids, out)
    batch = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    short = model(batch[:1, :3])
    # Padding must not change the real tokens' outputs.
    assert_close(to_numpy(model(batch))[0, :3], short[0], atol=1e-5)


def test_torch_style_mask_via_helper_matches_keras_mask():
    mha = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, QUERY_LEN, DIM)
    blocked = np.random.default_rng(0).random((BATCH, QUERY_LEN, QUERY_LEN)) > 0.6
    expected = mha(x, x, attention_mask=~blocked)
    assert_close(mha(x, x, attention_mask=attention_mask_from_torch(blocked)), expected, atol=0)


def test_cached_steps_equal_one_full_causal_pass():
    mha = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, 6, DIM)
    full = to_numpy(mha(x, use_causal_mask=True))
    cache = mha.empty_cache(BATCH, 6)
    for t in range(6):
        step, cache = mha(x[:, t : t + 1], cache=cache, cache_index=t, use_causal_mask=True)
        assert_close(step[:, 0], full[:, t], atol=1e-5)


def test_precomputed_cross_attention_cache_equals_direct_call():
    mha = MultiHeadAttention(HEADS)
    query, context = random_floats(BATCH, 3, DIM), random_floats(BATCH, KEY_LEN, DIM)
    context_mask = padding([7, 5], KEY_LEN)
    expected = mha(query, context, value_mask=context_mask)
    out, _ = mha(query, cache=mha.precompute_cache(context), value_mask=context_mask)
    assert_close(out, expected)


def test_attention_dropout_only_in_training():
    mha = MultiHeadAttention(HEADS, dropout=0.5, seed=1)
    x = random_floats(BATCH, QUERY_LEN, DIM)
    assert_close(mha(x, training=False), mha(x, training=False), atol=0)
    assert not np.allclose(to_numpy(mha(x, training=True)), to_numpy(mha(x, training=False)))


def test_bad_arguments():
    x = random_floats(BATCH, QUERY_LEN, 10)
    with pytest.raises(ValueError, match=r"query width \(10\) must be divisible by `num_heads` \(4\)"):
        MultiHeadAttention(4)(x)
    with pytest.raises(ValueError, match=r"`num_heads` must be a positive integer.*num_heads=0"):
        MultiHeadAttention(0)
    with pytest.raises(ValueError, match=r"`dropout` must be a number in \[0, 1\).*dropout=1.5"):
        MultiHeadAttention(2, dropout=1.5)
    with pytest.raises(ValueError, match=r"`attention_scale` must be a positive number or None.*attention_scale=0"):
        MultiHeadAttention(2, attention_scale=0)
    with pytest.raises(ValueError, match=r"`query` must have rank 3.*\(2, 10\)"):
        MultiHeadAttention(2)(random_floats(2, 10))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(attention_mask=np.ones((BATCH, QUERY_LEN, 3))), r"`attention_mask` must have shape .*\(2, 5, 3\)"),
        (dict(attention_mask=np.ones((QUERY_LEN, KEY_LEN))), r"`attention_mask` must have shape .*\(5, 7\)"),
        (dict(value_mask=np.ones((BATCH, 3))), r"`value_mask` must have shape \(batch, key_len\).*\(2, 3\)"),
        (dict(query_mask=np.ones((BATCH, KEY_LEN))), r"`query_mask` must have shape \(batch, query_len\)"),
    ],
)
def test_masks_of_the_wrong_shape(kwargs, message):
    mha = MultiHeadAttention(HEADS)
    with pytest.raises(ValueError, match=message):
        mha(random_floats(BATCH, QUERY_LEN, DIM), random_floats(BATCH, KEY_LEN, DIM), **kwargs)


def test_cache_helpers_need_a_built_layer():
    with pytest.raises(ValueError, match="call the layer once"):
        MultiHeadAttention(2).empty_cache(1, 4)


def test_equals_keras_with_implicit_masks_in_a_functional_model():
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, DIM, mask_zero=True, name="embed")(ids)
    ours_model = keras.Model(ids, MultiHeadAttention(HEADS, name="ours")(x, x))
    ref_model = keras.Model(ids, keras.layers.MultiHeadAttention(HEADS, DIM // HEADS, name="ref")(x, x))
    ref_model.get_layer("embed").set_weights(ours_model.get_layer("embed").get_weights())
    ours_model.get_layer("ours").set_weights(ref_model.get_layer("ref").get_weights())
    batch = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    real = batch != 0
    # Keras gives padded *queries* uniform weights, we let them attend to real keys: compare real tokens.
    assert_close(to_numpy(ours_model(batch))[real], to_numpy(ref_model(batch))[real])


# Locality self-attention (Lee et al., 2021): a trained logit scale and a masked diagonal.


def test_locality_masks_the_diagonal_and_trains_its_scale():
    layer = MultiHeadAttention(HEADS, locality=True)
    x = random_floats(BATCH, QUERY_LEN, DIM)
    out, weights = layer(x, return_attention_scores=True)
    weights = to_numpy(weights)
    assert np.all(np.diagonal(weights, axis1=-2, axis2=-1) == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert layer.weights[0].path.split("/")[-1] == "locality_scale"  # then Keras' projection weights
    np.testing.assert_allclose(to_numpy(layer.locality_scale), 1 / math.sqrt(DIM // HEADS), rtol=1e-6)
    assert_close(layer(x), out, atol=1e-6)  # the fused path is never taken: the same output without the weights

    # Before training it is the paper's attention with an off-diagonal attention mask.
    plain = MultiHeadAttention(HEADS)
    plain(x)
    plain.set_weights(layer.get_weights()[1:])
    off_diagonal = np.broadcast_to(~np.eye(QUERY_LEN, dtype=bool), (BATCH, QUERY_LEN, QUERY_LEN))
    assert_close(plain(x, attention_mask=off_diagonal), out, atol=1e-5)

    layer.locality_scale.assign(0.0)  # a zero temperature-inverse: uniform over the other tokens
    _, flat = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(flat)[0, 0, 0], [0.0] + [1 / (QUERY_LEN - 1)] * (QUERY_LEN - 1), atol=1e-6)


def test_locality_scale_gets_a_gradient():
    inputs = keras.Input((QUERY_LEN, DIM))
    layer = MultiHeadAttention(HEADS, locality=True, attention_scale=0.3)
    model = keras.Model(inputs, layer(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    np.testing.assert_allclose(to_numpy(layer.locality_scale), 0.3, rtol=1e-6)  # initialised at attention_scale
    model.fit(random_floats(4, QUERY_LEN, DIM), random_floats(4, QUERY_LEN, DIM, seed=1), verbose=0)
    assert to_numpy(layer.locality_scale) != pytest.approx(0.3)


def test_locality_with_a_padding_mask_and_not_with_a_causal_mask():
    layer = MultiHeadAttention(HEADS, locality=True)
    x = random_floats(BATCH, QUERY_LEN, DIM)
    real = padding([5, 2], QUERY_LEN)
    _, weights = layer(x, x, query_mask=real, value_mask=real, return_attention_scores=True)
    weights = to_numpy(weights)
    assert weights[1, :, :, 2:].max() == 0.0 and weights[1, :, 0, 0].max() == 0.0
    np.testing.assert_allclose(weights[1, :, 0, 1], 1.0, atol=1e-6)  # token 0's only other real token
    with pytest.raises(ValueError, match=r"`locality=True`.*`use_causal_mask=True`.*no key left"):
        layer(x, use_causal_mask=True)


class _KernelSpy:
    """Records the keyword arguments of every fused `dot_product_attention` call the layer makes."""

    def __init__(self, monkeypatch):
        from keras_tfm.layers import attention

        self.calls, real = [], attention.ops.dot_product_attention

        def spy(*args, **kwargs):
            self.calls.append(kwargs)
            return real(*args, **kwargs)

        monkeypatch.setattr(attention.ops, "dot_product_attention", spy)


def test_a_causal_mask_alone_reaches_the_causal_kernel_and_equals_the_explicit_path(monkeypatch):
    spy = _KernelSpy(monkeypatch)
    layer = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, 6, DIM)
    fused = layer(x, use_causal_mask=True)
    assert spy.calls[-1]["is_causal"] is True and spy.calls[-1]["mask"] is None  # no dense mask
    explicit, scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    assert_close(fused, explicit, atol=1e-5)
    assert np.allclose(np.triu(to_numpy(scores), k=1), 0.0)  # the explicit path is causal itself


def test_a_causal_mask_with_padding_or_a_cache_gets_the_dense_mask(monkeypatch):
    spy = _KernelSpy(monkeypatch)
    layer = MultiHeadAttention(HEADS)
    x = random_floats(BATCH, 6, DIM)
    keys = padding([6, 4], 6)
    fused = layer(x, value_mask=keys, use_causal_mask=True)
    assert spy.calls[-1]["is_causal"] is False and spy.calls[-1]["mask"] is not None
    explicit, _ = layer(x, value_mask=keys, use_causal_mask=True, return_attention_scores=True)
    assert_close(fused, explicit, atol=1e-5)
    cache = layer.empty_cache(BATCH, 6)
    layer(x[:, :1], use_causal_mask=True, cache=cache, cache_index=0)
    assert spy.calls[-1]["is_causal"] is False  # query 0 of a cache of 6: the offset needs the mask


def test_masked_lengths_cudnn_may_refuse_stay_off_the_fused_kernel_on_jax(monkeypatch):
    spy = _KernelSpy(monkeypatch)
    layer = MultiHeadAttention(HEADS)
    for length in (9, 8):  # 257 = 256 tokens + [CLS] is the case met in TextClassifier
        layer(random_floats(1, length, DIM), value_mask=padding([length - 1], length))
    odd, even = spy.calls[-2:]
    assert odd.get("flash_attention") is (False if keras.backend.backend() == "jax" else None)
    assert "flash_attention" not in even
