"""load_vit_weights: random checkpoints in each naming scheme, checked against a NumPy ViT run on the same numbers."""

import json
import math
import re

import numpy as np
import pytest

from keras_tfm.layers import resample_position_embeddings
from keras_tfm.models import VIT_PRESETS, ViT, ViTBackbone
from keras_tfm.models.vit_weights import load_vit_weights
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "checkpoint file porting, NumPy; the ported models' numbers are the contract's"))

IMAGE, PATCH, DIM, DEPTH, HEADS, MLP, CLASSES = 16, 4, 16, 2, 2, 32, 5
HEAD_DIM = DIM // HEADS
GRID = IMAGE // PATCH


def vit(num_classes=CLASSES, include_top=True, **overrides):
    config = dict(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP,
                  position="learned")
    return ViT(ViTBackbone(**{**config, **overrides}), num_classes=num_classes, include_top=include_top)


# ----------------------------------------------------------------------------------------------------------
# Parameters as plain matrices (every projection is x @ W + b, W of shape (in, out); attention columns are
# ordered head by head), and a ViT forward pass written from them in NumPy.


def random_parameters(classes=CLASSES, seed=0):
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.2):
        return rng.normal(scale=scale, size=shape)

    def block():
        parts = {name: normal(DIM, DIM) for name in ("query", "key", "value", "out")}
        parts.update({f"{name}_bias": normal(DIM) for name in ("query", "key", "value", "out")})
        parts.update(norm1_scale=1 + normal(DIM, scale=0.1), norm1_bias=normal(DIM, scale=0.1))
        parts.update(norm2_scale=1 + normal(DIM, scale=0.1), norm2_bias=normal(DIM, scale=0.1))
        parts.update(fc1=normal(DIM, MLP), fc1_bias=normal(MLP), fc2=normal(MLP, DIM), fc2_bias=normal(DIM))
        return parts

    return {
        "patch_kernel": normal(PATCH, PATCH, 3, DIM, scale=0.05),  # (patch_h, patch_w, channels, dim)
        "patch_bias": normal(DIM),
        "cls": normal(1, 1, DIM),
        "positions": normal(1 + GRID * GRID, DIM),  # row 0 is the [CLS] token's
        "blocks": [block() for _ in range(DEPTH)],
        "norm_scale": 1 + normal(DIM, scale=0.1),
        "norm_bias": normal(DIM, scale=0.1),
        "head_kernel": normal(DIM, classes),
        "head_bias": normal(classes),
    }


def rounded(params, dtype):
    """The parameters as a checkpoint stored in `dtype` holds them (so the reference sees the same numbers)."""
    if isinstance(params, dict):
        return {name: rounded(value, dtype) for name, value in params.items()}
    if isinstance(params, list):
        return [rounded(value, dtype) for value in params]
    if dtype == "F16":
        return params.astype("float16").astype("float64")
    if dtype == "BF16":  # keep the high 16 bits of each float32
        return (params.astype("<f4").view("<u4") & np.uint32(0xFFFF0000)).view("<f4").astype("float64")
    return params


def layer_norm(x, scale, bias, epsilon=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + epsilon) * scale + bias


def gelu(x):  # the exact form, 0.5 x (1 + erf(x / √2))
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_vit(images, p, include_top=True):
    x = images.astype("float64") / 127.5 - 1.0  # the model's rescaling to [-1, 1]
    batch, height, width, channels = x.shape
    rows, columns = height // PATCH, width // PATCH
    patches = x.reshape(batch, rows, PATCH, columns, PATCH, channels).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(batch, rows * columns, PATCH * PATCH * channels)  # row-major, each (ph, pw, C)
    tokens = patches @ p["patch_kernel"].reshape(-1, DIM) + p["patch_bias"]
    x = np.concatenate([np.broadcast_to(p["cls"], (batch, 1, DIM)), tokens], axis=1) + p["positions"]
    for b in p["blocks"]:
        h = layer_norm(x, b["norm1_scale"], b["norm1_bias"])
        q, k, v = ((h @ b[n] + b[f"{n}_bias"]).reshape(batch, -1, HEADS, HEAD_DIM) for n in ("query", "key", "value"))
        weights = softmax(np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HEAD_DIM))
        attended = np.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, -1, DIM)
        x = x + attended @ b["out"] + b["out_bias"]
        h = layer_norm(x, b["norm2_scale"], b["norm2_bias"])
        x = x + gelu(h @ b["fc1"] + b["fc1_bias"]) @ b["fc2"] + b["fc2_bias"]
    features = layer_norm(x, p["norm_scale"], p["norm_bias"])[:, 0]  # the [CLS] token
    return features @ p["head_kernel"] + p["head_bias"] if include_top else features


