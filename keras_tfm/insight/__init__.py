"""Seeing inside a Transformer: read its attention, draw it, explore it, and watch it change while it trains.

The modules, in the order the data flows through them:

    attention_probe          attention_maps(model, inputs): every attention's weights, one call, training unaffected
    attribution              occlusion_map: which image patches a vision model's answer depends on
    patch_grid               infer_grid: the rows and columns of patches a sequence of image tokens came from
    visualize/               pictures (matplotlib): head grids, rollout over images, token heat maps, alignment,
                             positional encodings, the change between two moments of training
    explorer/                the interactive HTML page of every layer and head (its markup, styles and script)
    attention_map_callback   AttentionMapCallback: the pictures and the page, drawn every few epochs of `fit`
    position_encoding_plot   PositionEncodingPlot: a learned position table and its similarities, every few epochs

This part depends on `keras_tfm.layers` (it finds our attention layers in any model) and never the other way
round; the models and the training helpers do not need it. The two callbacks are also offered by
`keras_tfm.callbacks`, beside the others. `keras_tfm.insight.visualize` imports matplotlib only when it draws.

Example:

>>> import keras_tfm
>>> keras_tfm.insight.visualize.attention_rollout.__module__
'keras_tfm.insight.visualize.attention_math'
"""

from keras_tfm.insight import (
    attention_map_callback,
    attention_probe,
    attribution,
    explorer,
    patch_grid,
    position_encoding_plot,
    visualize,
)

__all__ = ["attention_map_callback", "attention_probe", "attribution", "explorer", "patch_grid",
           "position_encoding_plot", "visualize"]
