"""Walking a model's layers: `iter_layers(model)` yields every layer nested in it."""

import keras

from keras_tfm import _keras_workarounds


def iter_layers(layer):
    """`layer` and every layer nested in it, depth first, each once.

    A model's layers are its public `layers` (for a functional model, the layers of its graph). A layer has no public list of its sublayers, so those are read
    through `keras_tfm._keras_workarounds.sublayers`: the layers it holds as attributes, directly or in a list,
    tuple or dict, which is how Keras tracks them. Works for functional, `Sequential` and subclassed models and
    for layers such as `EncoderBlock` that own sublayers.

    Args:
        layer: a Keras layer or model.

    Yields:
        `layer`, then each nested layer in the order it was set.

    Example:

    >>> from keras_tfm.layers import EncoderBlock
    >>> block = EncoderBlock(num_heads=2, mlp_dim=8)
    >>> block.build((None, 3, 4))
    >>> [type(sub).__name__ for sub in iter_layers(block)][:2]  # doctest: +SKIP
    ['EncoderBlock', 'LayerNormalization']
    """
    seen, stack = set(), [layer]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        children = current.layers if isinstance(current, keras.Model) else _keras_workarounds.sublayers(current)
        stack.extend(reversed(children))
