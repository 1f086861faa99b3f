"""Learning-rate schedules that a saved model's optimizer refers to (so they live in the library, registered
with Keras, and a `.keras` file trained with one loads wherever `keras_tfm` is importable)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_tfm")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's fine-tuning schedule: linear warm-up from 0 to `peak` over `warmup_steps`, then linear decay to 0
    at `total_steps` (Devlin et al. 2019; `transformers`' `get_linear_schedule_with_warmup`).

    Args:
        peak: the learning rate at the end of the warm-up.
        total_steps: the step at which the rate reaches 0 (and stays).
        warmup_steps: steps of the warm-up (0 = start at `peak`).

    Example:

    >>> schedule = WarmupLinearDecay(1e-4, total_steps=1000, warmup_steps=100)
    >>> [round(float(schedule(step)), 6) for step in (0, 50, 100, 550, 1000)]
    [0.0, 5e-05, 0.0001, 5e-05, 0.0]
    """

    def __init__(self, peak, total_steps, warmup_steps=0):
        if not isinstance(total_steps, int) or isinstance(total_steps, bool) or total_steps < 1:
            raise ValueError(f"`total_steps` must be a positive int. Received: total_steps={total_steps!r}")
        if not isinstance(warmup_steps, int) or isinstance(warmup_steps, bool) or not 0 <= warmup_steps < total_steps:
            raise ValueError(f"`warmup_steps` must be an int in [0, total_steps) = [0, {total_steps}). "
                             f"Received: warmup_steps={warmup_steps!r}")
        if not peak > 0:
            raise ValueError(f"`peak` must be a positive learning rate. Received: peak={peak!r}")
        self.peak = float(peak)
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = step / max(self.warmup_steps, 1)  # 0 -> 1 over the warm-up
        decay = (self.total_steps - step) / (self.total_steps - self.warmup_steps)  # 1 -> 0 after it
        factor = ops.where(step < self.warmup_steps, warmup, ops.maximum(decay, 0.0))
        return self.peak * factor

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps}
