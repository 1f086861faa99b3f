"""Loading pretrained BERT-family checkpoints (HuggingFace folders) into `keras_tfm.models.TextEncoder`.

A HuggingFace folder holds `config.json` (the architecture) and `model.safetensors` (a flat dict of named
arrays). Loading one is three steps:

    config.json        --> the TextEncoder's arguments         (model_type bert, distilbert or roberta)
    every tensor name  --> one weight of the encoder           (else ValueError naming what is left over)
    every tensor       --> the weight's layout                 (PyTorch Linear (out, in) -> Keras (in, out),
                                                                 query/key/value split into heads)

The three families differ only in names and in three switches of the encoder:

    bert        "encoder.layer.{i}.attention.self.query"   segments (token types), pooler
    roberta     the same names                             padding id 1, positions start at row 2
    distilbert  "transformer.layer.{i}.attention.q_lin"    no segments, no pooler

All three are post-norm (`norm_first=False`, the 2017 layout), with learned positions, a layer norm on the
embeddings and no √dim scaling of the token vectors. The layouts and the checks are `keras_tfm.models._porting`'s,
shared with the ViT loader.
"""

import json
import os
import time
import warnings

from keras_tfm.models import _porting
from keras_tfm.models._porting import SAME, TORCH_HEADS_BIAS, TORCH_HEADS_IN, TORCH_HEADS_OUT, TORCH_LINEAR
from keras_tfm.models._safetensors import read_safetensors

MODEL_TYPES = ("bert", "distilbert", "roberta")
# Tensors of a task head (a classifier, a masked-LM head) stored beside the encoder: not part of it, skipped.
_TASK_HEAD_PREFIXES = ("cls.", "classifier.", "pre_classifier.", "lm_head.", "vocab_transform.", "vocab_layer_norm.",
                       "vocab_projector.", "qa_outputs.", "dropout.")
# Buffers some checkpoints carry: position ids 0, 1, 2, ... (not weights).
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "tanh": "tanh", "silu": "silu", "swish": "silu"}


def read_config(folder):
    """The checkpoint's `config.json` as a dict; a clear error for a missing folder, file or `model_type`."""
    if not os.path.isdir(folder):
        raise ValueError(f"`folder` must be a checkpoint folder (config.json + model.safetensors). Received: "
                         f"{folder!r}, which is not a folder.")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"No config.json in {folder!r}: a HuggingFace checkpoint folder has config.json and "
                         f"model.safetensors. Found: {sorted(os.listdir(folder))}")
    try:
        with open(path) as file:
            config = json.load(file)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"Unsupported model_type {model_type!r} in {path}. Supported: {list(MODEL_TYPES)}.")
    return config


def encoder_arguments(config):
    """The `TextEncoder` arguments a HuggingFace config describes."""
    model_type = config["model_type"]
    if model_type == "distilbert":
        activation = config.get("activation", "gelu")
        arguments = dict(
            vocab_size=config["vocab_size"], max_length=config["max_position_embeddings"], dim=config["dim"],
            depth=config["n_layers"], num_heads=config["n_heads"], mlp_dim=config["hidden_dim"], num_segments=0,
            dropout=config.get("dropout", 0.1), attention_dropout=config.get("attention_dropout", 0.1),
            layer_norm_epsilon=1e-12, padding_id=config.get("pad_token_id", 0), pooler=False, position_offset=0,
        )
    else:
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"Only absolute position embeddings are supported. Received position_embedding_type="
                             f"{config['position_embedding_type']!r}")
        activation = config.get("hidden_act", "gelu")
        padding_id = config.get("pad_token_id", 1 if model_type == "roberta" else 0)
        offset = padding_id + 1 if model_type == "roberta" else 0  # RoBERTa numbers positions from padding_id + 1
        arguments = dict(
            vocab_size=config["vocab_size"], max_length=config["max_position_embeddings"] - offset,
            dim=config["hidden_size"], depth=config["num_hidden_layers"], num_heads=config["num_attention_heads"],
            mlp_dim=config["intermediate_size"], num_segments=config.get("type_vocab_size", 2),
            dropout=config.get("hidden_dropout_prob", 0.1),
            attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
            layer_norm_epsilon=config.get("layer_norm_eps", 1e-12), padding_id=padding_id, position_offset=offset,
        )
    if activation not in _ACTIVATIONS:
        raise ValueError(f"Unsupported activation {activation!r} in config.json. Supported: {sorted(_ACTIVATIONS)}")
    # No dropout after the MLP activation: BERT, DistilBERT and RoBERTa drop only after the output projection.
    arguments.update(position="learned", scale_embeddings=False, embedding_norm=True, norm_first=False,
                     final_norm=False, mlp_activation=_ACTIVATIONS[activation], activation_dropout=0.0)
    return arguments


