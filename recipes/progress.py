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
        self._steps = 0
        self._start = None

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds_per_step is not None:
            return
        self._steps += 1
        if self._steps == 1:
            self._start = self.clock()
        elif self._steps == 1 + min(self.measure, max(self.total_steps - 1, 1)):
            self.seconds_per_step = (self.clock() - self._start) / (self._steps - 1)
            minutes = self.seconds_per_step * self.total_steps / 60
            print(f"\nexpected training time: {minutes:.0f} min ({self.total_steps} steps at "
                  f"{self.seconds_per_step:.2f} s/step, measured on steps 2-{self._steps})", flush=True)