# ----------------------------------------------------------------------------------------------------------
# The same parameters under each checkpoint's names and layouts.


def original_tensors(p):
    """google-research/vision_transformer (Flax): kernels (in, out), attention kernels split into heads."""
    t = {
        "embedding/kernel": p["patch_kernel"],
        "embedding/bias": p["patch_bias"],
        "cls": p["cls"],
        "Transformer/posembed_input/pos_embedding": p["positions"][None],
        "Transformer/encoder_norm/scale": p["norm_scale"],
        "Transformer/encoder_norm/bias": p["norm_bias"],
        "head/kernel": p["head_kernel"],
        "head/bias": p["head_bias"],
    }
    for i, b in enumerate(p["blocks"]):
        root = f"Transformer/encoderblock_{i}/"
        for name in ("query", "key", "value"):
            t[f"{root}MultiHeadDotProductAttention_1/{name}/kernel"] = b[name].reshape(DIM, HEADS, HEAD_DIM)
            t[f"{root}MultiHeadDotProductAttention_1/{name}/bias"] = b[f"{name}_bias"].reshape(HEADS, HEAD_DIM)
        t[f"{root}MultiHeadDotProductAttention_1/out/kernel"] = b["out"].reshape(HEADS, HEAD_DIM, DIM)
        t[f"{root}MultiHeadDotProductAttention_1/out/bias"] = b["out_bias"]
        t[f"{root}LayerNorm_0/scale"], t[f"{root}LayerNorm_0/bias"] = b["norm1_scale"], b["norm1_bias"]
        t[f"{root}LayerNorm_2/scale"], t[f"{root}LayerNorm_2/bias"] = b["norm2_scale"], b["norm2_bias"]
        t[f"{root}MlpBlock_3/Dense_0/kernel"], t[f"{root}MlpBlock_3/Dense_0/bias"] = b["fc1"], b["fc1_bias"]
        t[f"{root}MlpBlock_3/Dense_1/kernel"], t[f"{root}MlpBlock_3/Dense_1/bias"] = b["fc2"], b["fc2_bias"]
    return t


def timm_tensors(p):
    """timm: PyTorch (out, in) weights, query|key|value fused in `attn.qkv`."""
    t = {
        "patch_embed.proj.weight": p["patch_kernel"].transpose(3, 2, 0, 1),  # (dim, channels, patch_h, patch_w)
        "patch_embed.proj.bias": p["patch_bias"],
        "cls_token": p["cls"],
        "pos_embed": p["positions"][None],
        "norm.weight": p["norm_scale"],
        "norm.bias": p["norm_bias"],
        "head.weight": p["head_kernel"].T,
        "head.bias": p["head_bias"],
    }
    for i, b in enumerate(p["blocks"]):
        root = f"blocks.{i}."
        t[root + "attn.qkv.weight"] = np.concatenate([b["query"].T, b["key"].T, b["value"].T])  # (3 dim, dim)
        t[root + "attn.qkv.bias"] = np.concatenate([b["query_bias"], b["key_bias"], b["value_bias"]])
        t[root + "attn.proj.weight"], t[root + "attn.proj.bias"] = b["out"].T, b["out_bias"]
        t[root + "norm1.weight"], t[root + "norm1.bias"] = b["norm1_scale"], b["norm1_bias"]
        t[root + "norm2.weight"], t[root + "norm2.bias"] = b["norm2_scale"], b["norm2_bias"]
        t[root + "mlp.fc1.weight"], t[root + "mlp.fc1.bias"] = b["fc1"].T, b["fc1_bias"]
        t[root + "mlp.fc2.weight"], t[root + "mlp.fc2.bias"] = b["fc2"].T, b["fc2_bias"]
    return t


