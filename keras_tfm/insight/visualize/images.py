"""Where a vision model looks: rollout and occlusion maps over the image, and grids of them with one colour scale."""

import math

import numpy as np

from keras_tfm.insight.patch_grid import infer_grid
from keras_tfm.insight.visualize._common import _figure, printable


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
    """An occlusion map (`keras_tfm.insight.attribution.occlusion_map`) as a heat map beside and over the image.

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
