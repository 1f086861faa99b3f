"""Pictures of what attention does: head grids, attention rollout over images, token heat maps, alignment
matrices, positional-encoding plots, and mean attention distance.

The math (`attention_rollout`, `mean_attention_distance`, `cosine_similarity`) is plain NumPy; the `plot_*`
functions return matplotlib Figures made without pyplot (headless, nothing to close) that you can
`fig.savefig("x.png")` or show in a notebook. Attention maps come from `keras_tfm.attention_maps`.
`attention_html`, `save_attention_html` and `show_attention` (from `keras_tfm.insight.explorer`) make the
interactive page.

One module per kind of picture; every name is here:

* `attention_math`: the NumPy math (rollout, mean attention distance, attention change, cosine similarity);
* `attention_plots`: a layer's heads, alignment, the change view, a row before and after;
* `images`: where a vision model looks (rollout and occlusion over the image, grids with one colour scale);
* `tokens`: token heat maps;
* `plots`: the positional encoding, a confusion matrix;
* `_common`: figures without pyplot, tick labels, `printable`, `save_figure`.
"""

from keras_tfm.insight.explorer import attention_html, save_attention_html, show_attention  # the HTML explorer
from keras_tfm.insight.patch_grid import infer_grid
from keras_tfm.insight.visualize._common import printable, save_figure
from keras_tfm.insight.visualize.attention_math import (
    HEAD_FUSIONS, attention_change, attention_rollout, cosine_similarity, mean_attention_distance)
from keras_tfm.insight.visualize.attention_plots import (
    DECODER_ROWS, plot_alignment, plot_attention_change, plot_attention_heads, plot_row_before_after)
from keras_tfm.insight.visualize.images import (
    plot_image_attention, plot_occlusion, plot_relevance_grid, rollout_relevance)
from keras_tfm.insight.visualize.plots import plot_confusion_matrix, plot_position_encoding
from keras_tfm.insight.visualize.tokens import plot_token_attention

__all__ = [
    "DECODER_ROWS", "HEAD_FUSIONS", "attention_change", "attention_html", "attention_rollout", "cosine_similarity",
    "infer_grid", "mean_attention_distance", "plot_alignment", "plot_attention_change", "plot_attention_heads",
    "plot_confusion_matrix", "plot_image_attention", "plot_occlusion", "plot_position_encoding",
    "plot_relevance_grid", "plot_row_before_after", "plot_token_attention", "printable", "rollout_relevance",
    "save_attention_html", "save_figure", "show_attention",
]
