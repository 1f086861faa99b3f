"""Pictures of what attention does: head grids, attention rollout over images, token heat maps, alignment
matrices, positional-encoding plots, and mean attention distance.

The math (`attention_rollout`, `mean_attention_distance`, `cosine_similarity`) is plain NumPy; the `plot_*`
functions return matplotlib Figures made without pyplot (headless, nothing to close) that you can
`fig.savefig("x.png")` or show in a notebook. Attention maps come from `keras_tfm.attention_maps`.
`attention_html`, `save_attention_html` and `show_attention` (from `keras_tfm.explorer`) make the interactive page.
"""

import math

import numpy as np

from keras_tfm.explorer import attention_html, save_attention_html, show_attention  # noqa: F401  (the HTML explorer)
from keras_tfm.patch_grid import infer_grid

HEAD_FUSIONS = ("mean", "max", "min")


def _figure(**kwargs):
    # A Figure without pyplot: no display, no global state, nothing to close. matplotlib is imported on the first
    # picture, not with keras_tfm.
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _colormap(name):
    import matplotlib

    return matplotlib.colormaps[name]


def _as_layer_list(maps):
    if isinstance(maps, dict):
        return [np.asarray(m, dtype="float64") for m in maps.values()]
    if isinstance(maps, np.ndarray) and maps.ndim == 4:
        return [maps.astype("float64")]
    return [np.asarray(m, dtype="float64") for m in maps]


# --------------------------------------------------------------------------------------------------------------
# Math.


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


def plot_attention_change(names, change, title=None, top=8):
    """The change view: a heat map of layers (rows) x heads (columns) coloured by `attention_change`, each cell
    labelled with its value, and the `top` most-changed heads listed beside it, most changed first.

    Args:
        names: layer names (rows).
        change: `(layers, heads)` values in [0, 1].
        title: figure title.
        top: how many heads the ranking lists.

    Returns:
        matplotlib Figure.
    """
    change = np.asarray(change, dtype="float64")
    layers, heads = change.shape
    figure = _figure(figsize=(1.0 + 0.62 * heads + 3.2, 1.4 + 0.5 * layers))
    grid = figure.add_gridspec(1, 2, width_ratios=[0.62 * heads + 1.0, 3.2])
    ax = figure.add_subplot(grid[0])
    high = max(float(change.max()), 1e-6)
    image = ax.imshow(change, cmap=_colormap("Reds"), vmin=0.0, vmax=high, aspect="auto")
    for i in range(layers):
        for j in range(heads):
            ax.text(j, i, f"{change[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if change[i, j] > 0.6 * high else "black")
    ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=9)
    ax.set_yticks(range(layers), [printable(n) for n in names], fontsize=9)
    ax.set_xlabel("head")
    colorbar = figure.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    colorbar.set_label("share of attention moved", fontsize=8)
    side = figure.add_subplot(grid[1])
    side.axis("off")
    order = np.argsort(-change, axis=None)[:top]
    lines = ["most changed heads:"] + [f"{k + 1}. {printable(names[i])}, head {j}: {change[i, j]:.3f}"
                                       for k, (i, j) in enumerate(zip(*np.unravel_index(order, change.shape)))]
    side.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=9, family="monospace", transform=side.transAxes)
    figure.suptitle(printable(title or "how far each head's attention moved"), fontsize=11)
    figure.text(0.01, 0.01, "total variation distance per query, 0.5 Σ|before − after| over the keys, mean over the "
                "queries: 0 = unchanged, 1 = all of the attention went elsewhere", fontsize=7, color="#444444")
    figure.tight_layout(rect=(0, 0.04, 1, 0.95))
    return figure