def read_tensors(folder):
    """`{name: NumPy array}` from the folder's `model.safetensors`, read with the safetensors library."""
    path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(path):
        found = sorted(os.listdir(folder))
        hint = " (pytorch_model.bin is not read: convert it to safetensors)" if "pytorch_model.bin" in found else ""
        raise ValueError(f"No model.safetensors in {folder!r}{hint}. Found: {found}")
    return read_safetensors(path)


def _strip_prefix(tensors, model_type):
    """Task checkpoints (`BertForSequenceClassification`...) keep the encoder under `bert.`, `roberta.`,
    `distilbert.`; the bare model (`BertModel`) without a prefix."""
    prefix = f"{model_type}."
    if any(name.startswith(prefix) for name in tensors):
        return {name[len(prefix):] if name.startswith(prefix) else name: array for name, array in tensors.items()}
    return tensors


def _weight_map(encoder, model_type):
    """`[(checkpoint name, weight, layout)]` for every weight of `encoder`: the naming table of the BERT family
    (DistilBERT names its blocks' parts differently), with the layouts of `_porting`."""
    embedding = encoder.get_layer("token_embedding")
    if model_type == "distilbert":
        names = dict(layer="transformer.layer.{i}.", query="attention.q_lin", key="attention.k_lin",
                     value="attention.v_lin", attention_output="attention.out_lin", attention_norm="sa_layer_norm",
                     hidden="ffn.lin1", output="ffn.lin2", feed_forward_norm="output_layer_norm")
    else:
        names = dict(layer="encoder.layer.{i}.", query="attention.self.query", key="attention.self.key",
                     value="attention.self.value", attention_output="attention.output.dense",
                     attention_norm="attention.output.LayerNorm", hidden="intermediate.dense", output="output.dense",
                     feed_forward_norm="output.LayerNorm")
    mapping = [("embeddings.word_embeddings.weight", embedding.token_embedding.embeddings, SAME),
               ("embeddings.position_embeddings.weight", embedding.position_embeddings, SAME)]
    mapping += _norm("embeddings.LayerNorm", encoder.get_layer("embedding_norm"))
    if encoder.num_segments:
        mapping.append(("embeddings.token_type_embeddings.weight",
                        encoder.get_layer("segment_embedding").embeddings, SAME))
    for i in range(encoder.depth):
        block, prefix = encoder.get_layer(f"block_{i}"), names["layer"].format(i=i)
        attention = block.attention
        for part, dense in (("query", attention.query_dense), ("key", attention.key_dense),
                            ("value", attention.value_dense)):
            mapping += [(f"{prefix}{names[part]}.weight", dense.kernel, TORCH_HEADS_IN),
                        (f"{prefix}{names[part]}.bias", dense.bias, TORCH_HEADS_BIAS)]
        mapping += [(f"{prefix}{names['attention_output']}.weight", attention.output_dense.kernel, TORCH_HEADS_OUT),
                    (f"{prefix}{names['attention_output']}.bias", attention.output_dense.bias, SAME)]
        mapping += _norm(prefix + names["attention_norm"], block.attention_norm)
        for part, dense in (("hidden", block.feed_forward.hidden), ("output", block.feed_forward.output_projection)):
            mapping += [(f"{prefix}{names[part]}.weight", dense.kernel, TORCH_LINEAR),
                        (f"{prefix}{names[part]}.bias", dense.bias, SAME)]
        mapping += _norm(prefix + names["feed_forward_norm"], block.feed_forward_norm)
    if encoder.pooler:
        pooler = encoder.get_layer("pooler")
        mapping += [("pooler.dense.weight", pooler.kernel, TORCH_LINEAR), ("pooler.dense.bias", pooler.bias, SAME)]
    return mapping


