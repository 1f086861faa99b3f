"""Parameter-efficient fine-tuning: `enable_lora` (Keras' LoRA on our attention projections) and a frozen
word-piece table, on TextEncoder, TextClassifier and ViT."""

import warnings

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.models import TextClassifier, TextEncoder, ViT, ViTBackbone


def small_classifier():
    keras.utils.set_random_seed(0)
    return TextClassifier.from_preset("tiny", vocab_size=30, max_length=10, dim=16, depth=2, num_heads=2, mlp_dim=32,
                                      num_classes=2)


def ids_and_labels():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30, (16, 10)).astype("int32")
    return ids, (ids[:, 0] > 15).astype("int32")


def test_lora_starts_where_the_model_was_and_trains_only_the_updates_and_the_head(tmp_path):
    model = small_classifier()
    ids, labels = ids_and_labels()
    before = keras.ops.convert_to_numpy(model(ids))
    frozen = {v.path: keras.ops.convert_to_numpy(v).copy() for v in model.weights}
    trainable = model.enable_lora(4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(ids)), before, atol=1e-6)  # B starts at zero
    names = sorted(v.path for v in model.trainable_weights)
    assert names and all("lora_kernel" in n or n.startswith("head/") or n.endswith("/bias") for n in names), names
    assert sum("lora_kernel_a" in n for n in names) == 2 * 2  # query and value of both blocks
    assert trainable == sum(int(np.prod(v.shape)) for v in model.trainable_weights) < model.count_params() / 4
    model.compile_for_training(keras.optimizers.Adam(1e-2))
    model.fit(ids, labels, epochs=3, batch_size=8, verbose=0)
    for v in model.weights:  # nothing frozen moved
        if v.path in frozen and not v.trainable and "kernel" in v.path and "lora" not in v.path:
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(v), frozen[v.path], err_msg=v.path)
    after = keras.ops.convert_to_numpy(model(ids))
    assert np.abs(after - before).max() > 1e-3  # the updates learned
    path = str(tmp_path / "lora.keras")
    model.save(path)  # Keras merges A·B into each kernel
    # The optimizer's state belongs to the variables LoRA trained (A and B among them), which the file no longer
    # has: Keras says so and leaves it out (the module's docstring tells users); the weights load exactly.
    with pytest.warns(UserWarning, match="Skipping variable loading for optimizer"):
        loaded = keras_tfm.load_model(path)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(ids)), after, atol=1e-5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Skipping variable loading")
        quiet = keras_tfm.load_model(path, compile=False)  # the way to load it without that warning
    np.testing.assert_allclose(keras.ops.convert_to_numpy(quiet(ids)), after, atol=1e-5)
    assert not any("lora" in v.path for v in loaded.weights)


def test_lora_on_a_backbone_and_a_vit_and_bad_arguments():
    encoder = TextEncoder(vocab_size=30, max_length=10, dim=16, depth=1, num_heads=2, mlp_dim=32)
    encoder.enable_lora(2, targets=("query", "key", "value", "output"))
    assert all("lora_kernel" in v.path or v.path.endswith("/bias") for v in encoder.trainable_weights)
    vit = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32), num_classes=3)
    vit.enable_lora(2)
    assert any(v.path.startswith("head/") for v in vit.trainable_weights)
    with pytest.raises(ValueError, match="rank.*Received: rank=0"):
        small_classifier().enable_lora(0)
    with pytest.raises(ValueError, match="targets.*'keys'"):
        small_classifier().enable_lora(2, targets=("keys",))


def test_a_frozen_token_table_stays_as_it_was():
    model = small_classifier()
    ids, labels = ids_and_labels()
    model.freeze_token_embedding()
    table = model.encoder.get_layer("token_embedding")
    kept = [keras.ops.convert_to_numpy(v).copy() for v in table.weights]
    assert not any(v.trainable for v in table.weights)
    model.compile_for_training(keras.optimizers.Adam(1e-2))
    model.fit(ids, labels, epochs=1, batch_size=8, verbose=0)
    for v, old in zip(table.weights, kept):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(v), old)


def test_frozen_lower_blocks_stay_as_they_were_and_the_upper_ones_learn():
    model = small_classifier()  # two blocks
    ids, labels = ids_and_labels()
    assert model.freeze_lower_blocks(1) < sum(int(np.prod(v.shape)) for v in model.weights)
    frozen = [model.encoder.get_layer(name) for name in ("token_embedding", "block_0")]
    learning = model.encoder.get_layer("block_1")
    kept = [keras.ops.convert_to_numpy(v).copy() for layer in frozen for v in layer.weights]
    before = [keras.ops.convert_to_numpy(v).copy() for v in learning.weights]
    model.compile_for_training(keras.optimizers.Adam(1e-2))
    model.fit(ids, labels, epochs=1, batch_size=8, verbose=0)
    for v, old in zip([v for layer in frozen for v in layer.weights], kept):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(v), old)
    assert all(np.any(keras.ops.convert_to_numpy(v) != old) for v, old in zip(learning.weights, before))
    # every block frozen: the final norm and the head learn; a ViT freezes its patch embedding and blocks the same way
    model = small_classifier()
    model.freeze_lower_blocks(2)
    assert [layer.name for layer in model.encoder.layers if layer.trainable_weights] == ["encoder_norm"]
    assert [layer.name for layer in model.layers if layer.trainable_weights] == ["encoder", "head"]
    vit = ViT(ViTBackbone(image_size=8, patch_size=4, dim=8, depth=2, num_heads=2, mlp_dim=16), num_classes=2)
    vit.freeze_lower_blocks(1)
    assert not vit.get_layer("patch_embedding").trainable and vit.get_layer("block_1").trainable
    for bad in (3, -1, 1.0, True):
        with pytest.raises(ValueError, match=rf"`count` must be an int from 0 to the number of blocks \(2\)"):
            small_classifier().freeze_lower_blocks(bad)
