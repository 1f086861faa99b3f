"""Token heat maps: the words of a text coloured by a weight (attention from [CLS], a gradient, a change)."""

import numpy as np

from keras_tfm.insight.visualize._common import _colormap, _figure, _text_width, printable


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