def huggingface_tensors(p, prefix="vit.", head=True):
    """transformers' ViTForImageClassification (prefix "vit.") or a bare ViTModel (prefix "", no head)."""
    t = {
        f"{prefix}embeddings.patch_embeddings.projection.weight": p["patch_kernel"].transpose(3, 2, 0, 1),
        f"{prefix}embeddings.patch_embeddings.projection.bias": p["patch_bias"],
        f"{prefix}embeddings.cls_token": p["cls"],
        f"{prefix}embeddings.position_embeddings": p["positions"][None],
        f"{prefix}layernorm.weight": p["norm_scale"],
        f"{prefix}layernorm.bias": p["norm_bias"],
    }
    if head:
        t["classifier.weight"], t["classifier.bias"] = p["head_kernel"].T, p["head_bias"]
    for i, b in enumerate(p["blocks"]):
        root = f"{prefix}encoder.layer.{i}."
        for name in ("query", "key", "value"):
            t[f"{root}attention.attention.{name}.weight"] = b[name].T
            t[f"{root}attention.attention.{name}.bias"] = b[f"{name}_bias"]
        t[root + "attention.output.dense.weight"], t[root + "attention.output.dense.bias"] = b["out"].T, b["out_bias"]
        t[root + "layernorm_before.weight"], t[root + "layernorm_before.bias"] = b["norm1_scale"], b["norm1_bias"]
        t[root + "layernorm_after.weight"], t[root + "layernorm_after.bias"] = b["norm2_scale"], b["norm2_bias"]
        t[root + "intermediate.dense.weight"], t[root + "intermediate.dense.bias"] = b["fc1"].T, b["fc1_bias"]
        t[root + "output.dense.weight"], t[root + "output.dense.bias"] = b["fc2"].T, b["fc2_bias"]
    return t


WRITERS = {"original": original_tensors, "timm": timm_tensors, "huggingface": huggingface_tensors}


def write_safetensors(path, tensors, dtype="F32"):
    """Written by the `safetensors` package itself, so that a misreading of the format in our reader cannot be
    mirrored by the test's writer."""
    import ml_dtypes
    from safetensors.numpy import save_file

    numpy_dtype = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}[dtype]
    arrays = {name: np.ascontiguousarray(np.asarray(array, "float32").astype(numpy_dtype)) for name, array in tensors.items()}
    save_file(arrays, str(path), metadata={"format": "pt"})


def save(tmp_path, scheme, tensors, dtype="F32"):
    if scheme == "original":
        path = tmp_path / "ViT-test.npz"
        np.savez(path, **{name: np.asarray(array, "float32") for name, array in tensors.items()})
        return path
    if scheme == "huggingface":  # a transformers model folder has its config beside the weights
        (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": HEADS, "hidden_size": DIM}))
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors, dtype)
    return path


def images(size=IMAGE, batch=2, seed=1):
    height, width = size if isinstance(size, tuple) else (size, size)
    return np.random.default_rng(seed).uniform(0, 255, size=(batch, height, width, 3)).astype("float32")


# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme, dtype", [("original", "F32"), ("timm", "F32"), ("timm", "F16"), ("huggingface", "BF16")]
)
def test_loaded_model_matches_a_numpy_vit_of_the_checkpoint(tmp_path, scheme, dtype):
    params = rounded(random_parameters(), dtype)
    model = load_vit_weights(vit(), save(tmp_path, scheme, WRITERS[scheme](params), dtype))
    x = images()
    np.testing.assert_allclose(model.predict(x, verbose=0), reference_vit(x, params), atol=1e-4, rtol=1e-4)


def test_bare_huggingface_model_loads_into_a_model_without_top(tmp_path):
    params = random_parameters()
    path = save(tmp_path, "huggingface", huggingface_tensors(params, prefix="", head=False))
    model = load_vit_weights(vit(include_top=False), path)
    x = images()
    np.testing.assert_allclose(model.predict(x, verbose=0), reference_vit(x, params, False), atol=1e-4, rtol=1e-4)


