import keras
import numpy as np
import pytest

from keras_tfm.schedules import WarmupLinearDecay


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
