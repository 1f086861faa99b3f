"""What the picture modules share: figures without pyplot, colour maps, tick labels, printable labels, saving."""

import numpy as np

from keras_tfm.files import atomic_path


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


def save_figure(figure, path, dpi=100):
    """Saves `figure` as a PNG at `path`, whole or not at all (a run killed while drawing leaves the picture of the
    epoch before, never a cut-short file), and returns the path."""
    with atomic_path(path) as partial:
        figure.savefig(partial, dpi=dpi, format="png")
    return path
