"""Read the attention weights out of any model built with keras_tfm layers.

Training uses the fused attention kernel, which never materialises the weights. For one call,
`attention_maps` switches every keras_tfm `MultiHeadAttention` in the model to the explicit path, records the
`softmax(QKᵀ/√d_k)` it computes, and switches back. It works for our models and for a user's own functional,
`Sequential` or subclassed model that contains our layers, and it changes no weights and draws no random
numbers (dropout is off), so training is unaffected.
"""

import collections
import typing

import keras
import numpy as np

from keras_tfm.layers import ClassToken, DecoderBlock, EncoderBlock, MultiHeadAttention, PatchEmbedding
from keras_tfm.layers.walk import iter_layers


KINDS = ("encoder", "self", "cross")


class AttentionMap(typing.NamedTuple):
    """One attention's weights, with what it is.

    Fields:
        name: its key in `attention_maps`' result: the `EncoderBlock`'s name, `"<decoder block>/self_attention"`,
            `"<decoder block>/cross_attention"`, or a stand-alone `MultiHeadAttention`'s path.
        layer: the name of the block (or attention layer) it was read from.
        kind: `"encoder"` (self-attention over the input sequence: an encoder, ViT or text encoder block, or a
            stand-alone attention), `"self"` (a decoder's masked self-attention over the target tokens) or
            `"cross"` (target queries over source keys).
        weights: NumPy float32 `(batch, heads, query_len, key_len)`; rows sum to 1 over the keys.
        prefix_tokens: positions before the input's own tokens (1 where the model prepends a [CLS] token to
            what this attention reads, else 0).
    """

    name: str
    layer: str
    kind: str
    weights: np.ndarray
    prefix_tokens: int = 0


class AttentionMaps(collections.OrderedDict):
    """What `attention_maps` returns: {name: weights array} in call order, as a dict, plus the records.

    `maps["block_0"]` is the `(batch, heads, q, k)` array, as before; `maps.records` is the list of
    `AttentionMap`s (layer, kind, weights, prefix tokens) and `maps.of_kind("cross")` those of one kind, so no
    caller needs to read meaning out of a layer's name.
    """

    def __init__(self, records=()):
        super().__init__((record.name, record.weights) for record in records)
        self.records = list(records)

    def of_kind(self, *kinds):
        """The records whose kind is one of `kinds`, in call order."""
        unknown = [kind for kind in kinds if kind not in KINDS]
        if unknown:
            raise ValueError(f"`kinds` must be among {KINDS}. Received: {unknown}")
        return [record for record in self.records if record.kind in kinds]

    def map_weights(self, function):
        """A new `AttentionMaps` with `function(weights)` in place of each record's weights (e.g. one sample)."""
        return AttentionMaps([record._replace(weights=function(record.weights)) for record in self.records])


def as_records(maps):
    """`AttentionMap` records of whatever a user passes as maps: `attention_maps`' result (its records), a list of
    records, a plain `{name: array}` dict, a list of arrays (named `layer_0`, ...) or one array. Maps given
    without records are taken as `"encoder"` self-attention (there is nothing else to know them by)."""
    if isinstance(maps, AttentionMaps):
        return list(maps.records)
    if isinstance(maps, dict):
        items = list(maps.items())
    elif isinstance(maps, np.ndarray):
        items = [("attention", maps)]
    elif isinstance(maps, (list, tuple)):
        if maps and all(isinstance(m, AttentionMap) for m in maps):
            return list(maps)
        items = [(f"layer_{j}", m) for j, m in enumerate(maps)]
    else:
        raise TypeError("`maps` must be what `attention_maps` returns, a list of AttentionMap records, a dict "
                        f"{{name: array}}, a list of arrays or one array. Received: {type(maps).__name__}")
    if not items:
        raise ValueError("`maps` is empty: there is no attention to show.")
    return [AttentionMap(str(name), str(name), "encoder", np.asarray(m, dtype="float32")) for name, m in items]


def is_token_pair(tokens):
    """Whether `tokens` is a `(source, target)` pair of label lists (a seq2seq model's) rather than one list."""
    return (isinstance(tokens, (tuple, list)) and len(tokens) == 2
            and all(isinstance(t, (tuple, list)) for t in tokens))


