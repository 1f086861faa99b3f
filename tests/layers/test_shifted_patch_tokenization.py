import numpy as np
import pytest

from keras_tfm.layers import PatchEmbedding, ShiftedPatchTokenization
from tests.helpers import random_floats, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the layer contract (tests/layers/test_layer_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))


def test_the_image_and_its_four_diagonal_half_patch_shifts_are_stacked():
    layer = ShiftedPatchTokenization(4, 8)
    image = random_floats(1, 8, 8, 1)
    stacked = to_numpy(layer.shifted_images(image))[0]  # (8, 8, 5)
    np.testing.assert_array_equal(stacked[..., 0], image[0, ..., 0])
    padded = np.pad(image[0, ..., 0], 2)  # a 2-pixel (half-patch) zero border
    moved = {(dy, dx): padded[2 - dy:10 - dy, 2 - dx:10 - dx] for dy in (2, -2) for dx in (2, -2)}
    # Down-right, down-left, up-right, up-left: content moved by (dy, dx), zeros where it came from.
    for channel, shift in enumerate([(2, 2), (2, -2), (-2, 2), (-2, -2)], start=1):
        np.testing.assert_array_equal(stacked[..., channel], moved[shift])
    assert np.all(stacked[:2, :2, 1] == 0) and np.all(stacked[-2:, -2:, 4] == 0)


def test_tokens_are_layer_normed_flattened_patches_projected():
    layer = ShiftedPatchTokenization((4, 2), 8)
    images = random_floats(2, 8, 6, 3)
    tokens = to_numpy(layer(images))
    assert tokens.shape == (2, 2, 3, 8)
    stacked = to_numpy(layer.shifted_images(images))  # (2, 8, 6, 15)
    patch = stacked[1, 4:8, 2:4, :].reshape(-1)  # the patch at row 1, column 1, in (h, w, c) order
    normed = (patch - patch.mean()) / np.sqrt(patch.var() + 1e-6)
    expected = normed @ to_numpy(layer.projection.kernel) + to_numpy(layer.projection.bias)
    np.testing.assert_allclose(tokens[1, 1, 1], expected, atol=1e-4)
    assert tuple(layer.projection.kernel.shape) == (4 * 2 * 5 * 3, 8)


def test_patch_embedding_with_shifted_patches_runs_on_other_sizes():
    embed = PatchEmbedding(4, 16, tokenizer="shifted", class_token=False)
    assert tuple(embed(random_floats(2, 16, 16, 3)).shape) == (2, 16, 16)
    assert tuple(embed(random_floats(1, 8, 12, 3)).shape) == (1, 6, 16)
    assert isinstance(embed.projection, ShiftedPatchTokenization)


def test_bad_arguments():
    for patch_size in (1, (4, 1), (2, 2, 2), 2.5):
        with pytest.raises(ValueError, match=r"`patch_size` must be .*at least 2.*patch_size="):
            ShiftedPatchTokenization(patch_size, 8)
    with pytest.raises(ValueError, match=r"`dim` must be a positive integer.*dim=0"):
        ShiftedPatchTokenization(4, 0)
    with pytest.raises(ValueError, match=r"`images` must have rank 4"):
        ShiftedPatchTokenization(4, 8)(random_floats(2, 8, 8))