def _norm(name, layer):
    return [(f"{name}.weight", layer.gamma, SAME), (f"{name}.bias", layer.beta, SAME)]


def load_text_encoder(encoder_class, folder, dtype=None, **overrides):
    """Builds a `TextEncoder` from `folder/config.json` and fills every weight from `folder/model.safetensors`.

    Args:
        encoder_class: `TextEncoder` (or a subclass), which `TextEncoder.from_pretrained` passes.
        folder: a HuggingFace checkpoint folder of a BERT, DistilBERT or RoBERTa model.
        dtype: dtype policy of the encoder (None = the global policy).
        **overrides: `dropout`, `attention_dropout`, `name` (what does not change the weights).

    Raises:
        ValueError: a missing or unreadable file, an unsupported `model_type` (the supported ones are named), a
            tensor whose shape does not fit (its name, the shape found and the shape expected), a weight the file
            does not have, or tensors of the encoder's part of the file that no weight uses (named).
    """
    allowed = {"dropout", "attention_dropout", "name"}
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise TypeError(f"from_pretrained takes only {sorted(allowed)} besides `folder` and `dtype` (the "
                        f"architecture comes from config.json). Received: {unknown}")
    started = time.time()
    config = read_config(folder)
    model_type = config["model_type"]
    tensors = _strip_prefix(read_tensors(folder), model_type)
    arguments = encoder_arguments(config)
    arguments["pooler"] = "pooler.dense.weight" in tensors
    arguments.update(overrides)
    if dtype is not None:
        arguments["dtype"] = dtype
    encoder = encoder_class(**arguments)

    entries, variables = [], []  # keyed by position: `==` on variables compares their values
    for name, variable, layout in _weight_map(encoder, model_type):
        if name not in tensors and name.endswith((".weight", ".bias")) and "LayerNorm" in name:
            # Checkpoints converted from TensorFlow name the layer-norm weights gamma / beta.
            name = name.replace(".weight", ".gamma") if name.endswith(".weight") else name.replace(".bias", ".beta")
        entries.append((len(variables), name, variable.shape, layout))
        variables.append(variable)
    values, missing, mismatched = _porting.plan(entries, tensors)
    if missing:  # the first problem is named
        m = missing[0]
        raise ValueError(f"The checkpoint in {folder!r} has no tensor {m.source!r}, which the {model_type} encoder "
                         f"described by config.json needs (for weight {variables[m.key].path}).")
    if mismatched:
        m = mismatched[0]
        raise ValueError(f"Tensor {m.source!r} has shape {m.found}; the encoder described by config.json "
                         f"expects {m.expected} (weight {variables[m.key].path}).")
    for index, value in values.items():  # assigned only once every weight has its tensor
        variables[index].assign(value)
    used = {name for _, name, _, _ in entries}
    left = sorted(name for name in tensors if name not in used and name not in _BUFFERS)
    heads = [name for name in left if name.startswith(_TASK_HEAD_PREFIXES)]
    unused = [name for name in left if name not in heads]
    if unused:
        raise ValueError(f"{len(unused)} tensors of the checkpoint in {folder!r} are not used by the {model_type} "
                         f"encoder built from its config.json: {unused[:10]}{' ...' if len(unused) > 10 else ''}")
    if heads:
        warnings.warn(f"Skipped {len(heads)} tensors of a task head stored with the encoder (not part of it): "
                      f"{heads[:4]}{' ...' if len(heads) > 4 else ''}", stacklevel=3)
    encoder.load_seconds = time.time() - started
    return encoder
