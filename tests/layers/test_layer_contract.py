"""The contract every public keras_tfm layer keeps: config and `.keras` round trips, Keras serialization,
symbolic use in functional models, masks, trainability, mixed precision and XLA compilation."""

import inspect

import keras
import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm import layers as tfm
from tests.helpers import padded_ids, random_floats, to_numpy

VOCAB, LENGTH, DIM = 12, 6, 8


def token_model(layer_factory):
    """ids -> TokenEmbedding -> layer: the layer sees a float sequence carrying a padding mask."""

    def build():
        ids = keras.Input((None,), dtype="int32", name="ids")
        x = tfm.TokenEmbedding(VOCAB, DIM)(ids)
        return keras.Model(ids, layer_factory()(x))

    return build, lambda: padded_ids([LENGTH, 3], LENGTH, VOCAB)


def decoder_model():
    target = keras.Input((None,), dtype="int32", name="target")
    source = keras.Input((None,), dtype="int32", name="source")
    context = tfm.TokenEmbedding(VOCAB, DIM, name="source_embedding")(source)
    x = tfm.TokenEmbedding(VOCAB, DIM, name="target_embedding")(target)
    return keras.Model([target, source], tfm.DecoderBlock(2, 16)(x, context))


def learned_token_model():
    ids = keras.Input((LENGTH,), dtype="int32")
    return keras.Model(ids, tfm.TokenEmbedding(VOCAB, DIM, max_length=LENGTH, position="learned")(ids))


def image_model(**kwargs):
    def build():
        images = keras.Input((8, 8, 3), name="images")
        return keras.Model(images, tfm.PatchEmbedding(4, DIM, **kwargs)(images))

    return build, lambda: random_floats(2, 8, 8, 3)


CASES = {
    "TokenEmbedding": token_model(lambda: keras.layers.Identity()),
    "TokenEmbedding-learned": (learned_token_model, lambda: padded_ids([LENGTH, 3], LENGTH, VOCAB)),
    "PatchEmbedding": image_model(),
    "PatchEmbedding-learned": image_model(position="learned"),
    "PatchEmbedding-conv": image_model(tokenizer="conv", class_token=False),
    "PatchEmbedding-shifted": image_model(tokenizer="shifted", position="learned"),
    "MultiHeadAttention-locality": token_model(lambda: tfm.MultiHeadAttention(2, locality=True)),
    "SequencePooling": token_model(lambda: tfm.SequencePooling()),
    "MultiHeadAttention": token_model(lambda: tfm.MultiHeadAttention(2)),
    "FeedForward": token_model(lambda: tfm.FeedForward(16)),
    "DropPath": token_model(lambda: tfm.DropPath(0.1)),
    "Dropout": token_model(lambda: tfm.Dropout(0.1, seed=0)),
    "ClassToken": token_model(lambda: tfm.ClassToken()),
    "EncoderBlock": token_model(lambda: tfm.EncoderBlock(2, 16, dropout=0.1)),
    "EncoderBlock-post-norm": token_model(lambda: tfm.EncoderBlock(2, 16, norm_first=False)),
    "EncoderBlock-locality": token_model(lambda: tfm.EncoderBlock(2, 16, locality=True)),
    "DecoderBlock": (
        decoder_model,
        lambda: [padded_ids([LENGTH, 4], LENGTH, VOCAB), padded_ids([5, 2], 5, VOCAB, seed=1)],
    ),
}

LAYER_FACTORIES = {
    tfm.TokenEmbedding: lambda: tfm.TokenEmbedding(VOCAB, DIM, max_length=9, position="learned", dropout=0.1),
    tfm.PatchEmbedding: lambda: tfm.PatchEmbedding((4, 2), DIM, position="learned", class_token=False),
    tfm.MultiHeadAttention: lambda: tfm.MultiHeadAttention(2, key_dim=3, value_dim=5, output_dim=7, seed=3,
                                                           locality=True),
    tfm.ConvTokenizer: lambda: tfm.ConvTokenizer(16, stages=3, hidden_dim=8),
    tfm.ShiftedPatchTokenization: lambda: tfm.ShiftedPatchTokenization((4, 2), 16, layer_norm_epsilon=1e-5),
    tfm.SequencePooling: lambda: tfm.SequencePooling(name="pool"),
    tfm.FeedForward: lambda: tfm.FeedForward(16, activation="relu", output_dim=4),
    tfm.DropPath: lambda: tfm.DropPath(0.2, seed=1),
    tfm.Dropout: lambda: tfm.Dropout(0.2, noise_shape=(None, 1, 8), seed=1),
    tfm.ClassToken: lambda: tfm.ClassToken(initializer="ones"),
    tfm.EncoderBlock: lambda: tfm.EncoderBlock(2, 16, norm_first=False, drop_path=0.1, layer_norm_epsilon=1e-5,
                                               locality=True),
    tfm.DecoderBlock: lambda: tfm.DecoderBlock(4, 32, attention_dropout=0.1, activation="relu", key_dim=4),
}


