import keras
import numpy as np
import pytest

from keras_tfm import layers as tfm
from keras_tfm import models
from keras_tfm.layers.walk import iter_layers
from tests.helpers import to_numpy

RATE = 0.1


def dropped_fraction(y):
    return float(np.mean(to_numpy(y) == 0))


def test_inference_is_the_identity():
    x = np.random.default_rng(0).normal(size=(2, 5, 7)).astype("float32")
    np.testing.assert_array_equal(to_numpy(tfm.Dropout(0.5)(x)), x)
    np.testing.assert_array_equal(to_numpy(tfm.Dropout(0.5)(x, training=False)), x)


def test_drops_the_rate_and_keeps_the_expected_value():
    x = np.ones((4, 64, 1024), "float32")
    y = to_numpy(tfm.Dropout(RATE, seed=1)(x, training=True))
    assert abs(dropped_fraction(y) - RATE) < 0.003  # 5 standard deviations of 262,144 draws
    kept = y[y != 0]
    np.testing.assert_allclose(kept, kept[0])  # one scale for every kept element
    # PyTorch's masks drop a multiple of 1/65536 (6,554 / 65,536 for 0.1) and scale by its exact inverse
    keep = 1 - (round(RATE * 2**16) / 2**16 if keras.backend.backend() == "torch" else RATE)
    np.testing.assert_allclose(kept[0], 1 / keep, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.005


@pytest.mark.parametrize("seed", [2, None])
def test_every_element_position_is_dropped_at_the_rate(seed):
    # On PyTorch one 64-bit word gives the draws of four neighbouring elements: each of the four must be uniform
    # (a word whose top bit is never set would leave every fourth element undropped).
    x = np.ones((4096, 64), "float32")
    y = to_numpy(tfm.Dropout(RATE, seed=seed)(x, training=True)).reshape(-1, 4)
    per_lane = np.mean(y == 0, axis=0)
    np.testing.assert_allclose(per_lane, RATE, atol=0.006)
    # and neighbours are independent: both of a pair dropped at rate², not more
    assert abs(np.mean((y[:, 0] == 0) & (y[:, 1] == 0)) - RATE**2) < 0.003


def test_odd_sizes_and_bfloat16_keep_shape_and_dtype():
    x = keras.ops.ones((3, 5, 7), "bfloat16")
    y = tfm.Dropout(0.5, seed=0, dtype="mixed_bfloat16")(x, training=True)
    assert tuple(y.shape) == (3, 5, 7) and keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    values = np.unique(to_numpy(keras.ops.cast(y, "float32")))
    assert set(values) <= {0.0, 2.0} and len(values) == 2


def test_a_seed_repeats_its_masks_and_successive_calls_differ():
    x = np.ones((8, 256), "float32")
    first, second = tfm.Dropout(0.3, seed=7), tfm.Dropout(0.3, seed=7)
    a, b = to_numpy(first(x, training=True)), to_numpy(first(x, training=True))
    np.testing.assert_array_equal(to_numpy(second(x, training=True)), a)
    np.testing.assert_array_equal(to_numpy(second(x, training=True)), b)
    assert not np.array_equal(a, b)


def test_without_a_seed_the_global_seed_repeats_the_masks():
    x = np.ones((8, 256), "float32")
    keras.utils.set_random_seed(11)
    layer = tfm.Dropout(0.3)
    a, b = to_numpy(layer(x, training=True)), to_numpy(layer(x, training=True))
    keras.utils.set_random_seed(11)
    np.testing.assert_array_equal(to_numpy(tfm.Dropout(0.3)(x, training=True)), a)
    assert not np.array_equal(a, b)


def test_the_gradient_is_the_mask_times_the_scale():
    layer = tfm.Dropout(0.25, seed=3)
    x = keras.Variable(np.ones((16, 32), "float32"))
    y, grad = _value_and_grad(layer, x)
    np.testing.assert_allclose(grad, y)  # y = x * mask * scale with x = 1: dy/dx is y itself


def _value_and_grad(layer, x):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            y = layer(x, training=True)
            total = tf.reduce_sum(y)
        return y.numpy(), tape.gradient(total, x.value).numpy()
    if backend == "torch":
        value = x.value.detach().requires_grad_(True)
        y = layer(value, training=True)
        y.sum().backward()
        return y.detach().numpy(), value.grad.numpy()
    if backend == "jax":
        import jax

        seeds = [v.value for v in layer.non_trainable_variables]

        def total(value):
            out, _ = layer.stateless_call([], seeds, value, training=True)
            return out.sum(), out

        (_, y), grad = jax.value_and_grad(total, has_aux=True)(x.value)
        return np.asarray(y), np.asarray(grad)
    pytest.skip(f"no gradient helper for {backend}")


def test_config_and_state_are_keras_dropouts():
    ours = tfm.Dropout(0.2, noise_shape=(None, 1), seed=5, name="drop")
    theirs = keras.layers.Dropout(0.2, noise_shape=(None, 1), seed=5, name="drop")
    assert ours.get_config() == theirs.get_config()
    assert [v.shape for v in ours.variables] == [v.shape for v in theirs.variables]  # the seed state
    for bad in (1.5, -0.1, "0.1", True):
        with pytest.raises(ValueError, match=r"`rate` must be a number in \[0, 1\]. Received: rate="):
            tfm.Dropout(bad)


def test_noise_shape_broadcasts_the_mask():
    y = to_numpy(tfm.Dropout(0.5, noise_shape=(None, 1, 16), seed=0)(np.ones((64, 8, 16), "float32"), training=True))
    assert (y == y[:, :1, :]).all()  # one mask per sample and channel, shared along the sequence
    assert 0.3 < dropped_fraction(y) < 0.7


@pytest.mark.parametrize(
    "build",
    [
        lambda: models.TextClassifier.from_preset("tiny", vocab_size=50, max_length=8, num_classes=2),
        lambda: models.ViT.from_preset("tiny", image_size=8, patch_size=4, num_classes=3),
        lambda: models.Seq2SeqTransformer.from_preset("tiny", source_vocab_size=20, target_vocab_size=20, max_length=6),
    ],
    ids=["TextClassifier", "ViT", "Seq2SeqTransformer"],
)
def test_the_models_drop_with_this_layer(build):
    model = build()
    dropouts = [layer for layer in iter_layers(model) if isinstance(layer, keras.layers.Dropout)]
    assert dropouts and all(type(layer) is tfm.Dropout for layer in dropouts)
