"""Pictures of attention maps: a layer's heads, an alignment matrix, and what fine-tuning changed (the change
view and one row before and after)."""

import math
import textwrap

import numpy as np

from keras_tfm.insight.visualize._common import _colormap, _figure, _labels, _real_length, _text_width, printable
from keras_tfm.insight.visualize.tokens import plot_token_attention


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
    high = max(float(change.max()), 1e-6)
    small = high < 0.05  # a short or gentle fine-tune: "0.00" in every cell would hide which heads moved
    cell, ranked = ("{:.0e}", "{:.1e}") if small else ("{:.2f}", "{:.3f}")
    order = np.argsort(-change, axis=None)[:top]
    lines = ["most changed heads:"] + [f"{k + 1}. {printable(names[i])}, head {j}: {ranked.format(change[i, j])}"
                                       for k, (i, j) in enumerate(zip(*np.unravel_index(order, change.shape)))]
    # Room measured in characters (about 0.075 inch each at 9 points, monospace 0.078): the layer names left of
    # the map, cells wide enough for their numbers, and the ranking's longest line, so nothing runs off the figure.
    label_inches = 0.3 + 0.075 * max(len(printable(name)) for name in names)
    map_inches = max(0.62, 0.09 * len(cell.format(high)) + 0.2) * heads + 0.9  # + the colour bar
    side_inches = 0.2 + 0.078 * max(len(line) for line in lines)
    width = label_inches + map_inches + side_inches
    figure = _figure(figsize=(width, 1.4 + 0.5 * layers))
    grid = figure.add_gridspec(1, 2, width_ratios=[label_inches + map_inches, side_inches])
    ax = figure.add_subplot(grid[0])
    image = ax.imshow(change, cmap=_colormap("Reds"), vmin=0.0, vmax=high, aspect="auto")
    for i in range(layers):
        for j in range(heads):
            ax.text(j, i, cell.format(change[i, j]), ha="center", va="center", fontsize=8,
                    color="white" if change[i, j] > 0.6 * high else "black")
    ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=9)
    ax.set_yticks(range(layers), [printable(n) for n in names], fontsize=9)
    ax.set_xlabel("head")
    colorbar = figure.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    colorbar.set_label("share of attention moved", fontsize=8)
    side = figure.add_subplot(grid[1])
    side.axis("off")
    side.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=9, family="monospace", transform=side.transAxes)
    figure.suptitle(printable(title or "how far each head's attention moved"), fontsize=11)
    caption = textwrap.wrap("total variation distance per query, 0.5 Σ|before − after| over the keys, mean over the "
                            "queries: 0 = unchanged, 1 = all of the attention went elsewhere", int(18 * width))
    figure.text(0.01, 0.01, "\n".join(caption), fontsize=7, color="#444444")
    rect = (0, 0.03 + 0.025 * len(caption), 1, 0.95)
    figure.tight_layout(rect=rect)
    for _ in range(3):  # fonts differ between machines: measure the ranking and widen the figure until it fits
        figure.canvas.draw()
        overflow = max(text.get_window_extent().x1 for text in side.texts) / figure.dpi - figure.get_figwidth()
        if overflow <= -0.1:  # a tenth of an inch to spare
            break
        figure.set_figwidth(figure.get_figwidth() + overflow + 0.3)
        figure.tight_layout(rect=rect)
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
    if queries == keys and queries > 1 and not np.diagonal(weights, axis1=1, axis2=2).any():
        # Only a mask empties the whole diagonal of every head: say which, or it reads as a finding.
        figure.supxlabel("the dark diagonal is a mask, not a finding: no token may attend to itself (locality "
                         "self-attention, Lee et al. 2021)", fontsize=8, color="#444444")
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