def plot_row_before_after(tokens, before, after, title=None, labels=("before", "after"), scale_without=()):
    """One query's attention over `tokens` at two moments (e.g. [CLS] before and after fine-tuning), as two
    token heat maps on one colour scale, so that the words the head took up or dropped stand out.

    Args:
        tokens: the key tokens (padding removed).
        before, after: the query's weights over them.
        title: figure title.
        labels: what the two rows are.
        scale_without: positions left out of the colour scale and drawn grey ([CLS], [SEP]).

    Returns:
        matplotlib Figure.
    """
    rows = [np.asarray(before, "float64")[: len(tokens)], np.asarray(after, "float64")[: len(tokens)]]
    keep = np.ones(len(tokens), bool)
    keep[[i for i in scale_without if 0 <= i < len(tokens)]] = False
    low = min(float(r[keep].min()) for r in rows) if keep.any() else 0.0
    high = max(float(r[keep].max()) for r in rows) if keep.any() else 1.0
    parts = [plot_token_attention(tokens, r, title=f"{label}", scale_without=scale_without, fontsize=11,
                                  value_range=(low, high))
             for label, r in zip(labels, rows)]
    # One figure: the two token pictures stacked, each keeping its own layout.
    import io

    import PIL.Image

    images = []
    for part in parts:
        buffer = io.BytesIO()
        part.savefig(buffer, format="png", dpi=100)
        images.append(np.asarray(PIL.Image.open(buffer).convert("RGB")))
    width = max(i.shape[1] for i in images)
    stacked = np.concatenate([np.pad(i, ((0, 0), (0, width - i.shape[1]), (0, 0)), constant_values=255)
                              for i in images])
    figure = _figure(figsize=(width / 100, stacked.shape[0] / 100 + (0.4 if title else 0.0)))
    ax = figure.add_axes((0, 0, 1, stacked.shape[0] / (stacked.shape[0] + (40 if title else 0))))
    ax.imshow(stacked)
    ax.axis("off")
    if title:
        figure.suptitle(printable(title), fontsize=12, y=0.995)
    return figure


def cosine_similarity(vectors):
    """`(n, n)` cosine similarities between the rows of `vectors` `(n, dim)`."""
    vectors = np.asarray(vectors, dtype="float64")
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    return unit @ unit.T


# --------------------------------------------------------------------------------------------------------------
# Plots.


def _labels(ax, query_tokens, key_tokens, fontsize=7):
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)))
        ax.set_xticklabels([printable(t) for t in key_tokens], rotation=90, fontsize=fontsize)
    else:
        ax.set_xticks([])
    if query_tokens is not None:
        ax.set_yticks(range(len(query_tokens)))
        ax.set_yticklabels([printable(t) for t in query_tokens], fontsize=fontsize)
    else:
        ax.set_yticks([])


def _real_length(name, tokens, length, size):
    """How many rows (or columns) of a map are real: `length`, else the number of `tokens`, else all `size`."""
    if tokens is not None and length is not None and len(tokens) != length:
        raise ValueError(f"`{name}_tokens` has {len(tokens)} labels but `{name}_length` is {length}.")
    length = len(tokens) if length is None and tokens is not None else length
    if length is None:
        return size
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 1 <= length <= size:
        raise ValueError(f"`{name}_length` (or the number of `{name}_tokens`) must be in [1, {size}], the map's "
                         f"{name} length. Received: {length!r}")
    return int(length)


# The row label of a decoder's attention maps (causal self-attention, cross-attention), whose queries are the
# decoder's inputs: the start token, then the target shifted right by one. The row of input token t is where
# the decoder looked while predicting token t + 1, so row "0" looking at key "2" is the step that writes the
# token after "0".
DECODER_ROWS = "decoder input (row t predicts token t+1)"


