"""Read the attention weights out of any model built with keras_tfm layers.

Training uses the fused attention kernel, which never materialises the weights. For one call,
`attention_maps` switches every keras_tfm `MultiHeadAttention` in the model to the explicit path, records the
`softmax(QKᵀ/√d_k)` it computes, and switches back. It works for our models and for a user's own functional,
`Sequential` or subclassed model that contains our layers, and it changes no weights and draws no random
numbers (dropout is off), so training is unaffected.
"""

import collections

import keras
import numpy as np

from keras_tfm.layers import DecoderBlock, EncoderBlock, MultiHeadAttention


def iter_layers(layer):
    """`layer` and every layer nested in it, depth first, each once.

    Uses only public attributes: a model's `layers`, and the layers a layer holds as attributes (directly or
    in a list, tuple or dict), which is how Keras layers keep their sublayers. Works for functional,
    `Sequential` and subclassed models and for layers such as `EncoderBlock` that own sublayers.
    """
    seen, stack = set(), [layer]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        children = list(current.layers) if isinstance(current, keras.Model) else []
        for value in vars(current).values():
            values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            children.extend(v for v in values if isinstance(v, keras.layers.Layer))
        stack.extend(reversed(children))


def _map_names(model):
    """{attention layer: name in the result}: an EncoderBlock's attention is named after the block, a
    DecoderBlock's as "<block>/self_attention" and "<block>/cross_attention", any other by its path."""
    names = {}
    for layer in iter_layers(model):
        if isinstance(layer, EncoderBlock):
            names[id(layer.attention)] = layer.name
        elif isinstance(layer, DecoderBlock):
            names[id(layer.self_attention)] = f"{layer.name}/self_attention"
            names[id(layer.cross_attention)] = f"{layer.name}/cross_attention"
    return names


def attention_maps(model, inputs):
    """Runs `model` once on `inputs` and returns every keras_tfm attention's weights, in call order.

    Args:
        model: a Keras model (or layer) containing keras_tfm `MultiHeadAttention` layers, directly or inside
            `EncoderBlock` / `DecoderBlock`.
        inputs: what `model` is called on (e.g. images, token ids, or `(source_ids, target_ids)`).

    Returns:
        `OrderedDict` {name: NumPy array `(batch, heads, query_len, key_len)`}. Names: the `EncoderBlock`'s
        name for its self-attention, `"<decoder block>/self_attention"` and `"<decoder block>/cross_attention"`
        for a `DecoderBlock`, the layer path for a stand-alone `MultiHeadAttention`. Rows sum to 1 over the
        keys; padded keys get zero weight.

    Raises:
        ValueError: if the model contains no keras_tfm attention layer.

    Example:

    >>> maps = attention_maps(vit_model, images[:4])
    >>> list(maps)  # doctest: +SKIP
    ['block_0', 'block_1', ...]
    >>> maps["block_0"].shape  # doctest: +SKIP
    (4, 4, 65, 65)
    """
    if not model.built:  # a Sequential builds itself on its first call, symbolically: not a pass to record
        model(inputs, training=False)
    attentions = [layer for layer in iter_layers(model) if isinstance(layer, MultiHeadAttention)]
    if not attentions:
        raise ValueError(
            f"Model '{model.name}' contains no keras_tfm MultiHeadAttention layer (directly or in an EncoderBlock "
            "or DecoderBlock), so there are no attention maps to read."
        )
    names = _map_names(model)
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

    maps = collections.OrderedDict()
    for layer, weights in recorded:
        name = names.get(id(layer), layer.path)
        key, repeat = name, 2
        while key in maps:  # a layer called several times in one forward pass
            key, repeat = f"{name}#{repeat}", repeat + 1
        maps[key] = np.asarray(keras.ops.convert_to_numpy(weights)).astype("float32")
    return maps