def test_a_backbone_takes_the_checkpoints_trunk_for_a_head_of_ones_own(tmp_path):
    """`ViTBackbone` (the trunk alone) loads a classifier's checkpoint, its head ignored: its [CLS] state is the
    reference ViT's pre-head feature; a ViT on a loaded backbone classifies with the same states."""
    params = random_parameters()
    path = save(tmp_path, "timm", timm_tensors(params))
    backbone = ViTBackbone(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP,
                           position="learned")
    load_vit_weights(backbone, path)
    x = images()
    states = to_numpy(backbone.predict(x, verbose=0))  # (batch, 1 + patches, dim)
    assert states.shape == (2, 1 + (IMAGE // PATCH) ** 2, DIM)
    np.testing.assert_allclose(states[:, 0], reference_vit(x, params, False), atol=1e-4, rtol=1e-4)
    classifier = load_vit_weights(vit(), path)
    np.testing.assert_array_equal(to_numpy(classifier.backbone.predict(x, verbose=0)), states)
    with pytest.raises(ValueError, match=r'position="learned", class_token=True \(the "ViT-\*" presets do\)'):
        load_vit_weights(ViTBackbone(image_size=IMAGE, patch_size=PATCH, dim=DIM, depth=DEPTH, num_heads=HEADS,
                                     mlp_dim=MLP, position="learned", class_token=False), path)


@pytest.mark.parametrize("size", [8, (8, 16)])
def test_position_table_is_resampled_to_the_model_grid(tmp_path, size):
    params = random_parameters()  # a 4x4 grid of positions
    model = load_vit_weights(vit(image_size=size), save(tmp_path, "original", original_tensors(params)))
    grid = (8 // PATCH, 8 // PATCH) if size == 8 else (8 // PATCH, 16 // PATCH)
    expected = to_numpy(resample_position_embeddings(params["positions"].astype("float32"), (GRID, GRID), grid))
    table = to_numpy(model.get_layer("patch_embedding").position_embeddings)
    assert table.shape == (1 + grid[0] * grid[1], DIM)
    np.testing.assert_allclose(table, expected, atol=1e-6)
    np.testing.assert_allclose(table[0], params["positions"][0], atol=1e-6)  # the [CLS] row is kept
    x = images(size)
    resampled = {**params, "positions": expected}
    np.testing.assert_allclose(model.predict(x, verbose=0), reference_vit(x, resampled), atol=1e-4, rtol=1e-4)


def test_unused_checkpoint_tensor_is_named(tmp_path):
    tensors = timm_tensors(random_parameters())
    tensors["blocks.0.attn.q_norm.weight"] = np.ones(DIM)  # query norm: a timm variant our ViT does not have
    with pytest.raises(ValueError, match=r"no place for: `blocks\.0\.attn\.q_norm\.weight`"):
        load_vit_weights(vit(), save(tmp_path, "timm", tensors))


def test_pre_logits_is_unused_unless_the_head_is_skipped(tmp_path):
    params = random_parameters()
    tensors = original_tensors(params)
    tensors["pre_logits/kernel"], tensors["pre_logits/bias"] = np.eye(DIM), np.zeros(DIM)
    path = save(tmp_path, "original", tensors)
    with pytest.raises(ValueError, match=r"`pre_logits/bias`, `pre_logits/kernel`(.|\n)*skip_head=True"):
        load_vit_weights(vit(), path)
    model = load_vit_weights(vit(include_top=False), path)  # the classifier, pre_logits included, is skipped
    x = images(batch=1)
    np.testing.assert_allclose(to_numpy(model(x)), reference_vit(x, params, include_top=False), atol=1e-4, rtol=1e-4)


def test_missing_tensor_names_the_weight_and_the_checkpoint_name(tmp_path):
    tensors = original_tensors(random_parameters())
    del tensors["Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias"]
    with pytest.raises(ValueError, match=r"`block_1/feed_forward/output/bias` \(checkpoint name "
                                         r"`Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias`\)"):
        load_vit_weights(vit(), save(tmp_path, "original", tensors))


def test_wrong_shape_names_the_tensor_and_both_shapes_and_loads_nothing(tmp_path):
    tensors = huggingface_tensors(random_parameters())
    tensors["vit.layernorm.weight"] = np.ones(DIM + 1)
    model = vit()
    before = [to_numpy(w) for w in model.weights]
    message = "`vit.layernorm.weight` has shape (17,) in the checkpoint, but the model's `encoder_norm/gamma` "
    message += "of shape (16,) needs (16,)"
    with pytest.raises(ValueError, match=re.escape(message)):
        load_vit_weights(model, save(tmp_path, "huggingface", tensors))
    for old, weight in zip(before, model.weights):
        np.testing.assert_array_equal(to_numpy(weight), old)


def test_head_of_another_size_needs_skip_head_which_keeps_the_fresh_head(tmp_path):
    params = random_parameters(classes=7)
    path = save(tmp_path, "timm", timm_tensors(params))
    model = vit()  # 5 classes
    with pytest.raises(ValueError, match=r"`head\.weight` has shape \(7, 16\)(.|\n)*skip_head=True"):
        load_vit_weights(model, path)
    head = model.get_layer("head")
    fresh = [to_numpy(w) for w in head.weights]
    load_vit_weights(model, path, skip_head=True)
    for old, weight in zip(fresh, head.weights):
        np.testing.assert_array_equal(to_numpy(weight), old)
    x = images(batch=1)
    features = reference_vit(x, params, include_top=False)
    np.testing.assert_allclose(to_numpy(model(x)), features @ fresh[0] + fresh[1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "scheme, overrides, message",
    [
        ("original", {"depth": 1}, "depth=2"),
        ("original", {"num_heads": 4}, "num_heads=2"),
        ("timm", {"mlp_dim": 64}, "mlp_dim=32"),
        ("huggingface", {"num_heads": 4}, "num_heads=2"),  # read from config.json
    ],
)
def test_architecture_mismatch_says_which_sizes_to_build(tmp_path, scheme, overrides, message):
    path = save(tmp_path, scheme, WRITERS[scheme](random_parameters()))
    with pytest.raises(ValueError, match=f"is a ViT with .*{message}.*; build the model with those sizes"):
        load_vit_weights(vit(**overrides), path)


def test_width_mismatch_is_read_from_the_class_token(tmp_path):
    tensors = timm_tensors(random_parameters())
    tensors["cls_token"] = np.zeros((1, 1, 2 * DIM))
    with pytest.raises(ValueError, match=r"is a ViT with dim=32; build the model with those sizes. Received: dim=16"):
        load_vit_weights(vit(), save(tmp_path, "timm", tensors))


@pytest.mark.parametrize("overrides", [{"position": "sincos2d"}, {"class_token": False}])
def test_models_without_learned_positions_and_cls_token_are_refused(tmp_path, overrides):
    path = save(tmp_path, "original", original_tensors(random_parameters()))
    expected = r'build the backbone with position="learned", class_token=True \(the "ViT-\*"'
    with pytest.raises(ValueError, match=expected):
        load_vit_weights(vit(**overrides), path)


@pytest.mark.parametrize("overrides", [{"tokenizer": "conv"}, {"tokenizer": "shifted"}, {"locality": True}])
def test_models_with_the_small_data_options_are_refused(tmp_path, overrides):
    path = save(tmp_path, "original", original_tensors(random_parameters()))
    with pytest.raises(ValueError, match=r'build the model with tokenizer="linear", locality=False. Received'):
        load_vit_weights(vit(**overrides), path)


def test_unknown_file_suffix_is_refused(tmp_path):
    (tmp_path / "weights.h5").write_bytes(b"\0" * 8)
    with pytest.raises(ValueError, match=r"must end in `\.npz`.*`\.safetensors`.*or `\.pth`"):
        load_vit_weights(vit(), tmp_path / "weights.h5")


def test_a_missing_file_is_the_first_thing_reported(tmp_path, monkeypatch):
    missing = tmp_path / "ViT-B_16.npz"
    # A model that is wrong in another way too: the missing file must still be what the error names.
    with pytest.raises(FileNotFoundError, match=rf"No ViT checkpoint at `path`: '{re.escape(str(missing))}' is not a"):
        load_vit_weights(vit(position="sincos2d"), missing)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'weights\.npz' \(relative to '.+'\) is not a file"):
        load_vit_weights(vit(), "weights.npz")


def test_vit_presets_are_built_to_take_checkpoints_as_they_are(tmp_path):
    params = random_parameters()
    sizes = dict(image_size=IMAGE, patch_size=PATCH, num_classes=CLASSES, dim=DIM, depth=DEPTH, num_heads=HEADS,
                 mlp_dim=MLP)
    model = ViT.from_preset("ViT-B/16", **sizes)  # the preset's layout, small sizes
    assert (model.backbone.position, model.pool) == ("learned", "cls")
    load_vit_weights(model, save(tmp_path, "original", original_tensors(params)))
    x = images()
    np.testing.assert_allclose(model.predict(x, verbose=0), reference_vit(x, params), atol=1e-4, rtol=1e-4)
    assert all(VIT_PRESETS[name]["position"] == "learned" and VIT_PRESETS[name]["pool"] == "cls"
               for name in VIT_PRESETS if name.startswith("ViT-"))
    assert ViT.from_preset("tiny").backbone.position == "sincos2d"  # the from-scratch sizes keep the default
