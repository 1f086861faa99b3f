"""The math of attention pictures, in plain NumPy: rollout, mean attention distance, how far attention moved
between two models, cosine similarity."""

import numpy as np

from keras_tfm.insight.visualize._common import _as_layer_list

HEAD_FUSIONS = ("mean", "max", "min")


def attention_rollout(maps, head_fusion="mean", discard_ratio=0.0):
    """Attention rollout (Abnar & Zuidema, 2020): how much each output token draws on each input token.

    Each layer's heads are fused into one `(tokens, tokens)` matrix, the residual connection is accounted for
    as `0.5 * A + 0.5 * I` (rows renormalised), and the layers are multiplied from the first to the last:
    `R = Â_L ··· Â_2 Â_1`. Row 0 of `R` over the patch tokens is the [CLS] token's relevance map of a ViT.

    Args:
        maps: the self-attention maps of consecutive layers, first layer first: the dict returned by
            `attention_maps` (only square maps are used), or a list of `(batch, heads, tokens, tokens)` arrays.
        head_fusion: `"mean"`, `"max"` or `"min"` over the heads.
        discard_ratio: fraction of the smallest attention weights per row set to zero before adding the
            identity (the original implementation's noise filter); 0 keeps them all.

    Returns:
        `(batch, tokens, tokens)` array whose rows sum to 1.
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"`head_fusion` must be one of {list(HEAD_FUSIONS)}. Received: head_fusion={head_fusion!r}")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"`discard_ratio` must be in [0, 1). Received: discard_ratio={discard_ratio!r}")
    layers = [m for m in _as_layer_list(maps) if m.shape[-1] == m.shape[-2]]
    if not layers:
        raise ValueError("`maps` holds no square (self-attention) maps to roll out.")
    batch, _, tokens, _ = layers[0].shape
    rollout = np.broadcast_to(np.eye(tokens), (batch, tokens, tokens)).copy()
    for weights in layers:
        fused = getattr(weights, head_fusion)(axis=1)  # (batch, tokens, tokens)
        if discard_ratio > 0:
            cutoff = np.quantile(fused, discard_ratio, axis=-1, keepdims=True)
            fused = np.where(fused < cutoff, 0.0, fused)
        fused = 0.5 * fused + 0.5 * np.eye(tokens)
        fused = fused / fused.sum(-1, keepdims=True)
        rollout = fused @ rollout  # later layers act on the result of earlier ones
    return rollout


def mean_attention_distance(maps, grid, num_prefix_tokens=1):
    """Average distance, in patches, between a query patch and the patches it attends to, per layer and head.

    As in Raghu et al. 2021 ("Do Vision Transformers See Like Convolutional Neural Networks?"): small values
    are local, convolution-like heads; large values look across the whole image. Prefix tokens ([CLS]) are left
    out as queries and as keys (the remaining weights are renormalised).

    Args:
        maps: `attention_maps` dict or a list of `(batch, heads, tokens, tokens)` arrays.
        grid: `(rows, columns)` of the patch grid.
        num_prefix_tokens: tokens before the patches (1 with a [CLS] token, 0 without).

    Returns:
        `(layers, heads)` array of distances in patch units.
    """
    rows, columns = grid
    r, c = np.divmod(np.arange(rows * columns), columns)
    distance = np.hypot(r[:, None] - r[None, :], c[:, None] - c[None, :])  # (patches, patches)
    result = []
    for weights in _as_layer_list(maps):
        patches = weights[:, :, num_prefix_tokens:, num_prefix_tokens:]  # (batch, heads, patches, patches)
        if patches.shape[-1] != rows * columns:
            raise ValueError(
                f"`grid` {tuple(grid)} has {rows * columns} patches but the maps have {patches.shape[-1]} patch "
                f"tokens (after {num_prefix_tokens} prefix tokens)."
            )
        patches = patches / np.maximum(patches.sum(-1, keepdims=True), 1e-12)
        result.append((patches * distance).sum(-1).mean(axis=(0, 2)))  # (heads,)
    return np.stack(result)


def attention_change(before, after, query_mask=None):
    """How far each head's attention moved between two readings of the same inputs (e.g. before and after
    fine-tuning): the total variation distance between the two attention distributions of each query,
    `0.5 * sum_k |before[q, k] - after[q, k]|`, averaged over the real queries and the samples.

    It reads as "the share of the attention that went elsewhere": 0 = the same distribution, 1 = all of it moved
    to other keys. (A query row is a probability distribution over the keys, so the distance is in [0, 1].)

    Args:
        before, after: what `attention_maps` returns for the same inputs (or `{name: (batch, heads, q, k)}`
            dicts with the same layers and shapes).
        query_mask: `(batch, q)` booleans: the real queries (padding rows left out). Default: every row.

    Returns:
        `(names, change)`: the layer names and a float `(layers, heads)` array.

    Example:

    >>> names, change = attention_change(attention_maps(pretrained, ids), attention_maps(tuned, ids))  # doctest: +SKIP
    """
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise TypeError(f"`before` and `after` must be what `attention_maps` returns, or dicts {{name: weights}}. "
                        f"Received: {type(before).__name__} and {type(after).__name__}")
    if list(before) != list(after):
        raise ValueError(f"`before` and `after` must read the same layers. Received: {list(before)} and "
                         f"{list(after)}")
    change = []
    for a, b in zip(before.values(), after.values()):
        a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
        if a.shape != b.shape or a.ndim != 4:
            raise ValueError(f"Each layer's maps must have the same (batch, heads, q, k) shape before and after. "
                             f"Received: {a.shape} and {b.shape}")
        distance = 0.5 * np.abs(a - b).sum(-1)  # (batch, heads, q)
        mask = np.ones((a.shape[0], a.shape[2]), bool) if query_mask is None else np.asarray(query_mask, bool)
        if mask.shape[1] < a.shape[2]:  # the model put a [CLS] before the tokens: it is a real query
            mask = np.pad(mask, ((0, 0), (a.shape[2] - mask.shape[1], 0)), constant_values=True)
        mask = mask[:, : a.shape[2]]
        rows = mask[:, None, :].repeat(a.shape[1], 1)
        change.append((distance * rows).sum((0, 2)) / np.maximum(rows.sum((0, 2)), 1))
    return list(before), np.array(change)


def cosine_similarity(vectors):
    """`(n, n)` cosine similarities between the rows of `vectors` `(n, dim)`."""
    vectors = np.asarray(vectors, dtype="float64")
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    return unit @ unit.T
