"""Mixed precision and XLA for the ready models (the layers' own contract is in tests/layers)."""

import keras
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, ViT, ViTBackbone
from tests.helpers import padded_ids, to_numpy


def vit():
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32), num_classes=3)
    return model, np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3)).astype("uint8"), np.arange(4) % 3


def text_classifier():
    model = TextClassifier.from_preset("tiny", vocab_size=20, max_length=16, dim=16, depth=1, num_heads=2, mlp_dim=32)
    return model, padded_ids([5, 8, 3, 2], 8), np.array([0, 1, 1, 0])


def seq2seq():
    model = Seq2SeqTransformer(20, 20, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2, mlp_dim=32, max_length=8)
    target = padded_ids([5, 8, 3, 2], 8, seed=1)
    return model, (padded_ids([4, 6, 2, 7], 6), target[:, :-1]), target[:, 1:]


def small_data_vit():
    """The small-data options: a convolutional stem, locality self-attention and sequence pooling."""
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, tokenizer="conv",
                            locality=True, class_token=False), num_classes=3, pool="sequence")
    return model, np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3)).astype("uint8"), np.arange(4) % 3


def shifted_patch_vit():
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, tokenizer="shifted",
                            position="learned"), num_classes=3)
    return model, np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3)).astype("uint8"), np.arange(4) % 3


MODELS = {"ViT": vit, "ViT-small-data": small_data_vit, "ViT-shifted-patches": shifted_patch_vit,
          "TextClassifier": text_classifier, "Seq2SeqTransformer": seq2seq}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_mixed_precision_gives_finite_float32_outputs(name, policy):
    keras.config.set_dtype_policy(policy)
    model, x, y = MODELS[name]()
    out = model(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"  # logits stay float32 for the loss
    assert np.all(np.isfinite(to_numpy(out)))
    if isinstance(model, Seq2SeqTransformer):
        if keras.backend.backend() == "jax" and policy == "mixed_float16":
            pytest.skip("XLA:CPU has no float16 dot_general with float32 accumulation (JAX's fused attention)")
        assert model.generate(x[0], max_new_tokens=5).shape == (4, 5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", ["ViT", "TextClassifier", "Seq2SeqTransformer"])
def test_training_under_mixed_precision_lowers_the_loss(name, policy):
    """`fit` itself, not only a forward pass: float32 weights, half-precision compute, falling finite loss; under
    float16 the optimizer scales the loss (and the scale stays finite)."""
    if keras.backend.backend() == "jax" and policy == "mixed_float16":
        pytest.skip("XLA:CPU has no float16 dot_general with float32 accumulation ('F16_F16_F32'); on a GPU it has")
    keras.config.set_dtype_policy(policy)
    model, x, y = MODELS[name]()
    model.compile_for_training(optimizer=keras.optimizers.Adam(1e-2))
    before = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    losses = model.fit(x, y, epochs=20, batch_size=4, verbose=0).history["loss"]
    after = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    assert np.all(np.isfinite(losses)) and after < 0.5 * before
    assert {keras.backend.standardize_dtype(w.dtype) for w in model.trainable_weights} == {"float32"}
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        # Dynamic loss scaling at work: it starts at 2^15 and halves (skipping the step) on every overflow.
        scale = float(to_numpy(model.optimizer.dynamic_scale))
        assert np.isfinite(scale) and 1.0 <= scale <= 2.0 ** 15
    else:
        assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


@pytest.mark.jit
@pytest.mark.parametrize("name", list(MODELS))
def test_jit_compiled_training_step(name):
    model, x, y = MODELS[name]()
    model.compile_for_training(jit_compile=True)
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.parametrize("name", ["ViT", "TextClassifier"])
def test_classifiers_compile_for_training_with_label_smoothing_and_weight_decay_where_it_belongs(name):
    model, x, y = MODELS[name]()
    model.compile_for_training(label_smoothing=0.1)
    logits = model.predict(x, verbose=0)
    one_hot = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)  # Keras' own, dense
    np.testing.assert_allclose(float(model.loss(y, logits)), float(one_hot(np.eye(logits.shape[-1])[y], logits)), rtol=1e-5)
    assert isinstance(model.optimizer, keras.optimizers.AdamW) and model.optimizer.clipnorm == 1.0
    # One update with zero gradients: Adam moves nothing, so what changes is weight decay alone.
    variables = model.trainable_variables
    before = [keras.ops.convert_to_numpy(v) for v in variables]
    model.optimizer.apply([keras.ops.zeros(v.shape, v.dtype) for v in variables], variables)
    decayed = {v.path for v, b in zip(variables, before) if not np.array_equal(keras.ops.convert_to_numpy(v), b)}
    nonzero = {v.path for v, b in zip(variables, before) if np.any(b != 0)}
    exempt = {v.path for v in model.weight_decay_exempt_variables()}
    assert exempt and decayed and decayed == nonzero - exempt
    assert all(v.name != "kernel" for v in model.weight_decay_exempt_variables())
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0).history
    assert set(history) == {"loss", "accuracy"} and np.all(np.isfinite(history["loss"]))


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("name", ["ViT", "Seq2SeqTransformer"])
def test_fit_traces_the_training_step_once(name):
    """Keras leaves the optimizer's slots to the first traced step on TensorFlow, which makes `tf.function` trace
    the whole step twice; the models build the optimizer before `fit` traces."""
    model, x, y = MODELS[name]()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    traced = []
    train_step = model.train_step

    def counting_train_step(data):  # in a graph, Python runs once per trace, not once per step
        traced.append(True)
        return train_step(data)

    model.train_step = counting_train_step
    history = model.fit(x, y, epochs=2, batch_size=2, verbose=0)  # 2 steps per epoch
    assert len(traced) == 1 and model.optimizer.built
    assert history.history["loss"][1] < history.history["loss"][0]