def plot_attention_heads(maps, query_tokens=None, key_tokens=None, sample=0, title=None, columns=4, query_length=None,
                         key_length=None, query_label="query (attending)"):
    """A grid of one layer's heads for one sample, on one colour scale with a colour bar.

    Only the real block is drawn: the first `query_length` rows and `key_length` columns (by default as many as
    there are query and key tokens; without tokens, the whole map). The padding a batch adds after a short
    sequence holds no attention worth seeing, and drawn it would push the real block into a corner.

    Args:
        maps: `(batch, heads, query_len, key_len)` (one entry of `attention_maps`) or `(heads, q, k)`.
        query_tokens, key_tokens: labels of the rows (queries, the tokens that attend) and the columns (keys,
            the tokens attended to), padding left out. Without them, rows and columns are numbered.
        sample: which sample of the batch.
        title: figure title.
        columns: heads per row of the grid.
        query_length, key_length: the real lengths, when no tokens are given.
        query_label: the rows' axis label. For a decoder's maps, whose rows are its inputs, use
            `DECODER_ROWS`: row t reads input token t and predicts token t + 1.

    Returns:
        matplotlib Figure.
    """
    weights = np.asarray(maps, dtype="float64")
    weights = weights[sample] if weights.ndim == 4 else weights
    heads, queries, keys = weights.shape
    queries = _real_length("query", query_tokens, query_length, queries)
    keys = _real_length("key", key_tokens, key_length, keys)
    weights = weights[:, :queries, :keys]  # (heads, real queries, real keys)
    columns = min(columns, heads)
    grid_rows = math.ceil(heads / columns)
    labelled = query_tokens is not None or key_tokens is not None
    # Inches per head: with labels, room for one per token (up to 8 inches), else a plain 3-inch square.
    side = min(max(2.6, 0.12 * max(queries, keys) + 1.2), 8.0) if labelled else 3.0
    fontsize = float(np.clip(0.8 * (side - 1.2) * 72 / max(queries, keys), 4, 9))
    figure = _figure(figsize=(side * columns + 1.0, side * grid_rows + (0.5 if title else 0.2)), layout="constrained")
    axes = figure.subplots(grid_rows, columns, squeeze=False)
    vmax = max(float(weights.max()), 1e-12)  # one scale for every head, so heads can be compared
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"head {head}", fontsize=9)
        if key_tokens is not None:
            ax.set_xticks(range(keys), [printable(t) for t in key_tokens], rotation=90, fontsize=fontsize)
        if query_tokens is not None:
            ax.set_yticks(range(queries), [printable(t) for t in query_tokens], fontsize=fontsize)
        ax.tick_params(labelsize=fontsize if labelled else 7)
        ax.set_xlabel("key (attended to)", fontsize=8)
        if head % columns == 0:
            ax.set_ylabel(query_label, fontsize=8)
    figure.colorbar(image, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    if title:
        figure.suptitle(title)
    return figure


def _as_unit_image(image):
    image = np.asarray(image, dtype="float64")
    return image / 255.0 if image.max() > 1.0 else image


def _share(relevance):
    """`relevance` (any shape) as non-negative shares that sum to 1 (all zeros when nothing is positive)."""
    relevance = np.maximum(np.asarray(relevance, dtype="float64"), 0.0)
    total = relevance.sum()
    return relevance / total if total > 0 else relevance


def _overlay(ax, image, share, vmax):
    """`image` with `share` `(rows, columns)` over it, each patch's colour covering its pixels."""
    height, width = image.shape[:2]
    ax.imshow(image.squeeze(), cmap="gray" if image.shape[-1] == 1 else None)
    shown = ax.imshow(share, cmap="inferno", alpha=0.55, vmin=0.0, vmax=vmax,
                      extent=(-0.5, width - 0.5, height - 0.5, -0.5))
    ax.axis("off")
    return shown


def _image_relevance_figure(image, share, map_title, bar_label, title):
    image = _as_unit_image(image)
    figure = _figure(figsize=(9.6, 3.4), layout="constrained")
    axes = figure.subplots(1, 3)
    axes[0].imshow(image.squeeze(), cmap="gray" if image.shape[-1] == 1 else None)
    axes[0].set_title("image", fontsize=9)
    axes[0].axis("off")
    vmax = max(share.max(), 1e-12)
    shown = axes[1].imshow(share, cmap="inferno", vmin=0.0, vmax=vmax)
    axes[1].set_title(map_title, fontsize=9)
    axes[1].axis("off")
    _overlay(axes[2], image, share, vmax)
    axes[2].set_title("overlay", fontsize=9)
    figure.colorbar(shown, ax=axes[1:].tolist(), fraction=0.04, pad=0.02).set_label(bar_label, fontsize=8)
    if title:
        figure.suptitle(title)
    return figure


def rollout_relevance(rollout, num_prefix_tokens=1):
    """What the output reads from each patch, through all the blocks: row 0 of the rollout (the [CLS] token's)
    over the patches, or without a [CLS] token the mean of all rows (mean pooling reads every token), as shares
    that sum to 1. `(..., tokens, tokens)` -> `(..., patches)`."""
    rollout = np.asarray(rollout, dtype="float64")
    relevance = rollout[..., 0, num_prefix_tokens:] if num_prefix_tokens else rollout.mean(axis=-2)
    return relevance / np.maximum(relevance.sum(-1, keepdims=True), 1e-12)


def plot_image_attention(image, rollout, grid=None, num_prefix_tokens=1, title=None):
    """The rollout relevance of each patch for the model's output, as a heat map beside and over the image.

    With a [CLS] token the output is read from it, so its row (row 0) is drawn. Without one (mean or sequence
    pooling) the output is read from all the tokens, so the mean of their rows is drawn — which mostly shows a
    position prior shared by every image; for pooled models `plot_occlusion` shows the evidence instead. The
    colour is each patch's share of the relevance (they sum to 1; a uniform map is 1/patches), on one scale
    for the heat map and the overlay, with a colour bar.

    Args:
        image: `(height, width, channels)` pixels (uint8 or float in [0, 1] or [0, 255]).
        rollout: `(tokens, tokens)` rollout of this image (one row of `attention_rollout`'s batch).
        grid: `(rows, columns)` patch grid; inferred from the number of patches and the image's aspect ratio.
        num_prefix_tokens: tokens before the patches (1 for [CLS], whose row is read; 0 without: the mean row).
        title: figure title.

    Returns:
        matplotlib Figure with the image, the heat map and the overlay.
    """
    relevance = rollout_relevance(rollout, num_prefix_tokens)
    rows, columns = grid or infer_grid(relevance.size, np.shape(image))
    map_title = "[CLS] rollout" if num_prefix_tokens else "rollout, mean of all tokens"
    return _image_relevance_figure(image, relevance.reshape(rows, columns), map_title,
                                   "share of the relevance", title)


def plot_occlusion(image, drops, title=None):
    """An occlusion map (`keras_tfm.attribution.occlusion_map`) as a heat map beside and over the image.

    The colour is each patch's share of the total score drop (patches whose hiding raised the score count as
    0), on one scale for the heat map and the overlay, with a colour bar.

    Args:
        image: `(height, width, channels)` pixels.
        drops: `(rows, columns)` score drops of this image (one of `occlusion_map`'s results).
        title: figure title.

    Returns:
        matplotlib Figure with the image, the heat map and the overlay.
    """
    drops = np.asarray(drops, dtype="float64")
    if drops.ndim != 2:
        raise ValueError(f"`drops` must be one image's (rows, columns) occlusion map. Received: shape {drops.shape}")
    return _image_relevance_figure(image, _share(drops), "occlusion: score drop", "share of the score drop", title)


def plot_relevance_grid(images, relevance, titles=None, label="share of the relevance", columns=4):
    """Several images, each with its relevance map over it, on one colour scale (one colour bar), so the
    images can be compared: a bright patch is as relevant in one image as in another.

    Args:
        images: `(n, height, width, channels)` pixels.
        relevance: `(n, rows, columns)` non-negative maps (e.g. `rollout_relevance(...)` reshaped to the grid,
            or `occlusion_map(...)`); each is turned into shares that sum to 1.
        titles: `n` strings drawn above the images (e.g. "true: cat, predicted: dog").
        label: what the colour means, under the colour bar.
        columns: images per row.

    Returns:
        matplotlib Figure: for each image, the image and its overlay side by side.
    """
    relevance = np.asarray(relevance, dtype="float64")
    if relevance.ndim != 3 or len(relevance) != len(images):
        raise ValueError(f"`relevance` must be (n, rows, columns) with n = {len(images)} images. Received: shape "
                         f"{relevance.shape}")
    if titles is not None and len(titles) != len(images):
        raise ValueError(f"`titles` must have one string per image ({len(images)}). Received: {len(titles)}")
    shares = np.stack([_share(r) for r in relevance])
    vmax = max(shares.max(), 1e-12)
    grid_rows = math.ceil(len(images) / columns)
    figure = _figure(figsize=(4.2 * min(columns, len(images)), 2.4 * grid_rows + 0.6), layout="constrained")
    axes = np.asarray(figure.subplots(grid_rows, 2 * min(columns, len(images)), squeeze=False))
    for i, ax in enumerate(axes.reshape(-1, 2)):
        if i >= len(images):
            ax[0].axis("off")
            ax[1].axis("off")
            continue
        image = _as_unit_image(images[i])
        ax[0].imshow(image.squeeze(), cmap="gray" if image.shape[-1] == 1 else None)
        ax[0].axis("off")
        shown = _overlay(ax[1], image, shares[i], vmax)
        if titles is not None:
            ax[0].set_title(printable(titles[i]), fontsize=8, loc="left")
    import matplotlib

    # The bar from an opaque copy of the scale: the overlays' own colours are see-through.
    bar = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0.0, vmax), cmap=shown.get_cmap())
    figure.colorbar(bar, ax=axes.ravel().tolist(), fraction=0.02, pad=0.01).set_label(label, fontsize=8)
    return figure


