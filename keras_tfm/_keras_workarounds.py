"""Where keras_tfm works around Keras itself: every read or write of a Keras private name is in this module.

Keras' private names (`optimizer._variables`, `model._jax_state`...) may change in any release, for every user at
once. So they are kept here, and nowhere else in keras_tfm (`tests/test_keras_workarounds.py` scans the package).
Each entry below names what it works around and the Keras versions it was checked on. Each also has a test in that
file that checks Keras still behaves that way, and so fails once Keras changes; the entry can then go.

1. `build_optimizer_before_tracing`, TensorFlow. Keras creates the optimizer's slots inside the first traced
   training step when no distribution strategy is in use. A `tf.function` that creates variables is traced a
   second time, so the whole step is traced twice: 3.4 of the 13.6 seconds of `reverse_digits --quick`.
   Public API only.
2. `JaxStateKeeper`, JAX. An error in `evaluate` or `predict`, such as a bad batch found by a data check, leaves
   the model without its weights. Keras' JAX loops move the variables' values out of the model while they run,
   and unlike `fit`, these two put them back only when the loop ends normally. Every later call then fails with
   "'NoneType' object is not callable". This one writes `model._jax_state`.
3. `clip_gradients_in_one_call`, PyTorch. Keras' `clipnorm` clips each gradient on its own with about nine small
   operations per weight, each a kernel launched from Python: about 900 calls a step for a BERT-sized model.
   The replacement does the same arithmetic for the whole list in five calls (`torch._foreach_norm`,
   `torch._foreach_mul`). On 2 Zen 4 cores, for the 103 gradients of a MiniLM-shaped `TextClassifier`, that is
   47 ms a step instead of 113-160 ms (docs/results.md). This one replaces `optimizer._clip_gradients` on the
   instance.
4. `add_step_variables`, every backend. `GradientNormCallback` keeps its running sums in variables of the
   optimizer for the time of `fit`: on JAX only an optimizer's own variables can change inside its compiled step.
   A Keras optimizer has `add_variable` but no way to remove one, and saves every variable it has, so a
   checkpoint written during `fit` would not load into a fresh model ("Skipping variable loading for
   optimizer"), its optimizer state lost. This one edits `optimizer._variables` and sets `save_own_variables`
   and `load_own_variables` on the instance, which leave those variables out.
5. `resume_fit_at_epoch`, every backend. A callback cannot tell `fit` to start at a later epoch through public
   API: Keras' own `BackupAndRestore` sets `model._initial_epoch` in `on_train_begin`, which `fit` reads right
   after. keras_tfm's `BackupAndRestore` (atomic files, the previous epoch kept) does the same, here.
6. `watch_gradients`, every backend. Keras has no hook between a step's gradients and their update, where
   `GradientNormCallback` measures them as the optimizer receives them (unscaled, before clipping). Keras' steps
   call `optimizer.apply` through the instance: with `(grads, trainable_variables)` on TensorFlow and PyTorch,
   with `grads` alone inside JAX's `stateless_apply`. This one sets `apply` on the optimizer instance for the time
   of `fit` (the class is untouched) and deletes it afterwards.
7. `sublayers`, every backend. A Keras layer (not a model) has no public list of the layers it holds: Keras
   tracks those set as attributes, directly or in lists and dicts, under any name (`self._inner` too), in
   `_flatten_layers`. `keras_tfm.layers.walk` reads the layers of a model through this one.

What would retire each: 1, TensorFlow steps that build the optimizer before tracing (its test then sees one
trace without it); 2, Keras' JAX `evaluate`/`predict` putting the state back on an error; 3, a `clipnorm` done in
one call; 4, an `Optimizer.remove_variable` and unsaved variables (or variables a callback may own); 5, a public
initial epoch settable from `on_train_begin`; 6, a gradient hook (a callback's `on_train_batch` sees no
gradients); 7, a public `Layer.layers`. Each test in tests/test_keras_workarounds.py fails once its condition is met.

Checked with Keras 3.12.0, the lowest version requirements.txt admits (`.ci/run`'s lowest-Keras stage), and 3.15.1,
each entry. Nothing here imports TensorFlow or PyTorch unless that is the backend in use.
"""

