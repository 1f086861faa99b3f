"""What a long run tells its user before it is done: the expected training time, from the measured steps."""

import time

import keras


class ExpectedTime(keras.callbacks.Callback):
    """Prints, once the first `measure` steps after the first one have run, how long training will take at their
    speed: "expected training time: 41 min (703 steps at 3.5 s/step)". The first step is left out of the mean
    (it builds and, with `jit_compile`, compiles the step). `seconds_per_step` keeps the measured mean.

    Args:
        total_steps: the steps `fit` will run in all.
        measure: how many steps to time.
        clock: the time source (a test passes a fake one).
    """

    def __init__(self, total_steps, measure=10, clock=time.monotonic):
        super().__init__()
        self.total_steps, self.measure, self.clock = total_steps, measure, clock
        self.seconds_per_step = None
        self._first = None  # (step index, time) of the first step timed

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index of the last step run: with steps_per_execution > 1 Keras calls this once per
        # execution, so steps are counted by index, not by calls. A new epoch (the index starts again) restarts.
        if self.seconds_per_step is not None:
            return
        if self._first is None or batch <= self._first[0]:
            self._first = (batch, self.clock())  # the first step of the run is left out: it builds the step
            return
        steps = batch - self._first[0]
        if steps >= min(self.measure, max(self.total_steps - 1, 1)):
            self.seconds_per_step = (self.clock() - self._first[1]) / steps
            minutes = self.seconds_per_step * self.total_steps / 60
            print(f"\nexpected training time: {minutes:.0f} min ({self.total_steps} steps at "
                  f"{self.seconds_per_step:.2f} s/step, measured over {steps} steps)", flush=True)
