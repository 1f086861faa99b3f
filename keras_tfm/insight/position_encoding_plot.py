"""`PositionEncodingPlot`: a learned position table and its cosine similarities, drawn as it trains."""

import os

import keras
import numpy as np

from keras_tfm.insight import visualize
from keras_tfm.layers import PatchEmbedding, TokenEmbedding


class PositionEncodingPlot(keras.callbacks.Callback):
    """Plots a learned position table (of a `TokenEmbedding` or `PatchEmbedding` with `position="learned"`) and
    its cosine-similarity matrix every `every_n_epochs` epochs, to watch positions organise themselves.

    For the fixed sinusoidal encodings no callback is needed:
    `visualize.plot_position_encoding(sinusoidal_position_encoding(64, 128))`.

    Args:
        layer_name: name of the embedding layer in the model.
        output_dir: folder for `epoch_{NNN}_positions.png`.
        every_n_epochs: plot every this many epochs.
    """

    def __init__(self, layer_name, output_dir="position_encoding", every_n_epochs=1):
        super().__init__()
        self.layer_name = layer_name
        self.output_dir = output_dir
        self.every_n_epochs = every_n_epochs
        self.written = []

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs:
            return
        layer = self.model.get_layer(self.layer_name)
        if not isinstance(layer, (TokenEmbedding, PatchEmbedding)) or layer.position != "learned":
            raise ValueError(
                f"Layer '{self.layer_name}' has no learned position table (it needs to be a TokenEmbedding or "
                "PatchEmbedding with position='learned')."
            )
        table = np.asarray(keras.ops.convert_to_numpy(layer.position_embeddings))
        if isinstance(layer, PatchEmbedding) and layer.class_token:
            table = table[1:]  # the patch rows only
        os.makedirs(self.output_dir, exist_ok=True)
        path = os.path.join(self.output_dir, f"epoch_{epoch + 1:03d}_positions.png")
        figure = visualize.plot_position_encoding(table, title=f"{self.layer_name}, epoch {epoch + 1}")
        self.written.append(visualize.save_figure(figure, path))
