"""`TimeBudget`: train as many epochs as fit in a time budget, with a learning-rate schedule planned for exactly
those epochs, so that a one-hour run is a proper short schedule, not the first hour of a long one (the recipes'
`--time-budget`)."""

import json
import numbers
import os
import time

import keras

from keras_tfm import files


class TimeBudget(keras.callbacks.Callback):
    """Trains for the whole epochs that fit in `minutes`, and plans `schedule` for them.

    After the first epoch (of this `fit`), the epochs that still fit in the budget are estimated from its
    duration; training is planned to end after them (at most `fit`'s `epochs`), and `schedule.plan` gets that
    many steps, so the learning rate reaches 0 at the planned end. The budget counts `fit` from its start:
    training and validation, not data loading or model building. The first training step, which traces and
    compiles the step function, is left out of the estimate (its time is replaced by that of an average step);
    validation's own tracing is not, so the estimate is on the safe side.

    After every later epoch the estimate is made again from the mean duration of the epochs so far, each timed
    from the end of the one before (so what other callbacks do between epochs, a checkpoint, counts). When the
    planned end no longer fits (the machine got slower, or another process shares it), the plan is shortened to
    the epochs that do and the schedule re-planned, so the decay still ends inside the budget; the learning rate
    then steps down to where the shorter cosine is. When more epochs fit (the machine was shared at first), the
    plan is lengthened while less than half of it is done, where the cosine is still near its peak and the
    learning rate rises only a little; later, faster epochs end the run early with the decay complete rather than
    raising the learning rate again. If an epoch still passes the budget,
    training stops at its end. The first epoch itself runs on the schedule made before (`--epochs` long), which
    only makes its warm-up slower. `plans` lists `(epochs done, epochs planned)` for the first plan and every
    change.

    With `state_path`, an interrupted run goes on with the rest of its budget, not a new one: after every epoch the
    seconds used, the plan and the epochs' durations are written to that JSON file, and a `fit` that begins at a
    later epoch (resumed by a `BackupAndRestore`) reads them back for that epoch before its first step. So the
    schedule goes on along the plan it had, and the budget counts the time trained before the interruption (not
    the time between the two runs). A jitted JAX step is traced and compiled again for
    each plan (it reads the planned length as a constant); the other backends read it from a variable.

    Args:
        minutes: the budget, a positive number of minutes.
        schedule: a `keras_tfm.schedules.PlannedWarmupCosine` (or anything with `plan(total_steps)`), or None to
            only stop.
        clock: a function returning seconds (tests pass a fake one).
        verbose: whether to print the plan.
        state_path: None, or a JSON file (its folder is created when needed) that lets a resumed `fit` go on with
            the budget and plan of the run it resumes. Keep it with the backup it belongs to.

    Example:

    >>> schedule = keras_tfm.schedules.PlannedWarmupCosine(1e-3, total_steps=100 * steps_per_epoch)  # doctest: +SKIP
    >>> model.compile(optimizer=keras.optimizers.AdamW(schedule), loss="mse")  # doctest: +SKIP
    >>> model.fit(x, y, epochs=100, callbacks=[TimeBudget(60, schedule)])  # doctest: +SKIP
    """

    def __init__(self, minutes, schedule=None, clock=time.monotonic, verbose=True, state_path=None):
        super().__init__()
        if isinstance(minutes, bool) or not isinstance(minutes, numbers.Real) or not minutes > 0:
            raise ValueError(f"`minutes` must be a positive number. Received: minutes={minutes!r}")
        if schedule is not None and not callable(getattr(schedule, "plan", None)):
            raise TypeError("`schedule` must have a `plan(total_steps)` method (a PlannedWarmupCosine) or be None. "
                            f"Received: schedule={schedule!r}")
        if state_path is not None and (not isinstance(state_path, (str, os.PathLike)) or not os.fspath(state_path)):
            raise TypeError(f"`state_path` must be None or a file's path. Received: state_path={state_path!r}")
        self.minutes = minutes
        self.schedule = schedule
        self.clock = clock
        self.verbose = verbose
        self.state_path = None if state_path is None else os.fspath(state_path)
        self.planned_epochs = None

    async_safe = True  # it reads the clock only: Keras may run it on a helper thread, the step never waits

    def on_train_begin(self, logs=None):
        self.started = self.clock()
        self.planned_epochs = None
        self.plans = []
        self.durations = []  # seconds of each epoch of this fit, end to end (the first without its tracing step)
        self.fit_epochs = self.params.get("epochs") if self.params else None  # before a plan replaces it
        self.resumed_at = None  # the epochs done before this fit, once its first epoch begins
        self._states = {}  # what `state_path` holds: {epochs done: state}, of this run only

    def on_epoch_begin(self, epoch, logs=None):
        if self.resumed_at is None:  # the first epoch of this fit: later than 0 when a backup was restored
            self.resumed_at = epoch
            if epoch > 0 and self.state_path is not None:
                self._resume(epoch)
        self.epoch_started = self.clock()
        self.first = self.last = None  # (step index, time) of the first and the last finished step seen

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution = k this comes every k steps, with the last step's index; on a helper thread
        # the calls may arrive out of order, hence min and max.
        if self.planned_epochs is None:
            seen = (batch, self.clock())
            self.first = seen if self.first is None or batch < self.first[0] else self.first
            self.last = seen if self.last is None or batch > self.last[0] else self.last

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        elapsed, budget = now - self.started, 60.0 * self.minutes
        first = self.planned_epochs is None  # the first epoch of this fit: plan from it
        # From the end of the epoch before: what the other callbacks do between epochs (checkpoints, pictures)
        # takes the budget's time too.
        seconds = now - (self.epoch_started if first else self.previous_end)
        self.previous_end = now
        if first:
            # Keras' step count where it knows one: with steps_per_execution = k the last call's index is that of
            # the k-th step of the last execution even when the epoch ends before it.
            known = self.params.get("steps") if self.params else None
            self.steps = known or (self.last[0] + 1 if self.last else 1)
            if self.last and self.last[0] > self.first[0]:
                # The first execution, with tracing and compilation, counted as an average one.
                average_step = (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])
                seconds -= (self.first[1] - self.epoch_started) - average_step * (self.first[0] + 1)
        self.durations.append(max(seconds, 1e-9))
        pace = sum(self.durations) / len(self.durations)
        fitting = epoch + 1 + max(int((budget - elapsed) // pace), 0)  # this many epochs end inside the budget
        fitting = min(fitting, self.fit_epochs) if self.fit_epochs else fitting
        # Longer only while less than half of the plan is done (see the class docstring).
        longer = not first and fitting > self.planned_epochs and epoch + 1 <= self.planned_epochs // 2
        if first or fitting < self.planned_epochs or longer:
            change = "lengthened" if longer else "shortened"
            self.plans.append((epoch + 1, fitting))
            self._plan(fitting)
            if self.verbose and first:
                print(f"time budget {self.minutes:g} min: {elapsed:.0f} s used by the first epoch, about "
                      f"{pace:.0f} s per epoch from now on, so training is planned for {fitting} "
                      f"epochs of {self.steps} steps")
            elif self.verbose:
                print(f"time budget {self.minutes:g} min: epochs take {pace:.0f} s on average, so the plan is "
                      f"{change} to {fitting} epochs ({elapsed:.0f} s used)")
        if self.state_path is not None:
            self._record(epoch + 1, elapsed)
        if elapsed >= budget or epoch + 1 >= self.planned_epochs:
            self.model.stop_training = True

    def _plan(self, epochs):
        """Training ends after `epochs` epochs, and the schedule decays to 0 at the end of the last."""
        self.planned_epochs = epochs
        if self.params is not None:  # the callbacks' shared params: a progress line that reads them counts the plan
            self.params["epochs"] = epochs
        if self.schedule is not None:
            self.schedule.plan(epochs * self.steps)
            if keras.backend.backend() == "jax" and getattr(self.model, "jit_compile", False):
                # A jitted JAX step receives only the model's, optimizer's and metrics' variables; it read the
                # schedule's planned length as a constant when it was traced. Trace it again.
                self.model.make_train_function(force=True)

    def _record(self, done, elapsed):
        """Writes the state after `done` epochs into `state_path`, beside that of the two epochs before: a resume
        reads the one of the epoch its backup restores (the newest, or the one before where that file is damaged)."""
        # Copies: the lists grow with later epochs, and this entry must keep them as they are now.
        self._states[str(done)] = {"seconds": elapsed, "steps": self.steps, "planned_epochs": self.planned_epochs,
                                   "plans": list(self.plans), "durations": list(self.durations)}
        self._states = {key: value for key, value in self._states.items() if int(key) >= done - 2}
        os.makedirs(os.path.dirname(os.path.abspath(self.state_path)), exist_ok=True)
        files.write_json(self.state_path, self._states)

    def _resume(self, done):
        """Goes on from the state recorded after `done` epochs, if there is one."""
        states = recorded_states(self.state_path)
        entry = states.get(str(done))
        if not isinstance(entry, dict):
            if self.verbose:
                print(f"time budget {self.minutes:g} min: {self.state_path} has no record of epoch {done}, so "
                      f"the budget counts from now and the plan is made again after this epoch")
            return
        # The epochs recorded after `done` belong to the interrupted run's lost epochs: they are trained again.
        self._states = {key: value for key, value in states.items() if key.isdigit() and int(key) <= done}
        self.started = self.clock() - entry["seconds"]
        self.previous_end = self.clock()
        self.steps, self.durations = entry["steps"], list(entry["durations"])
        self.plans = [tuple(plan) for plan in entry["plans"]]
        self._plan(entry["planned_epochs"])
        if self.verbose:
            print(f"time budget {self.minutes:g} min: resumed after epoch {done}, {entry['seconds']:.0f} s of it "
                  f"used; training is planned for {self.planned_epochs} epochs of {self.steps} steps")


def recorded_states(state_path):
    """What a `TimeBudget` with `state_path` recorded: `{epochs done, as a string: state}` for the last epochs, each
    state a dict with the seconds used (`"seconds"`), `"planned_epochs"`, `"steps"`, `"plans"` and `"durations"`;
    {} when the file is missing or damaged."""
    try:
        with open(state_path) as file:
            states = json.load(file)
    except (OSError, ValueError):
        return {}
    return states if isinstance(states, dict) else {}
