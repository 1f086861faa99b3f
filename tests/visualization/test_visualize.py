import numpy as np
import pytest

from keras_tfm import visualize
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