@pytest.mark.parametrize(
    "build, misspelled, meant",
    [
        (lambda **kw: ViT.from_preset("tiny", **kw), {"num_class": 10}, "num_classes"),
        (lambda **kw: ViT(ViTBackbone.from_preset("tiny"), **kw), {"num_class": 10}, "num_classes"),
        (lambda **kw: TextClassifier.from_preset("tiny", vocab_size=20, max_length=8, **kw), {"dropuot": 0.3},
                                                 "dropout"),
        (lambda **kw: Seq2SeqTransformer(20, 20, **kw), {"max_lenght": 8}, "max_length"),
    ],
)
def test_a_misspelled_keyword_is_a_type_error_naming_the_closest(build, misspelled, meant):
    name = next(iter(misspelled))
    with pytest.raises(TypeError, match=rf"unexpected keyword argument `{name}`.*Did you mean `{meant}`"):
        build(**misspelled)


@pytest.mark.parametrize("name", list(MODELS))
def test_get_config_is_the_constructor_arguments_and_round_trips(name):
    import inspect

    model, x, _ = MODELS[name]()
    config = model.get_config()
    arguments = set(inspect.signature(type(model).__init__).parameters) - {"self", "kwargs"}
    assert set(config) == arguments | {"name", "trainable", "dtype"}
    clone = type(model).from_config(config)
    assert clone.get_config() == config


def test_vit_pool_gap_is_the_old_name_of_mean():
    with pytest.warns(FutureWarning, match='pool="gap" is deprecated, use pool="mean"'):
        model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                class_token=False), num_classes=3, pool="gap")
    assert model.pool == "mean" and model.get_config()["pool"] == "mean"


