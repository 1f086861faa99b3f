"""Walking a model's layers with public attributes only: `iter_layers(model)` yields every layer nested in it."""

import keras


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