def _text_width(figure, fontsize):
    """A function giving the width, in points, that a string takes when drawn in `figure` at `fontsize`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.font_manager import FontProperties

    renderer = FigureCanvasAgg(figure).get_renderer()
    font = FontProperties(size=fontsize)

    def width(text):
        pixels, _, _ = renderer.get_text_width_height_descent(text, font, ismath=False)
        return pixels * 72.0 / figure.dpi

    return width


def printable(label):
    """`label` as a string without control characters (IMDB's text holds `\\x85`, which fonts lack: matplotlib
    warns and draws a box). Each run of them becomes one space."""
    text = str(label)
    if text.isprintable():
        return text
    return "".join(" " if not (c.isprintable() or c == " ") else c for c in text)


def plot_token_attention(tokens, weights, title=None, width=10.0, fontsize=10, scale_without=(), note=None,
                         value_range=None):
    """Text as a heat map: each token's background shows its weight (e.g. the [CLS] row averaged over heads).

    The tokens flow left to right and wrap like text. Each box is as wide as its token renders (measured with
    the renderer), so no token is cut and none overlaps its neighbour, however long; the figure grows in height
    with the number of lines.

    Args:
        tokens: list of token strings (padding already removed).
        weights: one weight per token; the colours span their minimum (lightest) to their maximum (darkest),
            shown by the colour bar below the text. Longer inputs are cut to `len(tokens)` when the weights past
            it are 0 (masked padding); weights on positions without a token are refused.
        title: figure title.
        width: figure width in inches (wider if one token needs more).
        fontsize: font size of the tokens, in points.
        scale_without: positions of tokens drawn in grey and left out of the colour scale (e.g. [CLS] and [SEP],
            whose own large weights would otherwise wash out every word).
        note: a line under the colour bar saying what the weight is.
        value_range: `(low, high)` of the colour scale (default: the weights' own), to draw several on one scale.

    Returns:
        matplotlib Figure.
    """
    tokens = [printable(token) for token in tokens]
    weights = np.asarray(weights, dtype="float64").reshape(-1)
    if len(weights) < len(tokens) or np.any(np.abs(weights[len(tokens):]) > 1e-6):
        raise ValueError(f"`tokens` has {len(tokens)} labels but `weights` has {len(weights)} values"
                         + (f", {int(np.sum(np.abs(weights[len(tokens):]) > 1e-6))} of them past the last label and "
                            "not 0, so not padding" if len(weights) > len(tokens) else "")
                         + ". Pass one label per token the weights were computed on.")
    weights = weights[: len(tokens)]
    grey = np.zeros(len(tokens), dtype=bool)
    grey[[i for i in scale_without if 0 <= i < len(tokens)]] = True
    if grey.all():
        grey[:] = False
    scaled_weights = weights[~grey]  # what the colour scale spans
    if value_range is not None:
        low, high = (float(v) for v in value_range)
        scaled = np.clip((weights - low) / max(high - low, 1e-12), 0.0, 1.0)
    elif len(scaled_weights):
        low, high = float(scaled_weights.min()), float(scaled_weights.max())
        scaled = np.clip((weights - low) / max(high - low, 1e-12), 0.0, 1.0)
    else:
        low, high, scaled = 0.0, 1.0, weights
    # Layout in points: a box is the token plus `pad` on each side; boxes are `gap` apart.
    pad, gap, margin = 2.0, 4.0, 10.0
    figure = _figure(figsize=(width, 1.0))
    measure = _text_width(figure, fontsize)
    boxes = [measure(token) + 2 * pad for token in tokens]
    line_width = max([width * 72.0 - 2 * margin] + boxes)
    places, x, line = [], 0.0, 0
    for box in boxes:
        if x > 0 and x + box > line_width:  # wrap before a token that would pass the right edge
            x, line = 0.0, line + 1
        places.append((x, line))
        x += box + gap
    line_height = 1.3 * fontsize + 2 * pad + gap
    top = margin + (2.2 * fontsize if title else 0.0)
    legend = 3.2 * fontsize + (2.6 * fontsize if note else 0.0)  # the colour bar and its ticks (and the note)
    total_width = line_width + 2 * margin
    total_height = top + (line + 1) * line_height + legend + margin
    figure.set_size_inches(total_width / 72.0, total_height / 72.0)
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, total_width)
    ax.set_ylim(total_height, 0)  # y grows downwards, like lines of text
    ax.axis("off")
    colormap = _colormap("Reds")
    for token, value, special, (x, line) in zip(tokens, scaled, grey, places):
        ax.text(
            margin + x + pad, top + (line + 0.5) * line_height, token, fontsize=fontsize, ha="left", va="center",
            parse_math=False,  # "$5" is money, not mathematics
            color="white" if value > 0.6 and not special else "black",  # stays readable on dark backgrounds
            bbox=dict(facecolor="#dddddd" if special else colormap(0.15 + 0.85 * value), edgecolor="none", pad=pad),
        )
    if title:
        ax.text(total_width / 2, margin + 0.8 * fontsize, printable(title), fontsize=fontsize + 2, ha="center",
                va="center", parse_math=False)
    # The colour bar: the part of the colour map the boxes use (0.15-1), from the smallest weight to the largest.
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize

    left = margin + 2.5 * fontsize  # room for the first tick label
    bottom = margin + 1.6 * fontsize + (2.6 * fontsize if note else 0.0)
    if note:
        ax.text(margin, total_height - margin - 0.5 * fontsize, printable(note), fontsize=fontsize - 1, ha="left",
                va="center", parse_math=False, color="#444444")
    bar = figure.add_axes((left / total_width, bottom / total_height,
                           min(0.4, 200.0 / total_width), 0.6 * fontsize / total_height), label="colour bar")
    shown = ScalarMappable(Normalize(low, high if high > low else low + 1e-12),
                           ListedColormap(colormap(np.linspace(0.15, 1.0, 256))))
    colorbar = figure.colorbar(shown, cax=bar, orientation="horizontal")
    colorbar.set_ticks([low, high], labels=[f"{low:.3g}", f"{high:.3g}"])
    colorbar.ax.tick_params(labelsize=fontsize - 2)
    colorbar.set_label("weight" + (" (grey tokens: off this scale)" if grey.any() else ""), fontsize=fontsize - 2,
                       labelpad=1)
    return figure


def plot_alignment(source_tokens, target_tokens, cross_attention, title=None, xlabel="source", ylabel="target"):
    """A translation's alignment: cross-attention weights of target tokens (rows) over source tokens.

    Row `i` is the decoder's query at its input `i`, which predicts output token `i`: label the rows with the
    tokens being predicted (the output shifted by one from the decoder's inputs), not with the inputs.

    Args:
        source_tokens: key labels.
        target_tokens: query labels (the predicted tokens).
        cross_attention: `(target_len, source_len)` weights (e.g. a decoder block's cross-attention averaged
            over heads); cut to the token lists' lengths.
        title: figure title.
        xlabel, ylabel: axis labels.

    Returns:
        matplotlib Figure.
    """
    weights = np.asarray(cross_attention, dtype="float64")[: len(target_tokens), : len(source_tokens)]
    width = 0.45 * len(source_tokens) + 2
    if title:  # short inputs make a narrow figure: widen it so the whole title fits (1 inch of margin)
        from matplotlib import rcParams

        title_points = _text_width(_figure(), rcParams["figure.titlesize"])(title)  # the size suptitle uses
        width = max(width, title_points / 72.0 + 1.0)
    figure = _figure(figsize=(width, 0.45 * len(target_tokens) + 1.5))
    ax = figure.subplots()
    image = ax.imshow(weights, cmap="Blues", vmin=0.0)
    _labels(ax, target_tokens, source_tokens, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    figure.colorbar(image, ax=ax, fraction=0.046, label="attention weight")
    if title:
        figure.suptitle(printable(title))  # centred on the figure (the axes sit off-centre beside the colour bar)
    figure.tight_layout()
    return figure


def plot_position_encoding(pe, title="positional encoding"):
    """The encoding as an image (positions × channels) and the cosine similarity between positions.

    Nearby positions have similar codes and similarity falls off with distance: that is what lets attention
    use relative position.

    Args:
        pe: `(length, dim)` encoding (e.g. `sinusoidal_position_encoding(64, 128)` or a learned table).
        title: figure title.

    Returns:
        matplotlib Figure.
    """
    pe = np.asarray(pe, dtype="float64")
    figure = _figure(figsize=(11, 4))
    axes = figure.subplots(1, 2)
    shown = axes[0].imshow(pe, cmap="RdBu", aspect="auto")
    axes[0].set_xlabel("channel")
    axes[0].set_ylabel("position")
    axes[0].set_title("the code of each position")
    figure.suptitle(title)  # across the whole figure: a long title is never cut at the edge
    figure.colorbar(shown, ax=axes[0])
    similarity = axes[1].imshow(cosine_similarity(pe), cmap="viridis", vmin=-1, vmax=1)
    axes[1].set_xlabel("position")
    axes[1].set_ylabel("position")
    axes[1].set_title("cosine similarity between positions")
    figure.colorbar(similarity, ax=axes[1])
    figure.tight_layout()
    return figure


def plot_confusion_matrix(labels, predicted, class_names):
    """Counts of (true class, predicted class), as an annotated heat map titled with the accuracy.

    Args:
        labels: `(n,)` true class ids.
        predicted: `(n,)` predicted class ids.
        class_names: names of the classes, in id order.

    Returns:
        matplotlib Figure.
    """
    labels, predicted = np.asarray(labels), np.asarray(predicted)
    n = len(class_names)
    counts = np.zeros((n, n), dtype="int64")
    np.add.at(counts, (labels, predicted), 1)  # (true, predicted)
    figure = _figure(figsize=(7.5, 6.5))
    ax = figure.subplots()
    shown = ax.imshow(counts, cmap="Blues")
    for (row, column), count in np.ndenumerate(counts):
        ax.text(column, row, count, ha="center", va="center", fontsize=7,
                color="white" if count > counts.max() / 2 else "black")
    ax.set_xticks(range(n), class_names, rotation=45, ha="right")
    ax.set_yticks(range(n), class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"test accuracy {np.mean(labels == predicted):.1%}")
    figure.colorbar(shown, ax=ax)
    figure.tight_layout()
    return figure


def save_figure(figure, path, dpi=100):
    """Saves `figure` as a PNG at `path` and returns the path."""
    figure.savefig(path, dpi=dpi)
    return path
