"""The change view's measure (`visualize.attention_change`) and its pictures: checked by hand and on a model where
only one head was changed, which the view must find."""

import keras
import matplotlib.text
import numpy as np
import pytest

from keras_tfm import TextClassifier, attention_maps
from keras_tfm.insight import visualize
from keras_tfm.insight.visualize.attention_plots import plot_attention_change


def test_change_is_the_total_variation_per_query_averaged_over_real_queries():
    before = np.array([[[[1.0, 0.0], [0.5, 0.5], [0.3, 0.7]]]])  # (1 sample, 1 head, 3 queries, 2 keys)
    after = np.array([[[[0.0, 1.0], [0.5, 0.5], [0.9, 0.1]]]])
    names, change = visualize.attention_change({"layer": before}, {"layer": after})
    assert names == ["layer"] and change.shape == (1, 1)
    np.testing.assert_allclose(change[0, 0], (1.0 + 0.0 + 0.6) / 3)
    _, masked = visualize.attention_change({"layer": before}, {"layer": after}, query_mask=[[True, True, False]])
    np.testing.assert_allclose(masked[0, 0], (1.0 + 0.0) / 2)  # the padding query is left out
    with pytest.raises(ValueError, match="same layers"):
        visualize.attention_change({"a": before}, {"b": after})


def test_the_one_head_that_was_changed_is_ranked_first_and_no_earlier_layer_moves():
    keras.utils.set_random_seed(0)
    model = TextClassifier.from_preset("tiny", vocab_size=50, max_length=12, dim=32, depth=3, num_heads=4, mlp_dim=64,
                                       num_classes=2)
    ids = np.random.default_rng(0).integers(1, 50, (4, 12)).astype("int32")
    ids[:, 9:] = 0  # padding
    before = attention_maps(model, ids)
    query = model.encoder.get_layer("block_2").attention.query_dense.kernel  # (dim, heads, head_dim)
    value = keras.ops.convert_to_numpy(query).copy()
    value[:, 1, :] += np.random.default_rng(1).normal(0, 1.0, value[:, 1, :].shape)  # head 1 of block_2 only
    query.assign(value)
    names, change = visualize.attention_change(before, attention_maps(model, ids), query_mask=ids != 0)
    layer, head = np.unravel_index(np.argmax(change), change.shape)
    assert (names[layer], head) == ("block_2", 1)
    assert change[layer, head] > 0.05
    others = change.copy()
    others[layer, head] = 0
    assert others.max() < 1e-6, change  # every other head reads exactly what it read before
    figure = visualize.plot_attention_change(names, change)
    ranking = [t.get_text() for ax in figure.axes for t in ax.texts if t.get_text().startswith("most changed")]
    assert ranking and ranking[0].splitlines()[1].startswith("1. block_2, head 1:")


def test_row_before_and_after_share_one_scale(tmp_path):
    figure = visualize.plot_row_before_after(["[CLS]", "a", "great", "film", "[SEP]"], [0.5, 0.1, 0.1, 0.1, 0.2],
                                             [0.4, 0.0, 0.5, 0.0, 0.1], title="block_5, head 3",
                                             scale_without=[0, 4])
    path = visualize.save_figure(figure, str(tmp_path / "row.png"))
    assert path.endswith("row.png")
    # one scale: the same weight gets the same colour in both rows ("great" 0.1 before, "a" 0.1... none after)
    before = visualize.plot_token_attention(["a", "b"], [0.1, 0.5], value_range=(0.0, 0.5))
    after = visualize.plot_token_attention(["a", "b"], [0.1, 0.2], value_range=(0.0, 0.5))
    colour = lambda figure, i: figure.axes[0].texts[i].get_bbox_patch().get_facecolor()  # noqa: E731
    assert colour(before, 0) == colour(after, 0) and colour(after, 1) != colour(before, 1)


def test_control_characters_never_reach_a_label():
    assert visualize.printable("film\x85great") == "film great"
    figure = visualize.plot_token_attention(["a\x85", "b"], [0.5, 0.5], title="t\x85")
    texts = [t.get_text() for ax in figure.axes for t in ax.texts]
    assert all(text.isprintable() for text in texts)


@pytest.mark.parametrize("scale", [0.6, 0.01])  # "0.38" cells, and the "4e-03" cells of a gentle fine-tune
def test_every_word_of_the_change_picture_lies_inside_it(scale):
    # The quick start's model: six attention layers with long names, four heads (the narrowest map).
    names = [f"{part}_block_{i}/{kind}_attention" for part, kinds in (("encoder", ("self",)),
                                                                      ("decoder", ("self", "cross")))
             for i in range(2) for kind in kinds]
    change = np.random.default_rng(0).uniform(0, scale, (len(names), 4))
    figure = plot_attention_change(names, change, title="epoch 3: how far each head's attention moved since epoch 2")
    figure.canvas.draw()
    width, height = figure.bbox.width, figure.bbox.height
    texts = [text for text in figure.findobj(matplotlib.text.Text) if text.get_visible() and text.get_text()]
    assert any("cross_attention, head" in text.get_text() for text in texts)  # the ranking is among them
    for text in texts:
        box = text.get_window_extent()
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, text.get_text()[:60]
    # The numbers stay inside their cells: each cell's label is narrower than the cell.
    heatmap = figure.axes[0]
    cell_width = heatmap.get_window_extent().width / change.shape[1]
    labels = [text for text in heatmap.texts]
    assert len(labels) == change.size
    assert max(text.get_window_extent().width for text in labels) < cell_width


def test_a_masked_diagonal_is_explained_under_the_head_pictures():
    weights = np.random.default_rng(0).uniform(0.1, 1, (1, 2, 5, 5))
    plain = visualize.plot_attention_heads(weights)
    weights[:, :, np.arange(5), np.arange(5)] = 0  # locality self-attention: no token attends to itself
    masked = visualize.plot_attention_heads(weights)
    def words(figure):
        return " ".join(text.get_text() for text in figure.findobj(matplotlib.text.Text))

    assert "attend to itself" not in words(plain)
    assert "no token may attend to itself (locality self-attention" in words(masked)
