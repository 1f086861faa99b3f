"""The PyTorch-only `clipnorm` in one call (`keras_tfm.models._torch_fast_paths`): it computes what Keras' own
per-weight clipping computes, trains the same, and is given only where Keras' clipping would run. CI runs this
file on every backend (`.ci/run`); on TensorFlow and JAX only the first test applies."""

import sys

import keras
import numpy as np
import pytest

from keras_tfm.models import TextClassifier, _base

on_torch = pytest.mark.skipif(keras.backend.backend() != "torch", reason="the one-call clipping is PyTorch's")


def test_other_backends_do_not_import_it():
    if keras.backend.backend() == "torch":
        assert _base._torch_fast_paths is not None
    else:
        assert _base._torch_fast_paths is None and "keras_tfm.models._torch_fast_paths" not in sys.modules


def tiny_classifier():
    keras.utils.set_random_seed(3)
    return TextClassifier.from_preset("tiny", vocab_size=50, max_length=12, num_classes=3, dropout=0.0)


def gradients():
    """Gradients of every kind of size: above the norm, inside it, exactly zero, missing (None), a matrix."""
    import torch

    rng = np.random.default_rng(0)
    return [torch.tensor(rng.normal(size=(7, 5)) * 3, dtype=torch.float32),
            torch.tensor(rng.normal(size=(4,)) * 0.01, dtype=torch.float32),
            torch.zeros(3), None, torch.tensor([0.6, 0.8], dtype=torch.float32) * 1.0000001]


@on_torch
@pytest.mark.parametrize("clipnorm", [1.0, 0.25])
def test_equals_keras_own_clipnorm_and_leaves_the_gradients_as_they_were(clipnorm):
    from keras_tfm.models import _torch_fast_paths

    optimizer = keras.optimizers.AdamW(1e-3, clipnorm=clipnorm)
    grads = gradients()
    before = [None if g is None else g.clone() for g in grads]
    ours = _torch_fast_paths._clip_each_gradient_by_norm(optimizer, grads)
    theirs = keras.optimizers.Optimizer._clip_gradients(optimizer, grads)
    assert [g is None for g in ours] == [g is None for g in theirs] == [False, False, False, True, False]
    for mine, keras_one in zip(ours, theirs):
        if mine is not None:
            np.testing.assert_allclose(mine.numpy(), keras_one.numpy(), rtol=1e-6, atol=1e-9)
            assert np.linalg.norm(mine.numpy()) <= clipnorm * (1 + 1e-6)
    for g, original in zip(grads, before):  # the inputs are not clipped in place
        if g is not None:
            np.testing.assert_array_equal(g.numpy(), original.numpy())


@on_torch
def test_other_kinds_of_clipping_are_keras_own():
    from keras_tfm.models import _torch_fast_paths

    for options in ({"global_clipnorm": 1.0}, {"clipvalue": 0.5}, {}):
        optimizer = keras.optimizers.Adam(1e-3, **options)
        grads = gradients()
        ours = _torch_fast_paths._clip_each_gradient_by_norm(optimizer, grads)
        theirs = keras.optimizers.Optimizer._clip_gradients(optimizer, grads)
        for mine, keras_one in zip(ours, theirs):
            if mine is not None:
                np.testing.assert_allclose(mine.numpy(), keras_one.numpy(), rtol=1e-6, atol=1e-9)


@on_torch
def test_the_training_function_gives_it_and_training_matches_keras_clipping():
    """Two identical models, three steps (the first builds the optimizer) with gradients above the norm: one
    clips in one call, the other with Keras' per-weight code (the instance attribute removed); their weights stay
    equal to float32 rounding."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(1, 50, (8, 12)).astype("int32"), rng.integers(0, 3, 8)
    models = []
    for fused in (True, False):
        model = tiny_classifier()
        model.compile_for_training(optimizer=keras.optimizers.SGD(0.5, clipnorm=0.01))
        model.train_on_batch(x, y)
        assert "_clip_gradients" in vars(model.optimizer)
        if not fused:
            del model.optimizer._clip_gradients
            model.make_train_function = lambda force=False: keras.Model.make_train_function(model, force)
        for _ in range(2):
            model.train_on_batch(x, y)
        models.append(model)
    start = tiny_classifier().get_weights()
    moved = 0
    for fused, plain, first in zip(models[0].get_weights(), models[1].get_weights(), start):
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-7)
        moved += not np.allclose(fused, first)
    assert "_clip_gradients" not in vars(models[1].optimizer)
    assert moved > 5  # the steps did change the weights, by at most 0.5 x 0.01 per weight and step


@on_torch
def test_only_optimizers_that_use_keras_clipping_get_it_and_loss_scaling_passes_it_inside():
    class OwnClipping(keras.optimizers.Adam):
        def _clip_gradients(self, grads):
            return grads

    model = tiny_classifier()
    model.compile(optimizer=OwnClipping(clipnorm=1.0), loss="sparse_categorical_crossentropy")
    model.make_train_function()
    assert "_clip_gradients" not in vars(model.optimizer)  # its own method stays

    keras.config.set_dtype_policy("mixed_float16")
    model = tiny_classifier()
    model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0))
    model.fit(np.ones((2, 12), "int32"), np.array([0, 1]), verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert "_clip_gradients" in vars(model.optimizer.inner_optimizer)


@on_torch
def test_a_keras_file_round_trip_keeps_it(tmp_path):
    model = tiny_classifier()
    model.compile_for_training()
    model.train_on_batch(np.ones((2, 12), "int32"), np.array([0, 1]))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")  # compiled again, by Keras, on loading
    for saved, kept in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(saved), keras.ops.convert_to_numpy(kept))
    loaded.train_on_batch(np.ones((2, 12), "int32"), np.array([0, 1]))  # training goes on
    assert "_clip_gradients" in vars(loaded.optimizer) and loaded.optimizer.clipnorm == 1.0
