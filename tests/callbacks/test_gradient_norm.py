"""GradientNormCallback: the global gradient norm per epoch in the training logs, on every backend."""

import csv
import warnings

import keras
import numpy as np
import pytest

from keras_tfm.callbacks import GradientNormCallback


def linear_model(learning_rate):
    # y = w·x with w = (1, 1): for x = (1, 2) and target 0, the squared error (w·x)² has gradient
    # 2·(w·x)·x = (6, 12).
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    model.compile(keras.optimizers.SGD(learning_rate), "mean_squared_error")
    return model


X, Y = np.array([[1.0, 2.0]] * 3, "float32"), np.zeros((3, 1), "float32")


def test_the_logged_norm_is_the_gradient_norm_worked_by_hand(tmp_path):
    model = linear_model(0.0)  # the weights never change, so every step has the same gradient
    variables_before = len(model.optimizer.variables) if model.optimizer.built else None
    log = tmp_path / "history.csv"
    history = model.fit(X, Y, batch_size=1, epochs=2, verbose=0,
                        callbacks=[GradientNormCallback(), keras.callbacks.CSVLogger(str(log))])
    expected = np.sqrt(6.0 ** 2 + 12.0 ** 2)  # 13.416...
    assert history.history["gradient_norm"] == pytest.approx([expected] * 2, rel=1e-6)
    assert history.history["gradient_norm_max"] == pytest.approx([expected] * 2, rel=1e-6)
    with open(log, newline="") as file:
        rows = list(csv.DictReader(file))
    assert [float(row["gradient_norm"]) for row in rows] == pytest.approx([expected] * 2, rel=1e-6)
    # After fit the optimizer is as it was: its own apply and no extra variables.
    assert model.optimizer.apply.__func__ is type(model.optimizer).apply
    assert variables_before is None or len(model.optimizer.variables) == variables_before
    assert not [v for v in model.optimizer.variables if "gradient_norm" in v.path]


def test_mean_and_max_over_steps_that_change_and_training_is_unchanged():
    plain, measured = linear_model(0.05), linear_model(0.05)
    plain.fit(X, Y, batch_size=1, epochs=2, verbose=0)
    history = measured.fit(X, Y, batch_size=1, epochs=2, verbose=0, callbacks=[GradientNormCallback()])
    np.testing.assert_allclose(measured.get_weights()[0], plain.get_weights()[0], rtol=1e-6)
    # Replay the six SGD steps by hand: w ← w - lr·2(w·x)x.
    w, x, norms = np.ones(2), np.array([1.0, 2.0]), []
    for _ in range(6):
        gradient = 2 * (w @ x) * x
        norms.append(np.linalg.norm(gradient))
        w = w - 0.05 * gradient
    assert history.history["gradient_norm"] == pytest.approx([np.mean(norms[:3]), np.mean(norms[3:])], rel=1e-4)
    assert history.history["gradient_norm_max"] == pytest.approx([max(norms[:3]), max(norms[3:])], rel=1e-4)
    # A second fit with the callback measures again from scratch.
    again = measured.fit(X, Y, batch_size=3, epochs=1, verbose=0, callbacks=[GradientNormCallback()])
    assert np.isfinite(again.history["gradient_norm"][0])


def test_the_norm_is_read_before_clipping_and_clipping_bounds_the_step():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    model.compile(keras.optimizers.SGD(1.0, clipnorm=1.0), "mean_squared_error")
    before = model.get_weights()[0].copy()
    history = model.fit(X[:1], Y[:1], batch_size=1, epochs=1, verbose=0, callbacks=[GradientNormCallback()])
    assert history.history["gradient_norm"][0] == pytest.approx(np.sqrt(6.0 ** 2 + 12.0 ** 2), rel=1e-6)
    step = model.get_weights()[0] - before  # lr 1 x the clipped gradient: norm 1, same direction as (6, 12)
    assert np.linalg.norm(step) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(step[:, 0], -np.array([6.0, 12.0]) / np.sqrt(180.0), rtol=1e-5)


def test_groups_log_the_norm_of_their_own_weights_gradients():
    # Two layers in a row, y = b·(a·x) with a = (1, 1), b = 1: for x = (1, 2) and target 0 the loss is (a·x)²,
    # whose gradient is 2·3·x = (6, 12) for a and 2·3·3 = 18 for b.
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="first"),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="second")])
    model.compile(keras.optimizers.SGD(0.0), "mean_squared_error")
    norms = GradientNormCallback(groups={"a": "first/", "b": "second/"})
    history = model.fit(X, Y, batch_size=1, epochs=1, verbose=0, callbacks=[norms]).history
    assert history["gradient_norm_a"] == pytest.approx([np.sqrt(6.0 ** 2 + 12.0 ** 2)], rel=1e-6)
    assert history["gradient_norm_b"] == pytest.approx([18.0], rel=1e-6)
    assert history["gradient_norm"] == pytest.approx([np.sqrt(36 + 144 + 324)], rel=1e-6)
    assert not [v for v in model.optimizer.variables if "gradient_norm" in v.path]
    with pytest.raises(ValueError, match=r"`groups` \['c'\] match no trainable weight.*'sequential/'"):
        model.fit(X, Y, epochs=1, verbose=0, callbacks=[GradientNormCallback(groups={"c": "third/"})])
    with pytest.raises(TypeError, match="`groups` must be None or a dict"):
        GradientNormCallback(groups=["first/"])


@pytest.mark.parametrize("dtype_policy", ["float32", "mixed_float16"])
def test_a_model_saved_during_fit_loads_into_a_fresh_one_with_its_whole_optimizer_state(tmp_path, dtype_policy):
    """The running sums live in the optimizer during fit, but a checkpoint written then is the optimizer of a fresh
    model: it loads without "Skipping variable loading for optimizer" and keeps Adam's moments (and, under mixed
    precision, the loss scale)."""
    def build():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, dtype=dtype_policy),
                                  keras.layers.Dense(1, dtype="float32")])
        optimizer = keras.optimizers.Adam(0.01)
        if dtype_policy == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer, "mean_squared_error")
        return model

    class SaveAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                self.model.save(tmp_path / "checkpoint.keras")
                saved.extend(keras.ops.convert_to_numpy(v) for v in self.model.optimizer.variables
                             if "gradient_norm" not in v.path)

    saved = []
    model = build()
    model.fit(X, Y, batch_size=1, epochs=2, verbose=0,
              callbacks=[GradientNormCallback(groups={"first": "dense"}), SaveAfterFirstEpoch()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = keras.saving.load_model(tmp_path / "checkpoint.keras")
    assert [str(w.message) for w in caught if "optimizer" in str(w.message)] == []
    assert len(loaded.optimizer.variables) == len(build_and_train_once(build).optimizer.variables) == len(saved)
    # One epoch of 3 steps (under mixed precision a step whose gradients overflow the first loss scale is skipped)
    assert float(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) >= 2
    for kept, expected in zip(loaded.optimizer.variables, saved):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(kept), expected)
    # And after fit the optimizer saves and loads as its class does again.
    for optimizer in (model.optimizer, getattr(model.optimizer, "inner_optimizer", model.optimizer)):
        assert optimizer.save_own_variables.__func__ is type(optimizer).save_own_variables
        assert optimizer.load_own_variables.__func__ is type(optimizer).load_own_variables


def build_and_train_once(build):
    model = build()
    model.fit(X, Y, batch_size=3, epochs=1, verbose=0)
    return model
