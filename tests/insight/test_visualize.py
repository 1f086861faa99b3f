import os

import numpy as np
import pytest

from keras_tfm.insight import visualize
from keras_tfm.layers import sinusoidal_position_encoding
from tests.helpers import to_numpy


def random_maps(layers=3, batch=2, heads=2, tokens=5, seed=0):
    rng = np.random.default_rng(seed)
    maps = []
    for _ in range(layers):
        weights = rng.random((batch, heads, tokens, tokens))
        maps.append(weights / weights.sum(-1, keepdims=True))
    return maps


def test_rollout_rows_sum_to_one():
    for fusion in visualize.HEAD_FUSIONS:
        rollout = visualize.attention_rollout(random_maps(), head_fusion=fusion, discard_ratio=0.2)
        assert rollout.shape == (2, 5, 5)
        np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-9)


def test_identity_attention_gives_identity_rollout():
    identity = np.broadcast_to(np.eye(4), (1, 3, 4, 4))
    np.testing.assert_allclose(visualize.attention_rollout([identity, identity]), np.eye(4)[None])


def test_rollout_multiplies_layers_in_order():
    first, second = random_maps(layers=2, batch=1, heads=1)
    expected = (0.5 * second[0, 0] + 0.5 * np.eye(5)) @ (0.5 * first[0, 0] + 0.5 * np.eye(5))
    np.testing.assert_allclose(visualize.attention_rollout([first, second])[0], expected)


def test_rollout_rejects_bad_arguments():
    with pytest.raises(ValueError, match="head_fusion"):
        visualize.attention_rollout(random_maps(), head_fusion="sum")
    with pytest.raises(ValueError, match="discard_ratio"):
        visualize.attention_rollout(random_maps(), discard_ratio=1.0)


def test_mean_attention_distance():
    grid = (3, 3)
    self_only = np.broadcast_to(np.eye(10), (1, 2, 10, 10))  # [CLS] + 9 patches, each looks at itself
    np.testing.assert_allclose(visualize.mean_attention_distance([self_only], grid), 0.0)
    uniform = np.full((1, 1, 10, 10), 0.1)
    r, c = np.divmod(np.arange(9), 3)
    expected = np.hypot(r[:, None] - r[None], c[:, None] - c[None]).mean()
    np.testing.assert_allclose(visualize.mean_attention_distance([uniform], grid), [[expected]])


def test_cosine_similarity_of_sinusoidal_positions_falls_with_distance():
    similarity = visualize.cosine_similarity(to_numpy(sinusoidal_position_encoding(32, 64)))
    np.testing.assert_allclose(np.diag(similarity), 1.0)
    assert similarity[10, 11] > similarity[10, 14] > similarity[10, 25]


def png_size(path):
    with open(path, "rb") as file:
        header = file.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_every_plot_renders_to_png(tmp_path):
    maps = random_maps(tokens=17)
    figures = {
        "heads": visualize.plot_attention_heads(maps[0], query_tokens=list("abcdefghijklmnopq")),
        "image": visualize.plot_image_attention(
            np.random.default_rng(0).integers(0, 255, (16, 16, 3)), visualize.attention_rollout(maps)[0]
        ),
        "tokens": visualize.plot_token_attention(["a", "good", "movie"], [0.1, 0.7, 0.2]),
        "alignment": visualize.plot_alignment(["ein", "Hund"], ["a", "dog", "</s>"], np.random.rand(3, 2)),
        "position": visualize.plot_position_encoding(to_numpy(sinusoidal_position_encoding(16, 32))),
    }
    for name, figure in figures.items():
        width, height = png_size(visualize.save_figure(figure, tmp_path / f"{name}.png"))
        assert width > 100 and height > 50


def test_grid_inference():
    assert visualize.infer_grid(16) == (4, 4)
    assert visualize.infer_grid(8, image_shape=(16, 32, 3)) == (2, 4)
    with pytest.raises(ValueError, match="grid"):
        visualize.infer_grid(7)