def _rewrite_keras_file(path, rewrite):
    """Rewrites the config.json inside a `.keras` zip archive (to make a file as an older release saved it)."""
    import json
    import zipfile

    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["config.json"] = json.dumps(rewrite(json.loads(members["config.json"]))).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_keras_files_saved_with_the_old_names_still_load(tmp_path):
    """A `.keras` file from before the renaming (MultiHeadAttention `scale`, FeedForward `hidden_dim`, ViT
    `pool="gap"`) loads, with a FutureWarning, and predicts exactly what it did."""
    from keras_tfm.layers import FeedForward, MultiHeadAttention

    images = keras.Input((8, 8, 3))
    vit_model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                class_token=False), num_classes=3, pool="mean", name="inner_vit")
    tokens = keras.Input((5, 16))
    mixed = FeedForward(mlp_dim=24, name="ffn")(MultiHeadAttention(2, attention_scale=0.3, name="mha")(tokens))
    model = keras.Model([images, tokens], [vit_model(images), mixed])
    x = [np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3)).astype("float32"),
         np.random.default_rng(1).normal(size=(2, 5, 16)).astype("float32")]
    expected = [to_numpy(y) for y in model(x)]
    path = str(tmp_path / "old.keras")
    model.save(path)

    def to_old_names(node):
        if isinstance(node, dict):
            config = node.get("config")
            if isinstance(config, dict):
                if node.get("class_name") == "MultiHeadAttention":
                    config["scale"] = config.pop("attention_scale")
                if node.get("class_name") == "FeedForward":
                    config["hidden_dim"] = config.pop("mlp_dim")
                if node.get("class_name") == "ViT":
                    config["pool"] = "gap"
            return {key: to_old_names(value) for key, value in node.items()}
        return [to_old_names(value) for value in node] if isinstance(node, list) else node

    _rewrite_keras_file(path, to_old_names)
    with pytest.warns(FutureWarning) as warned:
        loaded = keras.saving.load_model(path)
    messages = " ".join(str(w.message) for w in warned)
    assert "`scale` is deprecated" in messages and "`hidden_dim` is deprecated" in messages and "gap" in messages
    for got, want in zip(loaded(x), expected):
        np.testing.assert_array_equal(to_numpy(got), want)


@pytest.mark.parametrize("name", ["TextClassifier", "Seq2SeqTransformer"])
def test_out_of_range_ids_are_a_clear_error_in_fit_predict_and_evaluate(name):
    model, x, y = MODELS[name]()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    bad = x.copy() if isinstance(x, np.ndarray) else (x[0].copy(), x[1])
    (bad if isinstance(bad, np.ndarray) else bad[0])[1, 2] = 20  # vocab_size is 20
    message = r"Token ids in `(x|source_ids)` must lie in \[0, vocab_size\) = \[0, 20\). Received: an id of 20"
    with pytest.raises(ValueError, match=message):
        model.fit(bad, y, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=message):
        model.fit(x, y, epochs=1, verbose=0, validation_data=(bad, y))
    with pytest.raises(ValueError, match=message):
        model.predict(bad, verbose=0)
    with pytest.raises(ValueError, match=message):
        model.evaluate(bad, y, verbose=0)


def test_float_ids_are_a_type_error_not_truncated():
    model, x, _ = MODELS["TextClassifier"]()
    with pytest.raises(TypeError, match=r"integer token ids.*5\.7"):
        model(np.array([[3, 5.7, 0]]))
    np.testing.assert_array_equal(to_numpy(model(np.array([[3.0, 5.0]]))), to_numpy(model(np.array([[3, 5]]))))


def test_generate_rejects_out_of_range_source_ids():
    model, x, _ = MODELS["Seq2SeqTransformer"]()
    with pytest.raises(ValueError, match=r"Token ids in `source_ids` must lie in \[0, vocab_size\) = \[0, 20\)"):
        model.generate(x[0] + 20, max_new_tokens=3)


def test_seq2seq_fit_with_unshifted_targets_says_to_shift_them():
    model, (source, target_input), _ = MODELS["Seq2SeqTransformer"]()
    model.compile_for_training()
    full_target = np.concatenate([target_input, target_input[:, -1:]], axis=1)  # one longer than the output
    with pytest.raises(ValueError, match=r"shift the targets.*target\[:, :-1\]\), target\[:, 1:\]"):
        model.fit((source, target_input), full_target, epochs=1, verbose=0)