def query_key_tokens(kind, tokens, prefix_tokens=0):
    """The labels of a map's queries and keys: `(query_labels, key_labels)`, the one place that says which.

    Args:
        kind: the map's kind (`AttentionMap.kind`).
        tokens: one list of labels (the one sequence every map reads), a `(source, target)` pair of lists (an
            encoder-decoder: encoder maps read the source, decoder self-attention the target, cross-attention
            target queries over source keys), or None (no labels).
        prefix_tokens: positions the model prepends (`AttentionMap.prefix_tokens`): labelled "[CLS]".

    Returns:
        Two lists of strings, or `(None, None)` without tokens.
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    if tokens is None:
        return None, None
    if is_token_pair(tokens):
        source, target = ([str(t) for t in part] for part in tokens)
        queries, keys = {"encoder": (source, source), "self": (target, target), "cross": (target, source)}[kind]
    else:
        queries = keys = [str(t) for t in tokens]
    if kind == "encoder" and prefix_tokens:
        prefix = ["[CLS]"] * prefix_tokens
        if queries[:prefix_tokens] != prefix:
            queries = keys = prefix + queries
    return list(queries), list(keys)


def _describe_attentions(model):
    """{id(attention layer): (name, block, kind)}: an EncoderBlock's attention is named after the block, a
    DecoderBlock's "<block>/self_attention" and "<block>/cross_attention"; any other is missing (its path names it)."""
    described = {}
    for layer in iter_layers(model):
        if isinstance(layer, EncoderBlock):
            described[id(layer.attention)] = (layer.name, layer.name, "encoder")
        elif isinstance(layer, DecoderBlock):
            described[id(layer.self_attention)] = (f"{layer.name}/self_attention", layer.name, "self")
            if layer.has_cross_attention:
                described[id(layer.cross_attention)] = (f"{layer.name}/cross_attention", layer.name, "cross")
    return described


def _prefix_tokens(model):
    """Tokens the model prepends to its inputs before the encoder blocks: one per [CLS] (a `ClassToken` layer or a
    `PatchEmbedding(class_token=True)`)."""
    return sum(1 for layer in iter_layers(model)
               if isinstance(layer, ClassToken) or (isinstance(layer, PatchEmbedding) and layer.class_token))


def attention_maps(model, inputs):
    """Runs `model` once on `inputs` and returns every keras_tfm attention's weights, in call order.

    Args:
        model: a Keras model (or layer) containing keras_tfm `MultiHeadAttention` layers, directly or inside
            `EncoderBlock` / `DecoderBlock`.
        inputs: what `model` is called on (e.g. images, token ids, or `(source_ids, target_ids)`).

    Returns:
        `AttentionMaps`: an `OrderedDict` {name: NumPy array `(batch, heads, query_len, key_len)`} whose
        `records` (and `of_kind(...)`) also say each map's layer, kind (`"encoder"`, `"self"`, `"cross"`) and
        prepended [CLS] tokens. Names: the `EncoderBlock`'s name for its self-attention,
        `"<decoder block>/self_attention"` and `"<decoder block>/cross_attention"` for a `DecoderBlock`, the layer
        path for a stand-alone `MultiHeadAttention` (a layer called twice in one pass gets `"#2"`, ...). Rows sum
        to 1 over the keys; padded keys get zero weight.

    Raises:
        ValueError: if the model contains no keras_tfm attention layer.

    Example:

    >>> maps = attention_maps(vit_model, images[:4])
    >>> list(maps)  # doctest: +SKIP
    ['block_0', 'block_1', ...]
    >>> maps["block_0"].shape  # doctest: +SKIP
    (4, 4, 65, 65)
    >>> [(m.layer, m.kind, m.prefix_tokens) for m in maps.records][:1]  # doctest: +SKIP
    [('block_0', 'encoder', 1)]
    """
    if not model.built:  # a Sequential builds itself on its first call, symbolically: not a pass to record
        model(inputs, training=False)
    attentions = [layer for layer in iter_layers(model) if isinstance(layer, MultiHeadAttention)]
    if not attentions:
        raise ValueError(
            f"Model '{model.name}' contains no keras_tfm MultiHeadAttention layer (directly or in an EncoderBlock "
            "or DecoderBlock), so there are no attention maps to read."
        )
    described = _describe_attentions(model)
    prefix = _prefix_tokens(model)
    recorded = []

    def record(layer, weights):
        recorded.append((layer, weights))

    for layer in attentions:
        layer.score_recorder = record
    try:
        model(inputs, training=False)
    finally:
        for layer in attentions:
            layer.score_recorder = None

    records, names = [], set()
    for layer, weights in recorded:
        name, block, kind = described.get(id(layer), (layer.path, layer.path, "encoder"))
        key, repeat = name, 2
        while key in names:  # a layer called several times in one forward pass
            key, repeat = f"{name}#{repeat}", repeat + 1
        names.add(key)
        weights = np.asarray(keras.ops.convert_to_numpy(weights)).astype("float32")
        records.append(AttentionMap(key, block, kind, weights, prefix if kind == "encoder" else 0))
    return AttentionMaps(records)
