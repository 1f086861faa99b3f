import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.insight.attention_probe import AttentionMap, as_records, query_key_tokens
from keras_tfm.models import Seq2SeqTransformer, TextClassifier, ViT, ViTBackbone
from tests.helpers import padded_ids, reverse_digits


def test_vit_maps_have_one_entry_per_block():
    model = ViT(ViTBackbone(image_size=16, patch_size=4, dim=16, depth=3, num_heads=2, mlp_dim=32), num_classes=3)
    maps = keras_tfm.attention_maps(model, np.zeros((2, 16, 16, 3), "uint8"))
    assert list(maps) == ["block_0", "block_1", "block_2"]
    assert all(m.shape == (2, 2, 17, 17) for m in maps.values())
    np.testing.assert_allclose(maps["block_2"].sum(-1), 1.0, atol=1e-5)


def test_classifier_maps_put_no_weight_on_padding():
    model = TextClassifier.from_preset("tiny", vocab_size=30, max_length=16, dim=16, depth=2, num_heads=2, mlp_dim=32,
                                       pool="cls")
    ids = padded_ids([4, 7], 7, vocab_size=30)
    maps = keras_tfm.attention_maps(model, ids)
    assert list(maps) == ["block_0", "block_1"]
    weights = maps["block_1"]  # (2, 2, 8, 8): [CLS] + 7 tokens
    assert weights.shape == (2, 2, 8, 8)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert weights[0, :, :5, 5:].max() < 1e-6  # sample 0 has [CLS] + 4 real tokens


def test_seq2seq_maps_names_shapes_and_causality():
    model = Seq2SeqTransformer(20, 20, dim=16, encoder_depth=2, decoder_depth=2, num_heads=2, mlp_dim=32, max_length=8)
    source, target = padded_ids([5, 3], 5, 20), padded_ids([6, 6], 6, 20, seed=1)
    maps = keras_tfm.attention_maps(model, (source, target))
    assert list(maps) == [
        "encoder_block_0", "encoder_block_1",
        "decoder_block_0/self_attention", "decoder_block_0/cross_attention",
        "decoder_block_1/self_attention", "decoder_block_1/cross_attention",
    ]
    self_attention = maps["decoder_block_1/self_attention"]
    assert self_attention.shape == (2, 2, 6, 6)
    assert self_attention[:, :, np.triu(np.ones((6, 6), bool), 1)].max() < 1e-6  # lower-triangular
    cross = maps["decoder_block_0/cross_attention"]
    assert cross.shape == (2, 2, 6, 5)
    assert cross[1, :, :, 3:].max() < 1e-6  # padded source keys
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("style", ["functional", "sequential"])
def test_user_models_with_our_blocks(style):
    if style == "functional":
        ids = keras.Input((None,), dtype="int32")
        x = keras_tfm.TokenEmbedding(30, 16)(ids)
        x = keras_tfm.EncoderBlock(2, 32, name="first")(x)
        x = keras_tfm.EncoderBlock(4, 32, name="second")(x)
        model = keras.Model(ids, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(x)))
    else:
        model = keras.Sequential(
            [keras_tfm.TokenEmbedding(30, 16), keras_tfm.EncoderBlock(2, 32, name="first"),
             keras_tfm.EncoderBlock(4, 32, name="second"), keras.layers.GlobalAveragePooling1D()]
        )
    ids = padded_ids([3, 5], 5, 30)
    maps = keras_tfm.attention_maps(model, ids)
    assert list(maps) == ["first", "second"]
    assert maps["first"].shape == (2, 2, 5, 5) and maps["second"].shape == (2, 4, 5, 5)


def test_probe_leaves_the_fused_path_for_training():
    model = TextClassifier.from_preset("tiny", vocab_size=30, max_length=16, dim=16, depth=1, num_heads=2, mlp_dim=32)
    keras_tfm.attention_maps(model, padded_ids([3], 5, 30))
    attention = model.encoder.get_layer("block_0").attention
    assert attention.score_recorder is None


def test_model_without_our_attention_is_an_error():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="no keras_tfm MultiHeadAttention"):
        keras_tfm.attention_maps(model, np.zeros((1, 3)))


@pytest.mark.slow
@pytest.mark.xdist_group("trained_reverser")
def test_trained_reverser_aligns_each_target_with_the_mirrored_source(trained_reverser):
    source, target = reverse_digits(200, seed=11)
    maps = keras_tfm.attention_maps(trained_reverser, (source, target[:, :-1]))
    lengths = (source != 0).sum(1)
    hits = total = 0
    for record in maps.of_kind("cross"):
        pointed = record.weights.mean(1).argmax(-1)  # (batch, target_len): the source position each target reads
        layer_hits = layer_total = 0
        for row, length in enumerate(lengths):
            # Target input position t (START, then reversed digits) predicts digit t+1 of the reversal,
            # which is source position length - 1 - t.
            for t in range(length):
                layer_hits += pointed[row, t] == length - 1 - t
                layer_total += 1
        hits, total = max((hits, total), (layer_hits, layer_total), key=lambda h: h[0] / max(h[1], 1))
    assert hits / total >= 0.9, hits / total


