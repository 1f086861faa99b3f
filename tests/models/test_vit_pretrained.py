"""`ViT.from_pretrained`: a ViT built from a checkpoint's own shape. DINOv2 (LayerScale, ImageNet normalisation)
against `transformers.Dinov2Model` itself, timm files in `.safetensors` and `.pth`, and the one-line errors for
files that are not checkpoints."""

import json

import keras
import numpy as np
import pytest

from keras_tfm.models import ViT, ViTBackbone
from keras_tfm.models.vit import IMAGENET_MEAN, IMAGENET_STD
from keras_tfm.models.vit_weights import checkpoint_arguments, load_vit_weights
from tests.models.test_vit_weights import (CLASSES, DEPTH, DIM, HEADS, IMAGE, MLP, PATCH, images, random_parameters,
                                           reference_vit, timm_tensors, write_safetensors)
from tests.pretrained_checkpoints import transformers_or_skip

pytestmark = pytest.mark.tensorflow_only(reason=(
    "checkpoint file porting, NumPy; the ported models' numbers are the contract's"))


def write_dinov2(folder, seed=0):
    """A random `Dinov2Model` saved by transformers (LayerScale vectors drawn away from 1, so that folding them
    matters). Returns the model in eval mode."""
    transformers = transformers_or_skip()
    import torch

    torch.manual_seed(seed)
    config = transformers.Dinov2Config(hidden_size=DIM, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                                       mlp_ratio=MLP // DIM, patch_size=PATCH, image_size=IMAGE, layer_norm_eps=1e-6)
    model = transformers.Dinov2Model(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lambda1" in name:
                parameter.copy_(torch.rand_like(parameter) + 0.2)
            elif "position_embeddings" in name or "cls_token" in name:
                parameter.normal_(std=0.5)
    model.save_pretrained(folder)
    return model


def imagenet_normalised(pixels):
    """What transformers' model takes: (pixels / 255 - mean) / std, channels first."""
    x = (pixels / 255.0 - np.asarray(IMAGENET_MEAN)) / np.asarray(IMAGENET_STD)
    return x.transpose(0, 3, 1, 2).astype("float32")


def test_dinov2_folder_matches_transformers_dinov2(tmp_path):
    import torch

    reference = write_dinov2(tmp_path)
    pixels = images()
    with torch.no_grad():
        expected = reference(pixel_values=torch.tensor(imagenet_normalised(pixels))).last_hidden_state.numpy()

    arguments = checkpoint_arguments(tmp_path)
    assert {key: arguments[key] for key in ("patch_size", "dim", "depth", "num_heads", "mlp_dim", "image_size",
                                            "rescale")} == dict(patch_size=PATCH, dim=DIM, depth=DEPTH,
                                                                 num_heads=HEADS, mlp_dim=MLP, image_size=IMAGE,
                                                                 rescale="imagenet")
    backbone = ViTBackbone.from_pretrained(tmp_path)
    np.testing.assert_allclose(backbone.predict(pixels, verbose=0), expected, atol=2e-5, rtol=1e-4)
    features = ViT.from_pretrained(tmp_path / "model.safetensors")  # the file, not the folder: the same
    np.testing.assert_allclose(features.predict(pixels, verbose=0), expected[:, 0], atol=2e-5, rtol=1e-4)


def test_from_pretrained_puts_a_zero_head_and_resamples_to_the_image_size(tmp_path):
    write_dinov2(tmp_path)
    model = ViT.from_pretrained(tmp_path, num_classes=3, image_size=2 * IMAGE)
    assert (model.image_size, model.num_classes, model.backbone.rescale) == (2 * IMAGE, 3, "imagenet")
    assert model.get_layer("patch_embedding").position_embeddings.shape == (1 + (2 * IMAGE // PATCH) ** 2, DIM)
    logits = model.predict(images(2 * IMAGE), verbose=0)
    np.testing.assert_array_equal(logits, np.zeros_like(logits))  # the paper's zero-initialised head
    with pytest.raises(TypeError, match=r"takes dim from the checkpoint \(dim=16\)"):
        ViT.from_pretrained(tmp_path, num_classes=3, dim=32)


def test_layer_scale_must_fit_the_model(tmp_path):
    write_dinov2(tmp_path)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(tmp_path / "model.safetensors")
    tensors["encoder.layer.0.layer_scale1.lambda1"] = np.ones(DIM + 1, "float32")
    save_file(tensors, tmp_path / "model.safetensors")
    model = ViT(ViTBackbone(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP,
                            position="learned"), include_top=False)
    with pytest.raises(ValueError, match=r"layer_scale1\.lambda1` has shape \(17,\).*needs \(16,\)"):
        load_vit_weights(model, tmp_path)


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_timm_files_build_their_own_shape_and_match_the_numpy_vit(tmp_path, suffix):
    params = random_parameters()
    tensors = timm_tensors(params)
    path = tmp_path / f"vit_tiny{suffix}"
    if suffix == ".pth":
        torch = pytest.importorskip("torch")
        torch.save({"model": {name: torch.tensor(np.asarray(array, "float32")) for name, array in tensors.items()}},
                   path)  # a training checkpoint: the state dict under "model"
    else:
        write_safetensors(path, tensors)
    arguments = checkpoint_arguments(path)
    assert (arguments["dim"], arguments["depth"], arguments["mlp_dim"], arguments["image_size"]) == (
        DIM, DEPTH, MLP, IMAGE)
    assert (arguments["num_heads"], arguments["heads_recorded"], arguments["rescale"]) == (1, False, True)
    # timm files do not record the heads: the caller may say how many (and only then).
    features = ViT.from_pretrained(path, num_heads=HEADS)
    x = images()
    np.testing.assert_allclose(features.predict(x, verbose=0), reference_vit(x, params, include_top=False),
                               atol=1e-4, rtol=1e-4)


def test_imagenet_rescaling_is_imagenets_mean_and_std_and_round_trips(tmp_path):
    sizes = dict(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=1, num_heads=HEADS, mlp_dim=MLP)
    normalising = ViT(ViTBackbone(rescale="imagenet", **sizes), num_classes=CLASSES)
    plain = ViT(ViTBackbone(rescale=False, **sizes), num_classes=CLASSES)
    plain.set_weights(normalising.get_weights())
    x = images()
    expected = plain.predict(imagenet_normalised(x).transpose(0, 2, 3, 1), verbose=0)
    np.testing.assert_allclose(normalising.predict(x, verbose=0), expected, atol=1e-5)
    path = tmp_path / "vit.keras"
    normalising.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.backbone.rescale == "imagenet"
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), normalising.predict(x, verbose=0))
    with pytest.raises(ValueError, match=r"`rescale` must be one of \[True, False, 'imagenet'\]. Received: "
                                         r"rescale='imagenet21k'"):
        ViTBackbone(rescale="imagenet21k", **sizes)


@pytest.mark.parametrize("name, content, message", [
    ("notes.txt", b"hello", r"Unknown checkpoint format.*Received: path='.*notes\.txt'"),
    ("model.keras", b"PK", r"model\.keras is a whole saved Keras model, not a checkpoint of weights"),
    ("broken.npz", b"PK\x03\x04 cut short", r"broken\.npz is not a readable \.npz checkpoint"),
    ("broken.pth", b"\x80\x02 not a state dict", r"broken\.pth is not a readable PyTorch checkpoint"),
])
def test_files_that_are_not_checkpoints_get_one_line(tmp_path, name, content, message):
    if name.endswith(".pth"):
        pytest.importorskip("torch")
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        checkpoint_arguments(tmp_path / name)
    assert "\n" not in str(error.value)


def test_a_folder_without_weights_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    with pytest.raises(FileNotFoundError, match=r"holds no model\.safetensors"):
        ViT.from_pretrained(tmp_path)


def test_frozen_blocks_stay_frozen_in_a_saved_model_and_its_optimizer_loads(tmp_path):
    import warnings

    model = ViT(ViTBackbone(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP,
                            position="learned"), num_classes=CLASSES)
    model.freeze_lower_blocks(1)
    model.compile_for_training()
    x, y = images(batch=4), np.arange(4) % CLASSES
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "vit.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns when it skips the saved optimizer's variables
        loaded = keras.saving.load_model(tmp_path / "vit.keras")
    frozen = [layer.name for layer in loaded.layers if not layer.trainable]
    assert frozen == [layer.name for layer in model.layers if not layer.trainable]
    assert {"patch_embedding", "block_0"} <= set(frozen) and "block_1" not in frozen
    assert len(loaded.trainable_weights) == len(model.trainable_weights)
    assert [v.numpy().tolist() for v in loaded.optimizer.variables] == [v.numpy().tolist()
                                                                       for v in model.optimizer.variables]