def case(name):
    build, sample = CASES[name]
    return build(), sample()


@pytest.mark.parametrize("cls", list(LAYER_FACTORIES), ids=lambda c: c.__name__)
def test_get_config_is_exactly_the_constructor_arguments(cls):
    layer = LAYER_FACTORIES[cls]()
    config = layer.get_config()
    base = set(keras.layers.Layer().get_config())
    # The constructor's arguments, including those a block passes on to its base class with **kwargs.
    own = set()
    for klass in cls.__mro__[: cls.__mro__.index(keras.layers.Layer)]:
        own |= set(inspect.signature(klass.__init__).parameters) - {"self", "kwargs"}
    assert set(config) - base == own
    clone = cls.from_config(config)
    assert clone.get_config() == config


@pytest.mark.parametrize("cls", list(LAYER_FACTORIES), ids=lambda c: c.__name__)
def test_registered_for_keras_serialization(cls):
    assert keras.saving.get_registered_name(cls) == f"keras_tfm>{cls.__name__}"
    layer = LAYER_FACTORIES[cls]()
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is cls and restored.get_config() == layer.get_config()


@pytest.mark.parametrize("name", list(CASES))
def test_keras_file_round_trip_gives_identical_outputs(name, tmp_path):
    model, inputs = case(name)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded.predict(inputs, verbose=0)), to_numpy(model.predict(inputs, verbose=0)))
    for original, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(to_numpy(original), to_numpy(restored))


@pytest.mark.parametrize("name", [n for n in CASES if n != "DropPath"])
def test_every_weight_gets_a_gradient(name):
    model, inputs = case(name)
    before = [to_numpy(w) for w in model.trainable_weights]
    target = np.random.default_rng(0).normal(size=to_numpy(model(inputs)).shape).astype("float32")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(inputs, target, epochs=1, batch_size=2, verbose=0)
    unchanged = [w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)]
    assert not unchanged