def test_iter_layers_finds_layers_in_lists_dicts_and_nested_models():
    from keras_tfm.layers.walk import iter_layers

    class Holder(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.blocks = [keras_tfm.EncoderBlock(2, 8, name="in_list")]
            self.named = {"a": keras_tfm.MultiHeadAttention(2, name="in_dict")}

        def call(self, x):
            return self.named["a"](self.blocks[0](x))

    inner = keras.Sequential([keras_tfm.EncoderBlock(2, 8, name="in_sequential")])
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, Holder(name="holder")(inner(inputs)))
    layers = list(iter_layers(model))
    names = [layer.name for layer in layers]
    assert {"holder", "in_list", "in_dict", "in_sequential"} <= set(names)
    assert len(names) == len({id(layer) for layer in layers})  # each once
    # The attention inside each block is found too: three MultiHeadAttention layers in all.
    assert sum(isinstance(layer, keras_tfm.MultiHeadAttention) for layer in layers) == 3
    maps = keras_tfm.attention_maps(model, np.zeros((1, 5, 8), "float32"))
    assert len(maps) == 3


def test_vit_maps_with_the_small_data_options():
    model = ViT(ViTBackbone(image_size=16, patch_size=4, dim=16, depth=2, num_heads=2, mlp_dim=32, tokenizer="shifted",
                            locality=True, class_token=False), num_classes=3, pool="sequence")
    maps = keras_tfm.attention_maps(model, np.zeros((2, 16, 16, 3), "uint8"))
    assert list(maps) == ["block_0", "block_1"] and maps["block_1"].shape == (2, 2, 16, 16)  # no [CLS] token
    np.testing.assert_allclose(maps["block_1"].sum(-1), 1.0, atol=1e-5)
    assert np.all(np.diagonal(maps["block_0"], axis1=-2, axis2=-1) == 0.0)
    rollout = keras_tfm.insight.visualize.attention_rollout(maps)
    assert rollout.shape == (2, 16, 16) and np.all(np.isfinite(rollout))


def test_records_say_layer_kind_and_class_token_without_reading_names():
    model = Seq2SeqTransformer(20, 20, dim=16, encoder_depth=1, decoder_depth=2, num_heads=2, mlp_dim=32, max_length=8,
                               name="renamed")
    maps = keras_tfm.attention_maps(model, (padded_ids([5], 5, 20), padded_ids([4], 4, 20, seed=1)))
    assert [(r.layer, r.kind, r.prefix_tokens) for r in maps.records] == [
        ("encoder_block_0", "encoder", 0), ("decoder_block_0", "self", 0), ("decoder_block_0", "cross", 0),
        ("decoder_block_1", "self", 0), ("decoder_block_1", "cross", 0)]
    assert [r.name for r in maps.of_kind("cross")] == ["decoder_block_0/cross_attention",
                                                       "decoder_block_1/cross_attention"]
    assert all(maps[r.name] is r.weights for r in maps.records)  # dict access by name still gives the array
    assert maps.of_kind("cross")[-1].weights.shape == (1, 2, 4, 5)
    one = maps.map_weights(lambda w: w[:, :1])
    assert [r.kind for r in one.records] == [r.kind for r in maps.records] and one["encoder_block_0"].shape[1] == 1
    with pytest.raises(ValueError, match="among"):
        maps.of_kind("decoder")
    classifier = TextClassifier.from_preset("tiny", vocab_size=30, max_length=16, dim=16, depth=1, num_heads=2,
                                            mlp_dim=32, pool="cls")
    assert keras_tfm.attention_maps(classifier, padded_ids([3], 5, 30)).records[0].prefix_tokens == 1
    pooled = TextClassifier.from_preset("tiny", vocab_size=30, max_length=16, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        pool="mean")
    assert keras_tfm.attention_maps(pooled, padded_ids([3], 5, 30)).records[0].prefix_tokens == 0
    vit = ViT(ViTBackbone(image_size=16, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32), num_classes=3)
    assert keras_tfm.attention_maps(vit, np.zeros((1, 16, 16, 3), "uint8")).records[0].prefix_tokens == 1


def test_one_function_labels_queries_and_keys_of_every_kind():
    source, target = ["a", "b", "c"], ["<s>", "x"]
    assert query_key_tokens("encoder", (source, target)) == (source, source)
    assert query_key_tokens("self", (source, target)) == (target, target)
    assert query_key_tokens("cross", (source, target)) == (target, source)  # target queries over source keys
    assert query_key_tokens("encoder", ["fine", "film"], prefix_tokens=1) == (["[CLS]", "fine", "film"],) * 2
    assert query_key_tokens("encoder", ["[CLS]", "film"], prefix_tokens=1) == (["[CLS]", "film"],) * 2  # given once
    assert query_key_tokens("self", None) == (None, None)
    with pytest.raises(ValueError, match="kind='decoder'"):
        query_key_tokens("decoder", source)


def test_maps_given_without_records_are_encoder_maps():
    weights = np.full((1, 2, 3, 3), 1 / 3, "float32")
    assert [(r.name, r.kind) for r in as_records({"mine": weights})] == [("mine", "encoder")]
    assert [r.name for r in as_records([weights, weights])] == ["layer_0", "layer_1"]
    record = AttentionMap("x", "x", "cross", weights)
    assert as_records([record]) == [record]
    with pytest.raises(TypeError, match="Received: str"):
        as_records("block_0")
    with pytest.raises(ValueError, match="empty"):
        as_records({})