import functools
import types

import keras


def build_optimizer_before_tracing(model):
    """TensorFlow: creates the optimizer's slots (Adam's moments...) eagerly, before `fit` traces the step.

    Under a distribution strategy, and on JAX and PyTorch, Keras builds the optimizer before tracing itself.

    Args:
        model: a compiled (or not yet compiled) `keras.Model`. Nothing happens before `compile`, before the model
            is built, or when its optimizer is built already.
    """
    import tensorflow as tf  # only on the TensorFlow backend (`_base` calls this there)

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or optimizer.built or not model.built:
        return
    # A model made under a strategy's scope keeps that strategy; otherwise `distribute_strategy` is the default
    # one, the object `tf.distribute.get_strategy()` returns outside every scope.
    if not tf.distribute.has_strategy() and model.distribute_strategy is tf.distribute.get_strategy():
        optimizer.build(model.trainable_variables)  # what Keras' own symbolic build does under a strategy


class JaxStateKeeper(keras.callbacks.Callback):
    """JAX: lets `model.jax_state_sync()` put back the last good weights after an error inside a Keras loop.

    Keras' JAX loops take the variables' values out of the model while they run and keep the newest ones in
    `model._jax_state`. `jax_state_sync()` puts those back. Before the first step there are none yet, so an error
    in the first batch would leave the model empty. This callback gives Keras the current values as "the newest
    ones" when the loop begins. After an error the caller runs `model.jax_state_sync()`, and the model keeps its
    weights.
    """

    async_safe = True

    def _keep(self):
        model = self.model
        optimizer = getattr(model, "optimizer", None)  # none before compile (predict)
        model._jax_state = {
            "trainable_variables": [v.value for v in model.trainable_variables],
            "non_trainable_variables": [v.value for v in model.non_trainable_variables],
            "optimizer_variables": [v.value for v in optimizer.variables] if optimizer else [],
            "metrics_variables": [v.value for v in model.metrics_variables],
        }
        model._jax_state_synced = True

    def on_train_begin(self, logs=None):
        self._keep()

    def on_test_begin(self, logs=None):
        if not getattr(self.model, "_jax_state", None):  # a standalone evaluate (in fit the state is fresh)
            self._keep()

    def on_predict_begin(self, logs=None):
        if not getattr(self.model, "_jax_state", None):
            self._keep()


def _clip_each_gradient_by_norm(optimizer, grads):
    """Keras' `clipnorm` (each gradient `g` becomes `g * c / max(|g|, c)`) for the whole list at once. The other
    kinds of clipping (`global_clipnorm`, `clipvalue`) and no clipping go to Keras' own code."""
    import torch  # only on the PyTorch backend

    clip = optimizer.clipnorm
    if not (clip and clip > 0):
        return keras.optimizers.Optimizer._clip_gradients(optimizer, grads)
    present = [g for g in grads if g is not None]
    if not present:
        return list(grads)
    norms = torch._foreach_norm(present)  # one 0-d float tensor per gradient
    scales = torch._foreach_maximum(norms, clip)
    torch._foreach_reciprocal_(scales)
    torch._foreach_mul_(scales, clip)  # c / max(|g|, c): 1 for a gradient already inside the ball (or all zero)
    clipped = iter(torch._foreach_mul(present, scales))  # new tensors: the caller's gradients are not changed
    return [None if g is None else next(clipped) for g in grads]


