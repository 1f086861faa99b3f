import warnings

import keras
import numpy as np
import pytest

from keras_tfm.schedules import InverseSquareRootWarmup, PlannedWarmupCosine, WarmupLinearDecay

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the recipes' quick runs train and save it on JAX and "
    "PyTorch"))


def test_warmup_then_linear_decay_to_zero():
    schedule = WarmupLinearDecay(1e-4, total_steps=100, warmup_steps=10)
    rates = [float(keras.ops.convert_to_numpy(schedule(step))) for step in (0, 5, 10, 55, 100, 150)]
    np.testing.assert_allclose(rates, [0.0, 5e-5, 1e-4, 5e-5, 0.0, 0.0], atol=1e-12)
    no_warmup = WarmupLinearDecay(1e-3, total_steps=4)
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(no_warmup(0))), 1e-3)


def test_config_round_trip_and_bad_arguments():
    schedule = WarmupLinearDecay(2e-5, total_steps=50, warmup_steps=5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, WarmupLinearDecay) and restored.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match=r"`warmup_steps` must be an int in \[0, total_steps\) = \[0, 5\)"):
        WarmupLinearDecay(1e-4, total_steps=5, warmup_steps=5)
    with pytest.raises(ValueError, match="`total_steps` must be a positive int. Received: total_steps=0"):
        WarmupLinearDecay(1e-4, total_steps=0)
    with pytest.raises(ValueError, match="`peak` must be a positive"):
        WarmupLinearDecay(0.0, total_steps=5)


def rates(schedule, steps):
    return [float(keras.ops.convert_to_numpy(schedule(step))) for step in steps]


def test_inverse_square_root_is_the_papers_formula():
    d_model, warmup = 512, 4000
    schedule = InverseSquareRootWarmup.from_model_width(d_model, warmup)
    updates = np.array([1, 100, 2000, 3999, 4000, 4001, 16000, 100000])
    paper = d_model**-0.5 * np.minimum(updates**-0.5, updates * warmup**-1.5)  # Vaswani et al. 2017, eq. (3)
    np.testing.assert_allclose(rates(schedule, updates - 1), paper, rtol=1e-5)  # Keras' step n - 1 is update n
    every_step = keras.ops.convert_to_numpy(schedule(np.arange(20000)))
    assert every_step.argmax() == warmup - 1 and every_step.max() == pytest.approx(schedule.peak, rel=1e-5)
    assert schedule.peak == pytest.approx(7.0e-4, rel=0.01)


def test_inverse_square_root_halves_at_four_times_the_warmup_and_never_reaches_zero():
    schedule = InverseSquareRootWarmup(2e-3, warmup_steps=10)
    np.testing.assert_allclose(rates(schedule, [0, 4, 9, 39, 159]), [2e-4, 1e-3, 2e-3, 1e-3, 5e-4], rtol=1e-6)
    assert rates(schedule, [10**7])[0] > 0


def test_inverse_square_root_config_round_trip_and_bad_arguments():
    schedule = InverseSquareRootWarmup(5e-4, warmup_steps=300)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, InverseSquareRootWarmup) and restored.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="`warmup_steps` must be a positive int. Received: warmup_steps=0"):
        InverseSquareRootWarmup(1e-3, warmup_steps=0)
    with pytest.raises(ValueError, match="`peak` must be a positive learning rate. Received: peak='1e-3'"):
        InverseSquareRootWarmup("1e-3", warmup_steps=10)


@pytest.mark.jit
def test_inverse_square_root_drives_a_compiled_optimizer():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(InverseSquareRootWarmup(0.1, warmup_steps=2))
    model.compile(optimizer=optimizer, loss="mse", jit_compile=True)
    model.fit(np.ones((8, 3), "float32"), np.zeros((8, 1), "float32"), batch_size=2, epochs=1, verbose=0)
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 4
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(optimizer.learning_rate)), 0.1 * (2 / 5) ** 0.5, rtol=1e-6)


def test_planned_warmup_cosine_is_keras_warmup_cosine_until_replanned():
    """Until `plan` it is Keras' CosineDecay with a 10% linear warm-up; `plan(n)` stretches the same shape over n
    steps (what `TimeBudget` does once it knows how many steps fit), and the config keeps the plan."""
    schedule = PlannedWarmupCosine(1.0, total_steps=100, warmup_fraction=0.1)
    reference = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=90, warmup_target=1.0, warmup_steps=10)
    for step in (0, 5, 10, 30, 55, 99, 100, 150):
        np.testing.assert_allclose(float(schedule(step)), float(reference(step)), atol=1e-6)
    schedule.plan(20)
    values = [float(schedule(step)) for step in (0, 1, 2, 11, 20, 40)]
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0, 0.5, 0.0, 0.0], atol=1e-6)
    restored = PlannedWarmupCosine.from_config(schedule.get_config())
    assert restored.get_config() == {"peak": 1.0, "total_steps": 20, "warmup_fraction": 0.1}


@pytest.mark.every_backend  # JAX has no int64 unless told so: the planned length is an int32, and warns nothing
def test_planned_warmup_cosine_warns_nothing_on_any_backend():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # JAX's "int64 ... will be truncated to int32" was one
        schedule = PlannedWarmupCosine(1.0, total_steps=100)
        schedule.plan(2**31 - 1)  # the largest plan an int32 holds: about 2 billion steps
        value = schedule(10)
    assert 0.0 < float(keras.ops.convert_to_numpy(value)) < 1e-6
