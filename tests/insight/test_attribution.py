"""Occlusion sensitivity: exact on a model worked by hand, and on a known answer (a trained pooled ViT must be
found looking at the two squares that decide its label, where the mean of its rollout's rows is not)."""

import keras
import numpy as np
import pytest

from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.insight.attribution import occlusion_map
from keras_tfm.models import ViT, ViTBackbone


def _red_share_model():
    """Logits (0, 10 * mean of the red channel over the top-left 4x4 square): only that square matters."""
    images = keras.Input((8, 8, 3))
    corner = keras.layers.Lambda(lambda x: keras.ops.mean(x[:, :4, :4, 0], axis=(1, 2))[:, None])(images)
    logits = keras.layers.Lambda(lambda v: keras.ops.concatenate([keras.ops.zeros_like(v), 10.0 * v], -1))(corner)
    return keras.Model(images, logits)


def test_occlusion_is_the_score_drop_worked_by_hand():
    image = np.zeros((1, 8, 8, 3), "float32")
    image[0, :4, :4, 0] = 1.0  # a red top-left square: logits (0, 10), predicted class 1
    drops = occlusion_map(_red_share_model(), image, patch_size=4)
    # Hiding the top-left patch paints it the image's mean colour (red 16/64 = 0.25): logits (0, 2.5). The
    # score is the log-odds of class 1 against class 0: 10 before, 2.5 after. The other patches change nothing.
    np.testing.assert_allclose(drops[0], [[7.5, 0.0], [0.0, 0.0]], atol=1e-5)
    # A black fill and the other class (class 0's log-odds: -10 before, 0 after): the drop is -10.
    np.testing.assert_allclose(occlusion_map(_red_share_model(), image, patch_size=4, fill=0.0, classes=[0])[0, 0, 0],
                               -10.0, atol=1e-5)


def test_occlusion_rejects_bad_arguments():
    model, images = _red_share_model(), np.zeros((2, 8, 8, 3), "float32")
    with pytest.raises(ValueError, match="PatchEmbedding"):
        occlusion_map(model, images)  # no patch size to take from the model
    with pytest.raises(ValueError, match="must divide"):
        occlusion_map(model, images, patch_size=3)
    with pytest.raises(ValueError, match="fill"):
        occlusion_map(model, images, patch_size=4, fill="median")
    with pytest.raises(ValueError, match="classes"):
        occlusion_map(model, images, patch_size=4, classes=[0, 2])
    with pytest.raises(ValueError, match="images"):
        occlusion_map(model, images[0], patch_size=4)


def two_squares(samples, seed, size=16):
    """Grey noise with a red and a blue square, each exactly one 4x4 patch; label 1 if the red one is further
    left. Both are always there, so no class can be told by an absence: all the evidence is in their two patches.
    Also returns the `(samples, patches)` mask of those patches."""
    rng = np.random.default_rng(seed)
    images = rng.integers(90, 170, (samples, size, size, 1)).repeat(3, axis=-1).astype("uint8")
    labels, patches = np.zeros(samples, "int64"), np.zeros((samples, (size // 4) ** 2), bool)
    for i in range(samples):
        while True:
            (r1, c1), (r2, c2) = rng.integers(0, size // 4, (2, 2))
            if c1 != c2:
                break
        images[i, 4 * r1:4 * r1 + 4, 4 * c1:4 * c1 + 4] = (220, 40, 40)
        images[i, 4 * r2:4 * r2 + 4, 4 * c2:4 * c2 + 4] = (50, 90, 230)
        patches[i, [r1 * size // 4 + c1, r2 * size // 4 + c2]] = True
        labels[i] = int(c1 < c2)
    return images, labels, patches


def test_occlusion_finds_the_squares_a_pooled_vit_decides_by_where_its_rollout_does_not():
    keras.utils.set_random_seed(0)
    images, labels, _ = two_squares(3000, seed=0)
    held_out, held_out_labels, squares = two_squares(32, seed=1)
    model = ViT(ViTBackbone(image_size=16, patch_size=4, dim=32, depth=2, num_heads=2, mlp_dim=64, dropout=0.0,
                            class_token=False), num_classes=2, dropout=0.0, pool="mean")
    model.compile_for_training(optimizer=keras.optimizers.Adam(2e-3))
    model.fit(images, labels, batch_size=64, epochs=6, verbose=0)
    accuracy = np.mean(model.predict(held_out, verbose=0).argmax(-1) == held_out_labels)
    assert accuracy >= 0.9  # it learned the task, so its evidence is the squares

    def mass_on_squares(relevance):
        shares = np.stack([visualize.images._share(r) for r in relevance.reshape(len(relevance), -1)])
        return float((shares * squares).sum(-1).mean())

    occlusion = mass_on_squares(occlusion_map(model, held_out))
    rollout = mass_on_squares(visualize.rollout_relevance(visualize.attention_rollout(attention_maps(model, held_out)),
                                                          num_prefix_tokens=0))
    print(f"mass on the squares (2 of 16 patches): occlusion {occlusion:.2f}, mean rollout row {rollout:.2f}")
    assert occlusion >= 0.8
    assert rollout < 0.8  # the mean rollout row misses what occlusion meets: why pooled pictures use occlusion


def test_occlusion_pictures_share_one_colour_scale_and_say_what_the_colour_is():
    image = np.zeros((8, 8, 3), "float32")
    drops = np.array([[7.5, -2.0], [0.0, 2.5]])  # a negative drop (hiding helped the class) counts as 0
    figure = visualize.plot_occlusion(image, drops, title="true: a, predicted: a (p = 0.99)")
    heat_map, overlay = figure.axes[1], figure.axes[2]
    np.testing.assert_allclose(heat_map.images[0].get_array(), [[0.75, 0.0], [0.0, 0.25]])  # shares of the drop
    assert heat_map.images[0].get_clim() == overlay.images[1].get_clim() == (0.0, 0.75)  # one scale
    assert figure.axes[-1].get_ylabel() == "share of the score drop"  # the colour bar
    with pytest.raises(ValueError, match="drops"):
        visualize.plot_occlusion(image, drops[None])

    # Several images on one scale: the brightest patch of all the images sets it, so they can be compared.
    grid = visualize.plot_relevance_grid(np.zeros((2, 8, 8, 3)), np.array([[[1.0, 0], [0, 0]], [[1.0, 1], [1, 1]]]),
                                         titles=["one patch", "all four"], label="share")
    overlays = [ax.images[1] for ax in grid.axes if len(ax.images) == 2]
    assert [o.get_clim() for o in overlays] == [(0.0, 1.0), (0.0, 1.0)]
    np.testing.assert_allclose(overlays[1].get_array(), np.full((2, 2), 0.25))
    with pytest.raises(ValueError, match="relevance"):
        visualize.plot_relevance_grid(np.zeros((2, 8, 8, 3)), np.ones((3, 2, 2)))
