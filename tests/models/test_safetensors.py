"""`keras_tfm.models._safetensors.read_safetensors`: the `safetensors` library reads the file; what is not a
complete safetensors file is a ValueError that names it (`load_vit_weights` and `TextEncoder.from_pretrained`
read through it)."""

import re

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from keras_tfm.models import ViT, ViTBackbone, load_vit_weights
from keras_tfm.models._safetensors import read_safetensors

pytestmark = pytest.mark.tensorflow_only(reason="file parsing: plain Python and NumPy")


def _write(path, **arrays):
    save_file({name: np.ascontiguousarray(array) for name, array in arrays.items()}, str(path))
    return path


def test_float_tensors_come_back_as_float32(tmp_path):
    values = np.arange(6, dtype="float32").reshape(2, 3)
    path = _write(tmp_path / "a.safetensors", f32=values, f16=values.astype("float16"),
                  bf16=values.astype(ml_dtypes.bfloat16), ids=np.arange(3, dtype="int64"))
    tensors = read_safetensors(path)
    assert set(tensors) == {"f32", "f16", "bf16", "ids"}
    for name in ("f32", "f16", "bf16"):
        assert tensors[name].dtype == np.float32
        np.testing.assert_array_equal(tensors[name], values)
    np.testing.assert_array_equal(tensors["ids"], [0, 1, 2])


def test_floats_only_refuses_an_integer_tensor_by_name(tmp_path):
    path = _write(tmp_path / "a.safetensors", ids=np.arange(3, dtype="int64"))
    with pytest.raises(ValueError, match=r"Tensor `ids` in .*a\.safetensors has dtype int64; only float64"):
        read_safetensors(path, floats_only=True)


@pytest.mark.parametrize("content", ["truncated", "not safetensors", "empty"])
def test_a_file_that_is_not_a_complete_safetensors_file_is_named(tmp_path, content):
    whole = _write(tmp_path / "whole.safetensors", x=np.ones((4, 4), "float32")).read_bytes()
    data = {"truncated": whole[:-10], "not safetensors": b"PK\x03\x04 a zip, say", "empty": b""}[content]
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    message = rf"{re.escape(str(path))} is not a readable safetensors file \(not one, or cut short\)"
    with pytest.raises(ValueError, match=message):
        read_safetensors(path)
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, position="learned"),
                num_classes=3)
    with pytest.raises(ValueError, match=message):
        load_vit_weights(model, path)
