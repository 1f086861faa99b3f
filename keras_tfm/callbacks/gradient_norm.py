"""`GradientNormCallback`: the global gradient norm in the training logs, per epoch (mean and largest step)."""

import functools

import keras

from keras_tfm import _keras_workarounds


def _in_group(path, prefix):
    """Whether a weight's path holds `prefix` at its start or right after a "/" (`model/block_3/...`)."""
    return path.startswith(prefix) or f"/{prefix}" in path


class GradientNormCallback(keras.callbacks.Callback):
    """Puts the global gradient norm into the training logs: `gradient_norm` (the mean over the epoch's steps) and
    `gradient_norm_max` (its largest step), so `History`, `CSVLogger` (a recipe's `history.csv`) and TensorBoard
    record it. The first thing to print when training does not converge: a norm that climbs by orders of
    magnitude is an exploding gradient (try a smaller learning rate, warm-up, `clipnorm`, or pre-norm blocks).

    The norm is sqrt(Σ g²) over every trainable weight's gradient, taken before the optimizer clips it (so the
    reading shows what clipping is up against). It is measured as the optimizer receives it, with `keras.ops`
    (`keras_tfm._keras_workarounds.watch_gradients`), so it works on every backend: while training, the optimizer
    gets three extra variables (a running sum, the largest norm and a step count), which it leaves out of what it
    saves, and which are removed again when `fit` ends: a model saved during `fit` (a checkpoint) or after it
    loads into a fresh one with its optimizer's whole state.

    With `groups`, it also logs the norm of each group's gradients, `gradient_norm_{name}` (the mean over the
    epoch's steps): a group is the trainable weights whose path (`variable.path`, e.g.
    `model/block_3/attention/...`) holds its prefix at the start or right after a `/`. One group per block shows
    where in a deep stack the gradient fades.

    List it *before* a `CSVLogger` (callbacks run in order; `History` always comes last), e.g.
    `model.fit(..., callbacks=[GradientNormCallback(), keras.callbacks.CSVLogger("history.csv")])`.
    Not for distribution strategies (the sum would be per replica).

    Args:
        groups: None, or `{name: path prefix}`, e.g. `{f"block_{i}": f"block_{i}/" for i in range(depth)}`.

    Example:

    >>> norms = GradientNormCallback(groups={"embedding": "token_embedding/", "block_0": "block_0/"})
    >>> model.fit(x, y, callbacks=[norms]).history["gradient_norm_block_0"]  # doctest: +SKIP
    """

    def __init__(self, groups=None):
        super().__init__()
        if groups is not None and (not isinstance(groups, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in groups.items())):
            raise TypeError("`groups` must be None or a dict {name: path prefix}, both non-empty strings. "
                            f"Received: groups={groups!r}")
        self.groups = dict(groups or {})

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        # Under mixed precision the inner optimizer receives the unscaled gradients.
        self._optimizer = getattr(optimizer, "inner_optimizer", optimizer)
        trainable = list(self.model.trainable_variables)
        paths = [variable.path for variable in trainable]
        unmatched = [name for name, prefix in self.groups.items() if not any(_in_group(p, prefix) for p in paths)]
        if unmatched:
            raise ValueError(f"`groups` {unmatched} match no trainable weight of the model; its weights' paths "
                             f"begin with {sorted({p.split('/')[0] + '/' for p in paths})}")
        self._norm_sum, self._norm_max, self._steps, *group_sums = _keras_workarounds.add_step_variables(
            optimizer, [f"gradient_norm_{name}" for name in ("sum", "max", "steps")]
            + [f"gradient_norm_group_{i}" for i in range(len(self.groups))])
        self._group_sums = dict(zip(self.groups, group_sums))
        _keras_workarounds.watch_gradients(self._optimizer, functools.partial(self._measure, trainable))

    def _measure(self, trainable, grads, trainable_variables):
        """Inside the step: adds this step's norms to the sums. Keras' JAX step passes no variables: they are
        the model's trainable weights as they were when `fit` began (listed then: inside the step the model's
        lists are not to be read)."""
        variables = trainable if trainable_variables is None else trainable_variables
        squares = [(v.path, keras.ops.sum(keras.ops.square(keras.ops.cast(g, "float32"))))
                   for g, v in zip(grads, variables) if g is not None]
        norm = keras.ops.sqrt(keras.ops.sum(keras.ops.stack([s for _, s in squares]))) if squares \
            else keras.ops.zeros(())
        self._norm_sum.assign_add(norm)
        self._norm_max.assign(keras.ops.maximum(self._norm_max, norm))
        self._steps.assign_add(1.0)
        for name, prefix in self.groups.items():
            group = [s for path, s in squares if _in_group(path, prefix)]
            if group:
                self._group_sums[name].assign_add(keras.ops.sqrt(keras.ops.sum(keras.ops.stack(group))))

    def on_epoch_begin(self, epoch, logs=None):
        for variable in (self._norm_sum, self._norm_max, self._steps, *self._group_sums.values()):
            variable.assign(keras.ops.zeros(()))

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        steps = float(keras.ops.convert_to_numpy(self._steps))
        total = float(keras.ops.convert_to_numpy(self._norm_sum))
        logs["gradient_norm"] = total / steps if steps else float("nan")
        logs["gradient_norm_max"] = float(keras.ops.convert_to_numpy(self._norm_max)) if steps else float("nan")
        for name, total in self._group_sums.items():
            logs[f"gradient_norm_{name}"] = float(keras.ops.convert_to_numpy(total)) / steps if steps else float("nan")

    def on_train_end(self, logs=None):
        _keras_workarounds.unwatch_gradients(self._optimizer)
        _keras_workarounds.remove_step_variables(
            self.model.optimizer, (self._norm_sum, self._norm_max, self._steps, *self._group_sums.values()))