def test_confusion_matrix_counts(tmp_path):
    figure = visualize.plot_confusion_matrix([0, 0, 1, 2], [0, 1, 1, 2], ["cat", "dog", "frog"])
    image = figure.axes[0].images[0].get_array()
    np.testing.assert_array_equal(image, [[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    assert "75.0%" in figure.axes[0].get_title()
    assert png_size(visualize.save_figure(figure, tmp_path / "confusion.png"))[0] > 100


def padded_maps(real, padded, heads=3, seed=0):
    """`(1, heads, padded, padded)` attention over `real` keys, as a padded batch gives it."""
    weights = np.random.default_rng(seed).random((1, heads, padded, padded))
    weights[..., real:] = 0.0
    return weights / weights.sum(-1, keepdims=True)


def test_heads_figure_draws_only_the_real_block_with_token_labels_and_a_colour_bar():
    words = ["[CLS]", "an", "uninspired", "film"]
    figure = visualize.plot_attention_heads(padded_maps(4, 40), words, words, title="block_0")
    heads = [ax for ax in figure.axes if ax.images and ax.get_title().startswith("head")]
    assert len(heads) == 3
    for ax in heads:
        assert ax.images[0].get_array().shape == (4, 4)
        assert tuple(ax.images[0].get_extent()) == (-0.5, 3.5, 3.5, -0.5)  # 4 x 4 cells, not 40 x 40
        assert [label.get_text() for label in ax.get_xticklabels()] == words
        assert ax.get_xlabel() == "key (attended to)"
    assert [label.get_text() for label in heads[0].get_yticklabels()] == words
    assert heads[0].get_ylabel() == "query (attending)"
    colour_bars = [ax for ax in figure.axes if ax.get_ylabel() == "attention weight"]
    assert len(colour_bars) == 1
    assert len({ax.images[0].get_clim() for ax in heads}) == 1  # one colour scale for every head


def test_heads_figure_takes_real_lengths_without_tokens_and_checks_them():
    figure = visualize.plot_attention_heads(padded_maps(6, 10)[0], query_length=10, key_length=6)
    assert all(ax.images[0].get_array().shape == (10, 6) for ax in figure.axes if ax.get_title().startswith("head"))
    with pytest.raises(ValueError, match=r"`key_tokens` has 2 labels but `key_length` is 3"):
        visualize.plot_attention_heads(padded_maps(3, 5), key_tokens=["a", "b"], key_length=3)
    with pytest.raises(ValueError, match=r"`query_length` \(or the number of `query_tokens`\) must be in \[1, 5\]"):
        visualize.plot_attention_heads(padded_maps(3, 5), query_length=6)


def word_boxes(figure):
    """Each word's drawn box, in display pixels, in the order the words were given (the title is not a word)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for t in figure.axes[0].texts if t.get_bbox_patch() is not None]
    return [t.get_text() for t in texts], [t.get_bbox_patch().get_window_extent(renderer) for t in texts]


def test_token_heat_map_gives_every_word_its_width_none_cut_none_overlapping():
    words = ("I thought this movie was uninspired and its exceptional cast occasionally wasted ; the "
             "cinematography was extraordinarily beautiful but it costs $5 and $10 , overall disappointing").split()
    weights = np.random.default_rng(0).random(len(words))
    figure = visualize.plot_token_attention(words, weights, title="true: negative, predicted: negative")
    texts, boxes = word_boxes(figure)
    assert texts == words  # nothing dropped, "$5" drawn as written (not as mathematics)
    width, height = figure.bbox.width, figure.bbox.height
    for box in boxes:  # inside the picture: nothing cut at an edge
        assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap_x = min(a.x1, b.x1) - max(a.x0, b.x0)
            overlap_y = min(a.y1, b.y1) - max(a.y0, b.y0)
            assert overlap_x <= 0 or overlap_y <= 0, "two word boxes overlap"
    lines = sorted({round(box.y0) for box in boxes})
    assert len(lines) >= 2  # it wrapped
    rows = [[box for box in boxes if round(box.y0) == y] for y in lines]
    assert all(row == sorted(row, key=lambda box: box.x0) for row in rows)  # reading order, left to right


def test_a_word_wider_than_the_line_widens_the_figure():
    figure = visualize.plot_token_attention(["a", "x" * 200, "b"], [0.1, 0.5, 0.9], width=3)
    _, boxes = word_boxes(figure)
    assert all(box.x1 <= figure.bbox.width for box in boxes) and figure.get_size_inches()[0] > 3


@pytest.mark.parametrize("source_length", [1, 3, 12])
def test_alignment_title_is_never_cut(source_length):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    title = "reverse: cross-attention of the last decoder block"
    figure = visualize.plot_alignment(list("abcdefghijkl"[:source_length]), ["x", "y"],
                                      np.random.rand(2, source_length), title=title)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    [shown] = [text for text in figure.texts if text.get_text() == title]
    box, page = shown.get_window_extent(renderer), figure.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1 and box.y1 <= page.y1


def test_image_rollout_reads_the_cls_row_or_without_one_the_mean_of_all_tokens():
    image = np.zeros((8, 8, 3), "uint8")
    rollout = np.full((5, 5), 0.1)  # [CLS] + a 2x2 grid of patches
    rollout[0, 1] = 1.0  # [CLS] reads the first patch
    rollout[1:, 4] = 1.0  # every patch token reads the last patch
    with_cls = visualize.plot_image_attention(image, rollout, num_prefix_tokens=1).axes[1]
    assert np.argmax(with_cls.images[0].get_array()) == 0 and with_cls.get_title() == "[CLS] rollout"
    patches_only = rollout[1:, 1:]  # the same model without [CLS]: mean pooling reads every token
    pooled = visualize.plot_image_attention(image, patches_only, num_prefix_tokens=0).axes[1]
    assert np.argmax(pooled.images[0].get_array()) == 3 and pooled.get_title() == "rollout, mean of all tokens"


def test_token_heat_map_refuses_labels_that_do_not_fit_its_weights_and_has_a_colour_bar():
    with pytest.raises(ValueError, match="`tokens` has 3 labels but `weights` has 5 values, 2 of them past the last"):
        visualize.plot_token_attention(["a", "b", "c"], [0.1, 0.2, 0.3, 0.2, 0.2])
    with pytest.raises(ValueError, match="`tokens` has 3 labels but `weights` has 2 values"):
        visualize.plot_token_attention(["a", "b", "c"], [0.1, 0.2])
    figure = visualize.plot_token_attention(["a", "b", "c"], [0.1, 0.6, 0.3, 0.0, 0.0])  # masked padding: cut
    bars = [ax for ax in figure.axes if ax.get_label() == "colour bar"]
    assert len(bars) == 1 and [t.get_text() for t in bars[0].get_xticklabels()] == ["0.1", "0.6"]



def test_a_picture_is_saved_whole_or_not_at_all(tmp_path):
    """A run killed while it draws keeps the picture of the epoch before: the PNG is written under a partial name
    and renamed into place."""
    figure = visualize.plot_confusion_matrix(np.array([0, 1]), np.array([0, 1]), ["a", "b"])
    path = tmp_path / "confusion.png"
    visualize.save_figure(figure, path)
    before = path.read_bytes()

    def cut_short(target, **kwargs):
        with open(target, "wb") as file:
            file.write(before[:100])
        raise KeyboardInterrupt  # Ctrl-C in the middle of the write

    figure.savefig = cut_short
    with pytest.raises(KeyboardInterrupt):
        visualize.save_figure(figure, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["confusion.png"]
