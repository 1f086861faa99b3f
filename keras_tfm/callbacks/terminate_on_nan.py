"""`TerminateOnNaN`: stops training when the loss turns NaN or infinite, without waiting for every step."""

import keras
import numpy as np


class TerminateOnNaN(keras.callbacks.Callback):
    """Stops training when the loss turns NaN or infinite, without waiting for every step to finish.

    `keras.callbacks.TerminateOnNaN` reads the loss after every batch. Reading a value means waiting for the step
    that computes it (on a GPU a device-to-host copy and a sync), and because that callback overrides
    `on_train_batch_end`, Keras also turns off its asynchronous dispatch of callbacks (JAX, PyTorch), so the
    host can no longer prepare batch `n + 1` while the device computes batch `n`. By default this one reads the
    loss at the end of every epoch only, and declares itself `async_safe`, so the training loop never waits for
    it. With `every=N` it also reads the batch logs every N steps; Keras then calls it synchronously after every
    step (and converts the logs to Python numbers each time: reading them later, from another thread, could meet
    a JAX buffer already donated to the next step), so that is for debugging a divergence, not the default.

    Args:
        every: None (the default) to check at epoch ends only, or a positive number of steps.

    Example:

    >>> stop = TerminateOnNaN()
    >>> stop.every is None and stop.async_safe
    True
    """

    def __init__(self, every=None):
        super().__init__()
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"`every` must be None or a positive integer (steps). Received: every={every!r}")
        self.every = every
        self.async_safe = every is None  # its batch hook then returns at once, reading nothing
        self.stopped_at = None  # (epoch, step) where a NaN was seen, or None

    def on_train_begin(self, logs=None):
        self.stopped_at = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._last_batch = epoch, -1

    def on_train_batch_end(self, batch, logs=None):
        if self.every is None:
            return
        # With steps_per_execution = k, Keras calls this every k steps with the last step's index: check when
        # the steps since the last call cross a multiple of `every`.
        previous, self._last_batch = self._last_batch, batch
        if batch // self.every != previous // self.every:
            self._check(logs, step=batch)

    def on_epoch_end(self, epoch, logs=None):
        self._check(logs, step=None)

    def _check(self, logs, step):
        loss = (logs or {}).get("loss")
        if self.stopped_at is not None or loss is None or np.isfinite(float(loss)):
            return
        where = f"epoch {self._epoch + 1}" + ("" if step is None else f", step {step + 1}")
        print(f"TerminateOnNaN: the loss is {float(loss)} at {where}; training stopped.")
        self.stopped_at = (self._epoch, step)
        self.model.stop_training = True
