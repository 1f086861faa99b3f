"""Where the patch tokens of an image sit: the `(rows, columns)` grid a ViT cut the image into.

Shared by the pictures (`keras_tfm.insight.visualize`) and the explorer page, which both lay attention over patches back
onto the image.
"""

import math


def infer_grid(num_patches, image_shape=None):
    """The `(rows, columns)` patch grid for `num_patches` patches of an image of `image_shape` (H, W, ...)."""
    if image_shape is not None:
        height, width = image_shape[:2]
        for rows in range(1, num_patches + 1):
            if num_patches % rows == 0 and abs(rows / (num_patches // rows) - height / width) < 1e-6:
                return rows, num_patches // rows
    side = int(round(math.sqrt(num_patches)))
    if side * side != num_patches:
        raise ValueError(f"Cannot infer a patch grid for {num_patches} patches; pass `grid=(rows, columns)`.")
    return side, side
