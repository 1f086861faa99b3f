import keras
import numpy as np
import pytest

from keras_tfm.layers import EncoderBlock
from keras_tfm.models import ViT, ViTBackbone
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the model contract (tests/models/test_model_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))

SMALL = dict(image_size=16, patch_size=4, dim=32, depth=2, num_heads=2, mlp_dim=64)  # the backbone's sizes


def small_vit(pool=None, backbone=None, **task):
    """A 3-class ViT on a small backbone; the backbone has a [CLS] token where the pooling reads one."""
    backbone = ViTBackbone(**SMALL, class_token=pool in (None, "cls"), **(backbone or {}))
    return ViT(backbone, num_classes=3, pool=pool, **task)


def images(n, size=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, size, size, 3)).astype("uint8")


@pytest.mark.parametrize("pool,position,options", [
    ("cls", "sincos2d", {}),
    ("mean", "learned", {}),
    ("sequence", "sincos2d", dict(tokenizer="conv", locality=True)),
    ("cls", "learned", dict(tokenizer="shifted")),
])
def test_overfits_a_tiny_batch_and_every_weight_gets_a_gradient(pool, position, options):
    model = small_vit(pool, dict(position=position, **options))
    x, y = np.tile(images(6), (10, 1, 1, 1)), np.tile(np.arange(6) % 3, 10)
    before = [to_numpy(w) for w in model.trainable_weights]
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=6, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.05
    unchanged = [w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)]
    assert not unchanged


def test_structure_names_and_features():
    model = small_vit()
    assert isinstance(model.get_layer("block_1"), EncoderBlock)
    features = small_vit(include_top=False)(images(2))
    assert tuple(features.shape) == (2, 32)
    probabilities = to_numpy(small_vit(head_activation="softmax")(images(2)))
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)


def test_uint8_and_float_pixels_give_the_same_result_and_rescale_is_documented_behaviour():
    model = small_vit()
    pixels = images(2)
    np.testing.assert_allclose(to_numpy(model(pixels)), to_numpy(model(pixels.astype("float32"))), atol=1e-6)
    unscaled = small_vit(backbone=dict(rescale=False))
    unscaled.set_weights(model.get_weights())
    np.testing.assert_allclose(
        to_numpy(unscaled(pixels.astype("float32") / 127.5 - 1.0)), to_numpy(model(pixels)), atol=1e-5
    )


def test_sincos2d_model_runs_on_another_image_size():
    model = small_vit()
    assert tuple(model(images(2, size=32)).shape) == (2, 3)
    assert tuple(model.predict(images(2, size=24), verbose=0).shape) == (2, 3)


def test_keras_file_round_trip(tmp_path):
    model = small_vit(backbone=dict(position="learned", drop_path=0.1, dropout=0.1), dropout=0.1)
    model.save(tmp_path / "vit.keras")
    loaded = keras.saving.load_model(tmp_path / "vit.keras")
    assert isinstance(loaded, ViT) and loaded.get_config() == model.get_config()
    x = images(3)
    np.testing.assert_array_equal(to_numpy(loaded.predict(x, verbose=0)), to_numpy(model.predict(x, verbose=0)))


def test_presets():
    model = ViT.from_preset("tiny", num_classes=10)
    assert model.patch_size == 4 and model.dim == 128 and model.num_classes == 10
    assert ViT.from_preset("ViT-B/16", include_top=False).count_params() == pytest.approx(85.8e6, rel=0.01)
    with pytest.raises(ValueError, match=r"Unknown ViT preset 'ViT-Z/8'"):
        ViT.from_preset("ViT-Z/8")


def test_bad_input():
    with pytest.raises(ValueError, match=r"image height \(30\) must be divisible by the patch height \(4\)"):
        ViTBackbone(**{**SMALL, "image_size": 30})
    model = small_vit()
    with pytest.raises(ValueError, match=r"image width \(18\) must be divisible by the patch width \(4\)"):
        model(np.zeros((1, 16, 18, 3), "float32"))
    with pytest.raises(ValueError, match=r"channels|shape"):
        model(np.zeros((1, 16, 16, 1), "float32"))
    with pytest.raises(ValueError, match=r"`pool` must be one of \['cls', 'mean', 'sequence'\].*pool='max'"):
        ViT(ViTBackbone(**SMALL), pool="max")


def test_small_data_options_reach_the_layers():
    model = small_vit("sequence", dict(tokenizer="shifted", locality=True))
    embedding = model.get_layer("patch_embedding")
    assert embedding.tokenizer == "shifted" and not embedding.class_token
    assert all(model.get_layer(f"block_{i}").attention.locality for i in range(2))
    assert type(model.get_layer("pool")).__name__ == "SequencePooling"
    assert tuple(model.get_layer("pool").output.shape) == (None, 32)


def test_cifar10_cpu_preset():
    model = ViT.from_preset("cifar10_cpu", num_classes=10)
    backbone = model.backbone
    assert (backbone.tokenizer, backbone.locality, model.pool, model.patch_size) == ("conv", True, "sequence", 4)
    assert tuple(model(images(2, size=32)).shape) == (2, 10)
    tokens = model.get_layer("patch_embedding")(np.zeros((1, 32, 32, 3), "float32"))
    assert tuple(tokens.shape) == (1, 64, 128)  # an 8x8 token grid, no [CLS] token


