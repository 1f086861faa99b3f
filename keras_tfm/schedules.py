"""Learning-rate schedules that a saved model's optimizer refers to (so they live in the library, registered
with Keras, and a `.keras` file trained with one loads wherever `keras_tfm` is importable)."""

import math

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


@keras.saving.register_keras_serializable(package="keras_tfm")
class InverseSquareRootWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """The original Transformer's schedule: linear warm-up to `peak` over `warmup_steps`, then decay in proportion
    to the inverse square root of the step (Vaswani et al. 2017, §5.3; fairseq's `inverse_sqrt`).

    The paper writes it as lrate = d_model^-0.5 · min(n^-0.5, n · warmup_steps^-1.5) for the n-th update: the two
    terms meet at n = warmup_steps, where the rate peaks at (d_model · warmup_steps)^-0.5. Here the peak is given
    directly, rate(n) = peak · min(n / warmup_steps, sqrt(warmup_steps / n)); `from_model_width` gives the
    paper's peak. Keras counts updates from 0, so the rate of Keras step `step` is that of update n = step + 1, and
    the first update is not wasted at rate 0. Unlike a decay to 0 at a planned last step, the rate never reaches 0,
    so training can go on for as many epochs as wanted (and averaging the last epochs' weights averages models that
    still move).

    Args:
        peak: the learning rate at the end of the warm-up.
        warmup_steps: updates of the warm-up (at least 1).

    Example:

    >>> schedule = InverseSquareRootWarmup(1e-3, warmup_steps=4)
    >>> [round(float(schedule(step)), 6) for step in (0, 1, 3, 15, 99)]  # updates 1, 2, 4, 16, 100
    [0.00025, 0.0005, 0.001, 0.0005, 0.0002]
    """

    def __init__(self, peak, warmup_steps):
        if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not peak > 0:
            raise ValueError(f"`peak` must be a positive learning rate. Received: peak={peak!r}")
        if not isinstance(warmup_steps, int) or isinstance(warmup_steps, bool) or warmup_steps < 1:
            raise ValueError(f"`warmup_steps` must be a positive int. Received: warmup_steps={warmup_steps!r}")
        self.peak = float(peak)
        self.warmup_steps = warmup_steps

    @classmethod
    def from_model_width(cls, d_model, warmup_steps=4000, scale=1.0):
        """The paper's schedule for a model of width `d_model`: peak = scale · (d_model · warmup_steps)^-0.5
        (7.0e-4 for the base model, d_model 512, with its 4,000 warm-up steps)."""
        return cls(scale * (d_model * warmup_steps) ** -0.5, warmup_steps)

    def __call__(self, step):
        update = ops.cast(step, "float32") + 1.0
        return self.peak * ops.minimum(update / self.warmup_steps, ops.sqrt(self.warmup_steps / update))

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="keras_tfm")
class PlannedWarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak`, then cosine decay to 0, over a number of steps that can change during training:
    `plan(total_steps)` (the recipes' `--time-budget` plans the run after its first epoch).

    Args:
        peak: the learning rate at the end of the warm-up.
        total_steps: the steps planned for now (at least 1).
        warmup_fraction: the share of the planned steps that warms up.

    The number of steps is a Keras variable that the schedule reads at every step, so a new plan reaches the
    compiled training step (a Python number would be frozen into it when it is traced) on TensorFlow, with or
    without XLA, on PyTorch, and on JAX without `jit_compile`. A jitted JAX step sees only the model's and the
    optimizer's variables, so there the step must be traced again after a new plan (`keras_tfm.callbacks.TimeBudget`
    does). Warm-up is
    `warmup_fraction` of the planned steps, then cosine decay to 0 at the last planned step; past it, 0.

    Example:

    >>> schedule = PlannedWarmupCosine(1.0, total_steps=100, warmup_fraction=0.1)
    >>> schedule.plan(20)  # 2 warm-up steps, then cosine decay to 0 at step 20
    >>> [round(float(schedule(step)), 3) for step in (1, 2, 11, 20)]
    [0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, peak, total_steps, warmup_fraction=0.1):
        self.peak = float(peak)
        self.warmup_fraction = float(warmup_fraction)
        self.total_steps = keras.Variable(max(int(total_steps), 1), dtype="int32", trainable=False,
                                          name="planned_total_steps")

    def plan(self, total_steps):
        """Sets the number of steps the schedule runs for (at least 1)."""
        self.total_steps.assign(max(int(total_steps), 1))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        total = ops.cast(self.total_steps, "float32")
        warmup = ops.floor(total * self.warmup_fraction)
        rising = self.peak * step / ops.maximum(warmup, 1.0)
        progress = ops.clip((step - warmup) / ops.maximum(total - warmup, 1.0), 0.0, 1.0)
        falling = 0.5 * self.peak * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < warmup, rising, falling)

    def get_config(self):
        return {"peak": self.peak, "total_steps": int(ops.convert_to_numpy(self.total_steps)),
                "warmup_fraction": self.warmup_fraction}


# `.keras` files of the 0.1 recipes name it "recipes>PlannedWarmupCosine": they load too.
keras.saving.get_custom_objects()["recipes>PlannedWarmupCosine"] = PlannedWarmupCosine
