import numpy as np
import pytest

from keras_tfm.layers import PatchEmbedding, resample_position_embeddings, sincos_2d_position_encoding
from tests.helpers import assert_close, random_floats, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the layer contract (tests/layers/test_layer_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))


def test_shapes_with_and_without_class_token():
    images = random_floats(2, 32, 24, 3)
    assert tuple(PatchEmbedding(8, 16)(images).shape) == (2, 1 + 4 * 3, 16)
    assert tuple(PatchEmbedding((8, 4), 16, class_token=False)(images).shape) == (2, 4 * 6, 16)


def test_patches_are_linear_projections_in_row_major_order_plus_2d_positions():
    layer = PatchEmbedding(4, 8)
    images = random_floats(1, 8, 12, 3)
    tokens = to_numpy(layer(images))
    kernel, bias = (to_numpy(w) for w in layer.projection.weights)  # (4, 4, 3, 8), (8,)
    positions = to_numpy(sincos_2d_position_encoding(2, 3, 8))
    np.testing.assert_allclose(tokens[0, 0], 0.0)  # the zero-initialised class token has no position code
    for r in range(2):
        for c in range(3):
            patch = images[0, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4, :]
            expected = np.einsum("hwc,hwcd->d", patch, kernel) + bias + positions[r * 3 + c]
            np.testing.assert_allclose(tokens[0, 1 + r * 3 + c], expected, atol=1e-4)


def test_sincos2d_runs_on_other_image_sizes():
    layer = PatchEmbedding(4, 16)
    layer(random_floats(1, 16, 16, 3))
    assert tuple(layer(random_floats(1, 32, 8, 3)).shape) == (1, 1 + 8 * 2, 16)


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_learned_positions_are_resampled_for_another_grid(interpolation):
    layer = PatchEmbedding(4, 16, position="learned", interpolation=interpolation)
    layer(random_floats(1, 16, 16, 3))  # build grid 4x4
    assert tuple(layer.position_embeddings.shape) == (17, 16)
    assert tuple(layer(random_floats(1, 24, 32, 3)).shape) == (1, 1 + 6 * 8, 16)


def test_resampling_a_smooth_table_keeps_it_smooth():
    # A table that is linear in the grid coordinates is reproduced exactly by bilinear resizing at the centres.
    rows, cols = np.meshgrid(np.arange(4.0), np.arange(4.0), indexing="ij")
    table = np.concatenate([np.full((1, 2), 7.0), np.stack([rows, cols], -1).reshape(16, 2)]).astype("float32")
    same = resample_position_embeddings(table, (4, 4), (4, 4))
    assert_close(same, table)
    bigger = to_numpy(resample_position_embeddings(table, (4, 4), (8, 8), interpolation="bilinear"))
    assert bigger.shape == (65, 2)
    np.testing.assert_allclose(bigger[0], [7.0, 7.0])  # class-token row untouched
    grid = bigger[1:].reshape(8, 8, 2)
    assert np.all(np.diff(grid[:, 3, 0]) >= 0) and np.all(np.diff(grid[3, :, 1]) >= 0)  # monotone like the source


def test_image_size_not_divisible_names_the_side():
    layer = PatchEmbedding(8, 16)
    with pytest.raises(ValueError, match=r"image height \(30\) must be divisible by the patch height \(8\)"):
        layer(random_floats(1, 30, 32, 3))
    with pytest.raises(ValueError, match=r"image width \(20\) must be divisible by the patch width \(8\)"):
        layer(random_floats(1, 32, 20, 3))


def test_wrong_channels_and_rank():
    layer = PatchEmbedding(4, 16)
    layer(random_floats(1, 8, 8, 3))
    with pytest.raises(ValueError, match=r"`images` must have 3 channels.*\(1, 8, 8, 1\)"):
        layer(random_floats(1, 8, 8, 1))
    with pytest.raises(ValueError, match=r"`images` must have rank 4.*\(8, 8, 3\)"):
        PatchEmbedding(4, 16)(random_floats(8, 8, 3))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(patch_size=0, dim=16), r"`patch_size` must be a positive integer.*patch_size=0"),
        (dict(patch_size=(4, 4, 4), dim=16), r"`patch_size` must be an int or a pair"),
        (dict(patch_size=4, dim=18), r"divisible by 4 for position='sincos2d'.*dim=18"),
        (dict(patch_size=4, dim=16, position="sine"), r"`position` must be one of"),
        (dict(patch_size=4, dim=16, interpolation="nearest"), r"`interpolation` must be one of"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PatchEmbedding(**kwargs)


@pytest.mark.parametrize("tokenizer", ["linear", "conv", "shifted"])
def test_every_tokenizer_gives_the_grid_of_the_patch_size(tokenizer):
    layer = PatchEmbedding(4, 16, tokenizer=tokenizer)
    assert tuple(layer(random_floats(2, 16, 8, 3)).shape) == (2, 1 + 4 * 2, 16)
    assert layer.compute_output_shape((2, 16, 8, 3)) == (2, 9, 16)
    assert layer.get_config()["tokenizer"] == tokenizer
