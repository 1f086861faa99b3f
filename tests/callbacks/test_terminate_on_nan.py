"""`keras_tfm.callbacks.TerminateOnNaN`: stops within its interval, and leaves Keras' asynchronous dispatch on."""

import keras
import numpy as np
import pytest

from keras_tfm.callbacks import TerminateOnNaN
from tests.helpers import never_waits


def test_terminate_on_nan_stops_within_its_interval_and_keeps_keras_dispatch_asynchronous():
    x = np.ones((64, 2), "float32")
    x[20:] = np.nan  # batch 5 of 16 (batch size 4) is the first with a NaN loss
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    stop = TerminateOnNaN(every=4)
    model.fit(x, x[:, :1], batch_size=4, epochs=3, shuffle=False, callbacks=[stop], verbose=0)
    epoch, step = stop.stopped_at
    assert epoch == 0 and 5 <= step < 5 + 4  # seen at the first check after the NaN, not at the end of the epoch
    # Keras' own reads every batch, which turns asynchronous callback dispatch off; this one leaves it on.
    assert never_waits(TerminateOnNaN()) and not never_waits(keras.callbacks.TerminateOnNaN())
    assert TerminateOnNaN().every is None and TerminateOnNaN(every=4).async_safe is False  # read every step: sync
    stop = TerminateOnNaN()
    model.fit(x, x[:, :1], batch_size=4, epochs=3, shuffle=False, callbacks=[stop], verbose=0)
    assert stop.stopped_at == (0, None)  # the default: caught at the end of the first epoch
    with pytest.raises(ValueError, match=r"`every` must be None or a positive integer.*every=0"):
        TerminateOnNaN(every=0)