class MaskProbe(keras.layers.Layer):
    """Outputs the Keras mask it receives (as 0/1 floats)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, mask=None):
        assert mask is not None, "no mask reached the probe"
        return ops.cast(mask, "float32")

    def compute_mask(self, x, mask=None):
        return None


@pytest.mark.parametrize(
    "name", ["MultiHeadAttention", "MultiHeadAttention-locality", "FeedForward", "DropPath", "Dropout", "EncoderBlock",
             "EncoderBlock-locality", "DecoderBlock", "ClassToken"]
)
def test_padding_mask_propagates_through_the_layer(name):
    model, inputs = case(name)
    probed = keras.Model(model.input, MaskProbe()(model.output))
    ids = inputs[0] if isinstance(inputs, list) else inputs
    expected = ids != 0
    if name == "ClassToken":  # the prepended token is real
        expected = np.concatenate([np.ones((len(ids), 1), bool), expected], axis=1)
    np.testing.assert_array_equal(to_numpy(probed(inputs)), expected)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", list(CASES))
def test_mixed_precision(name, policy):
    keras.config.set_dtype_policy(policy)
    model, inputs = case(name)
    out = model(inputs)
    assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
    assert np.all(np.isfinite(to_numpy(out)))
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in model.weights if "seed" not in w.path)


def test_masked_softmax_does_not_overflow_in_float16():
    keras.config.set_dtype_policy("mixed_float16")
    mha = tfm.MultiHeadAttention(2)
    x = random_floats(2, 5, 8) * 100.0  # logits in the thousands: a saturated softmax, -1e9 would be -inf
    real = np.array([[1, 1, 1, 0, 0]] * 2, bool)
    for value_mask in (real, np.zeros((2, 5), bool)):
        out, scores = mha(x, x, value_mask=value_mask, return_attention_scores=True)
        fused = mha(x, x, value_mask=value_mask)
        for tensor in (out, scores, fused):
            assert np.all(np.isfinite(to_numpy(tensor)))
        np.testing.assert_allclose(to_numpy(fused), to_numpy(out), rtol=2e-2, atol=2e-2 * np.abs(to_numpy(out)).max())
    assert to_numpy(mha(x, x, value_mask=real, return_attention_scores=True)[1])[..., 3:].max() == 0.0


@pytest.mark.jit
@pytest.mark.parametrize("name", list(CASES))
def test_jit_compile_fit_and_predict(name):
    model, inputs = case(name)
    expected = to_numpy(model.predict(inputs, verbose=0))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    np.testing.assert_allclose(to_numpy(model.predict(inputs, verbose=0)), expected, atol=1e-5)
    history = model.fit(inputs, np.zeros_like(expected), epochs=1, batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("cls", list(LAYER_FACTORIES), ids=lambda c: c.__name__)
def test_a_misspelled_keyword_is_a_type_error_naming_the_closest(cls):
    config = LAYER_FACTORIES[cls]().get_config()
    optional = [p.name for p in inspect.signature(cls.__init__).parameters.values() if p.default is not p.empty]
    name = "seed" if cls in (tfm.EncoderBlock, tfm.DecoderBlock) else optional[-1] if optional else "name"
    misspelled = name[:-2] + name[-1] + name[-2]  # swap the last two letters: "dropout" -> "dropotu"
    config[misspelled] = config.pop(name)
    with pytest.raises(TypeError, match=rf"unexpected keyword argument `{misspelled}`.*Did you mean `{name}`"):
        cls.from_config(config)


def test_each_random_sublayer_of_a_block_gets_its_own_seed():
    block = tfm.EncoderBlock(2, 16, dropout=0.1, seed=7)
    seeds = [block.attention.seed, block.attention_output_dropout.seed, block.feed_forward.seed,
             block.feed_forward.seed + 1, block.drop_path_layer.seed]
    assert len(set(seeds)) == len(seeds)  # FeedForward uses its seed and the next
    again = tfm.EncoderBlock(2, 16, dropout=0.1, seed=7)
    assert again.attention.seed == block.attention.seed  # reproducible from the block's seed
    x = random_floats(2, 5, 8)
    block.build(x.shape)
    again.build(x.shape)
    again.set_weights(block.get_weights())
    np.testing.assert_array_equal(to_numpy(block(x, training=True)), to_numpy(again(x, training=True)))


@pytest.mark.parametrize(
    "make, old, new",
    [
        (lambda **kw: tfm.MultiHeadAttention(2, **kw), {"scale": 0.5}, {"attention_scale": 0.5}),
        (lambda **kw: tfm.FeedForward(**kw), {"hidden_dim": 16}, {"mlp_dim": 16}),
    ],
)
def test_old_argument_names_still_work_with_a_warning(make, old, new):
    with pytest.warns(FutureWarning, match=f"`{next(iter(old))}` is deprecated, use `{next(iter(new))}`"):
        layer = make(**old)
    assert {**layer.get_config(), "name": None} == {**make(**new).get_config(), "name": None}
    with pytest.raises(TypeError, match="pass `.*` only"):
        make(**old, **{next(iter(new)): 3})


@pytest.mark.parametrize("build, name", [
    (lambda **kw: keras_tfm.EncoderBlock(2, 8, **kw), "norm_first"),
    (lambda **kw: keras_tfm.EncoderBlock(2, 8, **kw), "locality"),
    (lambda **kw: keras_tfm.DecoderBlock(2, 8, **kw), "norm_first"),
    (lambda **kw: keras_tfm.MultiHeadAttention(2, **kw), "use_bias"),
    (lambda **kw: keras_tfm.PatchEmbedding(4, 8, **kw), "class_token"),
    (lambda **kw: keras_tfm.TokenEmbedding(10, 8, **kw), "mask_zero"),
    (lambda **kw: keras_tfm.ViTBackbone(image_size=8, patch_size=4, dim=8, depth=1, num_heads=2, mlp_dim=8, **kw),
     "locality"),
    (lambda **kw: keras_tfm.TextClassifier.from_preset("tiny", vocab_size=10, max_length=4, dim=8, depth=1, num_heads=2,
                                                       mlp_dim=8, **kw), "norm_first"),
    (lambda **kw: keras_tfm.Seq2SeqTransformer(10, 10, dim=8, encoder_depth=1, decoder_depth=1, num_heads=2,
                                               mlp_dim=8, max_length=4, **kw), "tie_embeddings"),
])
def test_boolean_arguments_take_only_booleans(build, name):
    with pytest.raises(TypeError, match=f"`{name}` must be True or False. Received: {name}='yes'"):
        build(**{name: "yes"})
    build(**{name: False})  # a real boolean is fine


def test_rescale_takes_a_boolean_or_imagenet():
    make = lambda rescale: keras_tfm.ViT(keras_tfm.ViTBackbone(image_size=8, patch_size=4, dim=8, depth=1, num_heads=2,
                                                               mlp_dim=8, rescale=rescale))
    expected = r"`rescale` must be one of \[True, False, 'imagenet'\]. Received: rescale='yes'"
    with pytest.raises(ValueError, match=expected):
        make("yes")
    assert make("imagenet").backbone.rescale == "imagenet" and make(False).backbone.rescale is False