def test_the_vit_is_a_task_on_its_backbone_whose_layers_it_shares(tmp_path):
    """`ViT(backbone)` goes on from the backbone's own graph: the backbone's layers are the ViT's (training the ViT
    trains `vit.backbone`), its states are the ViT's `encoder_norm` output, and a `.keras` file round-trips both
    (the backbone saved once, inside the ViT's config). A head of one's own trains on a backbone (functional API,
    bf16, XLA where the backend has it)."""
    backbone = ViTBackbone(**SMALL, class_token=False)
    vit = ViT(backbone, num_classes=3, pool="mean")
    assert vit.backbone is backbone and vit.get_layer("block_1") is backbone.get_layer("block_1")
    assert {id(w) for w in backbone.weights} < {id(w) for w in vit.weights}
    assert len(vit.weights) == len(backbone.weights) + 2  # + the head's kernel and bias
    x = images(4)
    trunk = keras.Model(vit.input, vit.get_layer("encoder_norm").output)
    np.testing.assert_array_equal(to_numpy(backbone(x)), to_numpy(trunk(x)))
    vit.save(tmp_path / "vit.keras")
    loaded = keras.saving.load_model(tmp_path / "vit.keras")
    assert isinstance(loaded.backbone, ViTBackbone)
    assert loaded.get_layer("block_0") is loaded.backbone.get_layer("block_0")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(vit(x)))
    np.testing.assert_array_equal(to_numpy(loaded.backbone(x)), to_numpy(backbone(x)))

    keras.config.set_dtype_policy("mixed_bfloat16")
    backbone = ViTBackbone.from_preset("tiny", image_size=16, depth=1, dim=32, num_heads=2, mlp_dim=64)
    assert backbone.class_token and backbone.get_config()["class_token"] is True
    inputs = keras.Input((16, 16, 3))
    states = backbone(inputs)  # (batch, 1 + 16, 32)
    per_patch = keras.layers.Dense(2, dtype="float32")(states[:, 1:])  # a head of one's own: a class per patch
    model = keras.Model(inputs, per_patch)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile="auto")
    labels = (np.arange(4 * 16).reshape(4, 16) % 2)
    losses = model.fit(x, labels, epochs=8, batch_size=4, verbose=0).history["loss"]
    assert losses[-1] < losses[0] and np.isfinite(losses).all()
    model.save(tmp_path / "mine.keras")
    loaded = keras.saving.load_model(tmp_path / "mine.keras")
    np.testing.assert_array_equal(to_numpy(loaded.predict(x, verbose=0)), to_numpy(model.predict(x, verbose=0)))


def test_a_keras_file_of_release_0_1_loads_with_its_weights():
    """A ViT saved by keras_tfm 0.1.0 (tests/models/saved_by_0_1_0, written before the backbone was split out)
    loads and gives the outputs recorded when it was saved: the layer names and weight paths did not change."""
    import pathlib

    folder = pathlib.Path(__file__).parent / "saved_by_0_1_0"
    recorded = np.load(folder / "outputs.npz")
    model = keras.saving.load_model(folder / "vit.keras")
    np.testing.assert_allclose(to_numpy(model(recorded["vit_images"])), recorded["vit"], atol=1e-6)


def test_a_keras_file_of_release_0_3_loads_with_its_weights_optimizer_and_frozen_block():
    """A ViT saved by keras_tfm 0.3.0 (tests/models/saved_by_0_3_0: the sizes among the ViT's arguments, mean
    pooling without a [CLS] token, learned positions, ImageNet rescaling, block_0 frozen, one AdamW step taken)
    loads as a task on a backbone: the recorded outputs, the frozen block and the optimizer's state come back."""
    import pathlib

    folder = pathlib.Path(__file__).parent / "saved_by_0_3_0"
    recorded = np.load(folder / "outputs.npz")
    model = keras.saving.load_model(folder / "vit_mean_pool_frozen_block.keras")
    np.testing.assert_allclose(to_numpy(model(recorded["images"])), recorded["vit_mean_pool_frozen_block"], atol=1e-6)
    assert "dim" not in model.get_config() and model.backbone.dim == 16 and not model.backbone.class_token
    assert not model.get_layer("block_0").trainable and model.get_layer("block_1").trainable
    assert int(to_numpy(model.optimizer.iterations)) == int(recorded["optimizer_iterations"])


def test_sizes_among_the_vits_arguments_say_how_to_build_the_backbone():
    expected = r"ViT takes a ViTBackbone.*ViT\(ViTBackbone\(image_size=.*\['dim', 'image_size'\]"
    with pytest.raises(TypeError, match=expected):
        ViT(image_size=16, dim=32, num_classes=3)
    with pytest.raises(TypeError, match=r"`backbone` must be a keras_tfm ViTBackbone. Received: Sequential"):
        ViT(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(ValueError, match=r'pool="cls" reads the \[CLS\] token, and backbone .* has none'):
        ViT(ViTBackbone(**SMALL, class_token=False), pool="cls")
    with pytest.raises(TypeError, match=r"ViT got an unexpected keyword argument `dimm`.*`dim`"):
        ViT.from_preset("tiny", dimm=3)
    assert ViT(ViTBackbone(**SMALL)).pool == "cls" and ViT(ViTBackbone(**SMALL, class_token=False)).pool == "mean"