def clip_gradients_in_one_call(optimizer):
    """PyTorch: gives `optimizer` (or the optimizer inside a `LossScaleOptimizer`) the one-call `clipnorm`.

    Only an optimizer that uses Keras' own `_clip_gradients` is changed; a subclass with its own is left alone.
    Only this instance changes: what it computes, its config and its saved variables stay Keras' own. Calling it
    again changes nothing.

    Args:
        optimizer: a Keras optimizer, or None (nothing to do).
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer clips in its inner one
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        return
    if type(optimizer)._clip_gradients is not keras.optimizers.Optimizer._clip_gradients:
        return
    if "_clip_gradients" not in vars(optimizer):
        optimizer._clip_gradients = types.MethodType(_clip_each_gradient_by_norm, optimizer)


def add_step_variables(optimizer, names):
    """Adds float32 scalar variables, zero at first, that a training step may update on every backend (on JAX only
    an optimizer's own variables can change inside its compiled step), and that the optimizer neither saves nor
    loads: a model saved while they exist (a checkpoint in the middle of `fit`) has the optimizer of a fresh
    model, and loads into one with its whole state. `remove_step_variables` takes them away again.

    Args:
        optimizer: the model's optimizer; the variables go into its inner optimizer under mixed precision (the one
            `watch_gradients` watches there).
        names: a name for each variable.

    Returns:
        The variables, in the order of `names`.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    added = [inner.add_variable((), initializer="zeros", dtype="float32", name=name) for name in names]
    hidden = _hidden_step_variables.setdefault(id(inner), [])
    hidden.extend(added)
    for target in {id(o): o for o in (optimizer, inner)}.values():  # a LossScaleOptimizer saves its inner's too
        for method in ("save_own_variables", "load_own_variables"):
            setattr(target, method, functools.partial(  # an instance attribute: the class is untouched
                _without_step_variables, getattr(type(target), method), target, inner, hidden))
    return added


def remove_step_variables(optimizer, variables):
    """Undoes `add_step_variables`: removes `variables` from the optimizer (the others keep their order), and
    once none is left, it saves and loads as its class does."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    removed = {id(v) for v in variables}
    _delete(inner._variables, removed)
    hidden = _hidden_step_variables.get(id(inner), [])
    hidden[:] = [v for v in hidden if id(v) not in removed]
    if not hidden:
        _hidden_step_variables.pop(id(inner), None)
        for target in (optimizer, inner):
            for method in ("save_own_variables", "load_own_variables"):
                vars(target).pop(method, None)


_hidden_step_variables = {}  # id(optimizer) -> the step variables it holds, left out of saving and loading


def _delete(variables, ids):
    """Deletes from the list `variables` (edited in place: the optimizer's variable tracker holds this very list)
    those whose id is in `ids`, by position (`==` on variables compares their values); returns (position,
    variable) for each, first to last."""
    gone = [(i, v) for i, v in enumerate(variables) if id(v) in ids]
    for index, _ in reversed(gone):
        del variables[index]
    return gone


def _without_step_variables(method, optimizer, inner, hidden, store):
    """Runs the class's `save_own_variables`/`load_own_variables` of `optimizer` while the step variables are out
    of `inner`'s list."""
    variables = inner._variables
    gone = _delete(variables, {id(v) for v in hidden})
    try:
        method(optimizer, store)
    finally:
        for index, variable in gone:
            variables.insert(index, variable)


def resume_fit_at_epoch(model, epoch):
    """From a callback's `on_train_begin`: the `fit` now starting begins at `epoch` (0-based: the number of
    epochs already trained), as Keras' `BackupAndRestore` makes it."""
    model._initial_epoch = epoch


def watch_gradients(optimizer, measure):
    """Calls `measure(grads, trainable_variables)` inside every training step, with the gradients `optimizer` is
    about to apply, until `unwatch_gradients(optimizer)`. `trainable_variables` is None where Keras' JAX step
    passes the gradients alone (they are the model's trainable weights, in their order, as when `fit` began).
    `measure` must use `keras.ops` only (it runs inside the compiled step) and return nothing.

    Args:
        optimizer: a Keras optimizer (the inner one of a `LossScaleOptimizer`: it sees the unscaled gradients).
        measure: the function to call.
    """
    apply = optimizer.apply

    def apply_and_measure(grads, trainable_variables=None):
        measure(grads, trainable_variables)
        return apply(grads, trainable_variables)

    optimizer.apply = apply_and_measure  # an instance attribute: the class is untouched


def unwatch_gradients(optimizer):
    """Undoes `watch_gradients`: `optimizer.apply` is its class's method again."""
    if "apply" in vars(optimizer):
        del optimizer.apply


def sublayers(layer):
    """The layers `layer` holds directly (attributes, and lists, tuples and dicts in them), in the order they were
    set, without `layer` itself and without their own sublayers."""
    return list(layer._flatten_layers(include_self=False, recursive=False))
