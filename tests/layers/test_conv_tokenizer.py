import keras
import numpy as np
import pytest

from keras_tfm.layers import ConvTokenizer, PatchEmbedding, conv_tokenizer
from tests.helpers import random_floats, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the layer contract (tests/layers/test_layer_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))


def test_each_stage_halves_the_grid():
    assert tuple(ConvTokenizer(16, stages=1)(random_floats(2, 32, 24, 3)).shape) == (2, 16, 12, 16)
    tokenizer = ConvTokenizer(16, stages=3, hidden_dim=8)
    assert tuple(tokenizer(random_floats(2, 32, 24, 3)).shape) == (2, 4, 3, 16)
    assert [tuple(w.shape) for w in tokenizer.weights] == [(3, 3, 3, 8), (3, 3, 8, 8), (3, 3, 8, 16)]


def test_one_stage_is_conv_relu_then_3x3_max_pool_with_stride_2():
    tokenizer = ConvTokenizer(4, stages=1)
    images = random_floats(1, 4, 4, 2)
    out = to_numpy(tokenizer(images))
    kernel = to_numpy(tokenizer.convolutions[0].kernel)  # (3, 3, 2, 4), no bias
    padded = np.pad(images[0], ((1, 1), (1, 1), (0, 0)))
    conv = np.maximum(np.stack([[np.einsum("hwc,hwcd->d", padded[r:r + 3, c:c + 3], kernel) for c in range(4)]
                                for r in range(4)]), 0)  # (4, 4, 4) after ReLU
    # "same" 3x3 pooling with stride 2 on 4 pixels: windows [0, 1, 2] and [2, 3] (one pad pixel at the end).
    windows = [slice(0, 3), slice(2, 4)]
    expected = np.stack([[conv[r, c].max((0, 1)) for c in windows] for r in windows])
    np.testing.assert_allclose(out[0], expected, atol=1e-5)


def test_patch_embedding_with_a_conv_stem_has_the_grid_of_its_patch_size():
    embed = PatchEmbedding(4, 16, tokenizer="conv")
    assert tuple(embed(random_floats(2, 32, 16, 3)).shape) == (2, 1 + 8 * 4, 16)
    assert isinstance(embed.projection, ConvTokenizer) and embed.projection.stages == 2


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`stages` must be a positive integer.*stages=0"):
        ConvTokenizer(16, stages=0)
    with pytest.raises(ValueError, match=r"`hidden_dim` must be a positive integer or None.*hidden_dim=-1"):
        ConvTokenizer(16, hidden_dim=-1)
    for patch_size in (3, 6, 1, (4, 2)):
        with pytest.raises(ValueError, match=r"tokenizer='conv'.*power of two.*patch_size="):
            PatchEmbedding(patch_size, 16, tokenizer="conv")
    with pytest.raises(ValueError, match=r"`tokenizer` must be one of \['linear', 'conv', 'shifted'\].*'cnn'"):
        PatchEmbedding(4, 16, tokenizer="cnn")


def _keras_stem(inputs, tokenizer):
    """The stem of `tokenizer` built from Keras' own layers (for the hand-written path to be compared with)."""
    x = inputs
    for convolution in tokenizer.convolutions:
        x = keras.layers.Conv2D(convolution.filters, 3, padding="same", use_bias=False, activation="relu")(x)
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    return x


@pytest.mark.every_backend
def test_the_hand_written_convolution_and_pool_equal_keras_layers():
    """The two steps JAX's traced path uses, called eagerly on every backend: a wrong kernel layout or window
    offset shows here, on TensorFlow too."""
    convolution = keras.layers.Conv2D(5, 3, padding="same", use_bias=False, activation="relu")
    x = random_floats(2, 6, 4, 3)
    convolution.build(x.shape)
    np.testing.assert_allclose(to_numpy(conv_tokenizer._neighbourhood_product(convolution, x)),
                               to_numpy(convolution(x)), atol=1e-5)
    pool = keras.layers.MaxPooling2D(3, strides=2, padding="same")
    for shape in [(2, 8, 6, 3), (1, 2, 4, 2), (3, 2, 2, 1)]:  # even sides, a side of 2 (one window and padding)
        x = random_floats(*shape)
        np.testing.assert_array_equal(to_numpy(conv_tokenizer._max_pool_3x3_stride_2(x)), to_numpy(pool(x)))


@pytest.mark.every_backend
@pytest.mark.jit
@pytest.mark.parametrize("size", [(16, 8), (12, 6)])  # 12 x 6: the last stage's input (6 x 3) has an odd width
def test_a_compiled_training_step_equals_keras_own_layers(size):
    """On JAX a training step runs the hand-written stem (the neighbourhood product, the sliced max-pool; Keras'
    pool on an odd grid): its outputs and updates must be those of the same stem in Keras' layers. TensorFlow runs
    Keras' layers in both, and checks the comparison itself."""
    inputs = keras.Input((*size, 3))
    tokenizer = ConvTokenizer(8, stages=2, hidden_dim=4)
    ours = keras.Model(inputs, keras.layers.Flatten()(tokenizer(inputs)))
    theirs = keras.Model(inputs, keras.layers.Flatten()(_keras_stem(inputs, tokenizer)))
    theirs.set_weights(ours.get_weights())
    images = random_floats(4, *size, 3)
    targets = np.random.default_rng(1).normal(size=(4, ours.output.shape[-1])).astype("float32")
    before = ours.get_weights()
    for model in (ours, theirs):
        model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
        model.train_on_batch(images, targets)
    np.testing.assert_allclose(to_numpy(ours.predict_on_batch(images)), to_numpy(theirs.predict_on_batch(images)),
                               atol=1e-5)
    for mine, keras_own in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_allclose(mine, keras_own, atol=1e-5)
    assert all(np.abs(after - start).max() > 1e-4 for after, start in zip(ours.get_weights(), before))  # it learned


@pytest.mark.every_backend
def test_jax_traces_the_hand_written_stem_on_a_cpu_in_any_precision():
    if keras.backend.backend() != "jax":
        pytest.skip("the hand-written path is JAX's")
    import jax

    images = random_floats(2, 8, 8, 3)
    tokenizer = ConvTokenizer(8, stages=2, hidden_dim=4)
    tokenizer(images)
    gradient = str(jax.make_jaxpr(jax.grad(lambda x: keras.ops.sum(tokenizer(x))))(images))
    assert "conv_general_dilated" not in gradient and "reduce_window" not in gradient and "dot_general" in gradient
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        half = ConvTokenizer(8, stages=2, hidden_dim=4)
        inputs = keras.Input((8, 8, 3))
        reference = keras.Model(inputs, _keras_stem(inputs, half))
    finally:
        keras.config.set_dtype_policy("float32")
    half(images)
    half.set_weights(tokenizer.get_weights())
    reference.set_weights(tokenizer.get_weights())
    out = jax.jit(half)(images)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    np.testing.assert_allclose(to_numpy(out).astype("float32"), to_numpy(tokenizer(images)), rtol=0.05, atol=0.05)
    np.testing.assert_allclose(to_numpy(out).astype("float32"),
                               to_numpy(jax.jit(reference)(images)).astype("float32"), rtol=0.05, atol=0.05)
