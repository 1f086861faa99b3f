"""Parameter-efficient fine-tuning: LoRA on the attention projections (Hu et al. 2021, "LoRA: Low-Rank
Adaptation of Large Language Models") and frozen word-piece tables, with Keras' own LoRA.

`model.enable_lora(rank)` freezes every weight of the model except its head, then gives the query and value
projections of every keras_tfm `MultiHeadAttention` a trainable low-rank update (`EinsumDense.enable_lora`):
`kernel + (alpha / rank) · A·B`, with B starting at zero so the model starts exactly where it was. keras-hub's
`backbone.enable_lora(rank)` does the same. Saving merges the update into the kernel (Keras writes `kernel + A·B`),
so a `.keras` file or an export holds plain weights; call `enable_lora` again on a loaded model to go on with LoRA.
The optimizer's state in that file is that of the variables LoRA trained (A, B, the head, the biases; Keras saves
it as it is), which the merged model does not have: loading it warns "Skipping variable loading for optimizer" and
starts a fresh optimizer. Load with `compile=False` and compile anew to go on training without the warning.
"""

import numpy as np

from keras_tfm.layers import MultiHeadAttention
from keras_tfm.layers.walk import iter_layers

TARGETS = {"query": "query_dense", "key": "key_dense", "value": "value_dense", "output": "output_dense"}


class ParameterEfficient:
    """Mixin of the models that can be fine-tuned with LoRA or with a frozen word-piece table."""

    # Layers of the model itself that stay trainable under `enable_lora` (a new task head learns in full).
    lora_trainable_layers = ("head",)

    def enable_lora(self, rank, lora_alpha=None, targets=("query", "value")):
        """Freezes the model but its head and adds rank-`rank` LoRA updates to the attention projections.

        Args:
            rank: rank of the update (4-16 is usual); the update has `rank · (d_in + d_out)` weights per projection.
            lora_alpha: the update is scaled by `lora_alpha / rank` (Keras' default: `rank`, a scale of 1).
            targets: which projections of each `MultiHeadAttention`: among "query", "key", "value", "output".

        Returns:
            The number of trainable weights left.

        Example:

        >>> model = TextClassifier.from_pretrained("all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> model.enable_lora(8)  # doctest: +SKIP
        """
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"`rank` must be a positive integer. Received: rank={rank!r}")
        unknown = sorted(set(targets) - set(TARGETS))
        if unknown or not targets:
            raise ValueError(f"`targets` must be among {sorted(TARGETS)}. Received: targets={list(targets)!r}")
        attentions = [layer for layer in iter_layers(self) if isinstance(layer, MultiHeadAttention)]
        if not attentions:
            raise ValueError(f"{self.name} has no keras_tfm MultiHeadAttention to put LoRA on.")
        if not self.built:
            raise ValueError("Build the model (call it once, or load it) before enable_lora.")
        for layer in self.layers:
            layer.trainable = layer.name in self.lora_trainable_layers
        for attention in attentions:
            for target in targets:
                projection = getattr(attention, TARGETS[target])
                projection.trainable = True  # its bias learns too; Keras freezes the kernel itself
                projection.enable_lora(rank, lora_alpha=lora_alpha)
        return sum(int(np.prod(v.shape)) for v in self.trainable_weights)

    def freeze_token_embedding(self):
        """Freezes the token (word-piece) table: in a small BERT it is half the weights (MiniLM: 11.7 M of
        22.7 M), updated densely by AdamW at every step although a batch uses a few hundred of its rows."""
        encoder = getattr(self, "encoder", self)
        encoder.get_layer("token_embedding").trainable = False

    def freeze_lower_blocks(self, count):
        """Freezes the embeddings and the first `count` encoder blocks; the blocks above, the final norm and the
        head keep learning. The backward pass then stops at block `count`: no gradient is computed below it, so a
        step is cheaper by about the share of the backward pass the frozen part took (for MiniLM's 6 blocks and
        `count=3`, about a third of the step), while the upper blocks, which change most in fine-tuning, still
        adapt (`count=0` freezes the embeddings only, as `freeze_token_embedding` with the position and segment
        tables and the embedding norm).

        Args:
            count: how many blocks, from the bottom, to freeze: 0 to the model's depth.

        Returns:
            The number of trainable weights left.

        Example:

        >>> model = TextClassifier.from_pretrained("all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> model.freeze_lower_blocks(3)  # doctest: +SKIP
        """
        encoder = getattr(self, "encoder", self)
        blocks = [layer.name for layer in encoder.layers if layer.name.startswith("block_")]
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= len(blocks):
            raise ValueError(f"`count` must be an int from 0 to the number of blocks ({len(blocks)}). "
                             f"Received: count={count!r}")
        names = [layer.name for layer in encoder.layers]  # in the order they are called: embeddings, block_0, ...
        stop = names.index(f"block_{count}") if count < len(blocks) else names.index(f"block_{count - 1}") + 1
        for layer in encoder.layers[:stop]:
            layer.trainable = False
        return sum(int(np.prod(v.shape)) for v in self.trainable_weights)

