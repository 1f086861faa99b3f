"""Two more pictures: the positional encoding, and a confusion matrix."""

import numpy as np

from keras_tfm.insight.visualize._common import _figure
from keras_tfm.insight.visualize.attention_math import cosine_similarity


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
