"""`keras_tfm.callbacks.TimeBudget`: the epochs that fit in a budget and a schedule planned for them, on a fake
clock (seconds pass only when a batch trains), so the plans are exact and the tests take no real time."""

import json

import keras
import numpy as np
import pytest

from keras_tfm.callbacks import BackupAndRestore, TimeBudget
from keras_tfm.schedules import PlannedWarmupCosine

# Keras' fit loop with a callback and a schedule, the same on every backend; the test that needs each backend's
# compiled step (JAX's retrace) is marked every_backend.
pytestmark = pytest.mark.tensorflow_only(reason="fake-clock planning logic; the compiled-step test runs everywhere")


class FakeClock:
    """Seconds that pass only when a batch is trained: `seconds_per_batch[epoch]` per batch."""

    def __init__(self, seconds_per_batch, first_step=None):
        self.now, self.seconds_per_batch, self.first_step = 1000.0, seconds_per_batch, first_step

    def __call__(self):
        return self.now

    def callback(self):
        clock = self

        class Tick(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                if clock.first_step is not None and self.epoch == batch == 0:
                    clock.now += clock.first_step
                else:
                    clock.now += clock.seconds_per_batch[min(self.epoch, len(clock.seconds_per_batch) - 1)]

        return Tick()


class _SlowSave(keras.callbacks.Callback):
    """Takes `seconds` of the fake clock at every epoch end, after the callbacks before it (as a checkpoint does)."""

    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def on_epoch_end(self, epoch, logs=None):
        self.clock.now += self.seconds


def _budget_run(minutes, seconds_per_batch, epochs=50, first_step=None, steps_per_execution=1, save_seconds=0):
    """A tiny model trained on 4 batches per epoch under a `TimeBudget` with a fake clock (which counts
    `seconds_per_batch` per execution of `steps_per_execution` batches, and `save_seconds` after each epoch's
    end has reached the budget)."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    schedule = PlannedWarmupCosine(0.1, total_steps=epochs * 4, warmup_fraction=0.25)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse", steps_per_execution=steps_per_execution)
    clock = FakeClock(seconds_per_batch, first_step)
    budget = TimeBudget(minutes, schedule, clock=clock, verbose=False)
    callbacks = [clock.callback(), budget, _SlowSave(clock, save_seconds)]
    history = model.fit(x, x[:, :1], batch_size=8, epochs=epochs, callbacks=callbacks, verbose=0)
    return len(history.epoch), budget, schedule, model


def test_time_budget_plans_the_schedule_for_the_epochs_that_fit():
    # 4 batches of 10 s: the first epoch takes 40 s, 140 s of a 3-minute budget are left, 3 more epochs fit.
    epochs, budget, schedule, model = _budget_run(3, [10.0])
    assert budget.planned_epochs == 4 and epochs == 4
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 16  # the learning rate reaches 0 at the end
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 16
    assert float(schedule(16)) == 0.0 and float(schedule(4)) == pytest.approx(0.1)  # warm-up: 1 of 4 epochs


def test_time_budget_counts_the_real_steps_when_steps_per_execution_does_not_divide_the_epoch():
    # 4 batches in executions of 3: Keras reports the second (one batch) as ending at step index 5. Two 10 s
    # executions per epoch, so 9 epochs fit in 3 minutes: 36 steps, and the learning rate reaches 0 at the last.
    if keras.backend.backend() == "torch":
        pytest.skip("Keras runs one step per execution on PyTorch")
    epochs, budget, schedule, model = _budget_run(3, [10.0], steps_per_execution=3)
    assert budget.plans == [(1, 9)] and epochs == 9
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 36
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 36 and float(schedule(36)) == 0.0


def test_time_budget_shortens_the_plan_when_epochs_get_slower_so_the_decay_ends_inside_the_budget():
    # 5 minutes. The first epoch takes 40 s: 260 s are left, 6 more fit, 7 are planned. The others take 60 s:
    # after the second, 200 s are left at a mean of 50 s, so 6 in all; after the third, 140 s at 53 s, so 5.
    # Planned from the first epoch alone, training would run 6 epochs, end at 340 s and stop with the learning
    # rate still at 9% of its peak (24 of 28 steps).
    epochs, budget, schedule, model = _budget_run(5, [10.0, 15.0])
    assert budget.plans == [(1, 7), (2, 6), (3, 5)] and (budget.planned_epochs, epochs) == (5, 5)
    assert budget.durations == [40.0, 60.0, 60.0, 60.0, 60.0]  # 280 s: inside the budget
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 20
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 20 and float(schedule(20)) == 0.0


def test_time_budget_counts_the_time_between_epochs_too():
    # Epochs of 40 s, each followed by 20 s of saving after TimeBudget has seen the epoch end: the same budget and
    # plans as the slower epochs above. Timed only from epoch begin to end, every epoch would look like 40 s, and
    # the plan would be shortened late: (3, 6), then (5, 5) at the last epoch, with the decay not finished.
    epochs, budget, schedule, model = _budget_run(5, [10.0], save_seconds=20.0)
    assert budget.plans == [(1, 7), (2, 6), (3, 5)] and epochs == 5
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 20 and float(schedule(20)) == 0.0


def test_time_budget_lengthens_the_plan_while_less_than_half_of_it_is_done():
    # The first epoch takes 40 s (4 planned in 3 minutes: a shared machine, say); later ones take 20 s. After the
    # second (60 s used, a mean of 30 s), 4 more fit: 6 in all, and 2 of 4 done is not past half, so the plan
    # grows to 6. After the fourth, 7 would fit, but 4 of 6 are done: the plan stays, and the decay ends at 6.
    epochs, budget, schedule, _ = _budget_run(3, [10.0, 5.0])
    assert budget.plans == [(1, 4), (2, 6)] and (budget.planned_epochs, epochs) == (6, 6)
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 24 and float(schedule(24)) == 0.0


def test_time_budget_never_lengthens_the_plan_past_its_first_half():
    # 5 minutes, epochs of 40 s: 7 planned. From the fourth on, epochs take 20 s; after it, 8 would fit, but a
    # longer plan past half of this one would raise the learning rate late: training ends after the 7, decayed.
    epochs, budget, schedule, _ = _budget_run(5, [10.0, 10.0, 10.0, 5.0])
    assert budget.plans == [(1, 7)] and (budget.planned_epochs, epochs) == (7, 7)
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 28


def test_time_budget_stops_at_the_end_of_the_epoch_that_passes_it():
    # Planned from a 40 s first epoch (4 in 3 minutes); the second takes 40 s too, but the third 160 s: it ends
    # at 240 s, past the budget, and training stops there, after 3 epochs.
    epochs, budget, _, _ = _budget_run(3, [10.0, 10.0, 40.0])
    assert budget.plans == [(1, 4), (3, 3)] and epochs == 3


def test_time_budget_leaves_the_compiling_first_step_out_of_the_estimate():
    # The first step takes 100 s (tracing, compiling), the others 10 s: the first epoch took 130 s, but an epoch
    # takes 40 s; 50 s of a 3-minute budget are left, so one more epoch fits.
    epochs, budget, _, _ = _budget_run(3, [10.0], first_step=100.0)
    assert budget.planned_epochs == 2 and epochs == 2


def test_time_budget_never_plans_more_than_the_fit_epochs_nor_less_than_one():
    epochs, budget, schedule, _ = _budget_run(60, [1.0], epochs=5)
    assert (budget.planned_epochs, epochs, int(keras.ops.convert_to_numpy(schedule.total_steps))) == (5, 5, 20)
    epochs, budget, _, _ = _budget_run(0.5, [60.0])  # the first epoch alone is over budget
    assert (budget.planned_epochs, epochs) == (1, 1)
    with pytest.raises(ValueError, match=r"`minutes` must be a positive number.*minutes=0"):
        TimeBudget(0)
    with pytest.raises(ValueError, match=r"minutes=True"):
        TimeBudget(True)
    with pytest.raises(TypeError, match=r"`schedule` must have a `plan\(total_steps\)` method.*schedule=0.001"):
        TimeBudget(5, schedule=1e-3)  # a learning rate, not a schedule that can be planned
    with pytest.raises(TypeError, match=r"`state_path` must be None or a file's path. Received: state_path=5"):
        TimeBudget(5, state_path=5)


class _Crash(Exception):
    pass


class _CrashAt(keras.callbacks.Callback):
    """Stops the process's `fit` as a crash would, as epoch `epoch` (0-based) begins."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise _Crash()


@pytest.mark.every_backend  # the jitted JAX step is traced again for the plan the resumed fit reads back
def test_a_resumed_run_goes_on_with_the_rest_of_its_budget_and_its_plan(tmp_path):
    """Interrupted after its second epoch and resumed from its backup ten hours later, a run under a time budget
    trains what the uninterrupted run trains: the same plans, epochs and learning rate at every step. The budget
    counts the 100 s trained before the interruption, not the hours between, and the schedule keeps its plan from
    the resumed run's first step (a new budget would plan the rest from 60 s epochs: 3 + 4 = 7 epochs; and its
    first epoch would run on the 50-epoch schedule made at the start)."""
    state = tmp_path / "backup" / "time_budget.json"

    def run(crash_at=None, hours_later=0, folder="backup"):
        schedule = PlannedWarmupCosine(0.1, total_steps=200, warmup_fraction=0.25)
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False,
                                                                        kernel_initializer="zeros")])
        # Every step's gradient is 1: SGD moves the weight by the learning rate each step used.
        model.compile(optimizer=keras.optimizers.SGD(schedule), loss=lambda y, p: keras.ops.mean(p))
        clock = FakeClock([10.0, 15.0])  # 40 s, then 60 s epochs
        clock.now += 3600.0 * hours_later
        budget = TimeBudget(5, schedule, clock=clock, verbose=False, state_path=tmp_path / folder / state.name)
        callbacks = [clock.callback(), budget, BackupAndRestore(tmp_path / folder, delete_backup=False)]
        x = np.ones((32, 1), "float32")
        try:
            history = model.fit(x, x, batch_size=8, epochs=50, shuffle=False, verbose=0,
                                callbacks=callbacks + ([_CrashAt(crash_at)] if crash_at else []))
        except _Crash:
            history = None
        return model, budget, schedule, history

    whole, whole_budget, whole_schedule, _ = run(folder="uninterrupted")
    assert whole_budget.plans == [(1, 7), (2, 6), (3, 5)]  # (the plans of the test with slower epochs above)
    run(crash_at=2)  # two epochs, 100 s, backed up; then the process dies
    resumed, budget, schedule, history = run(hours_later=10)
    assert history.epoch == [2, 3, 4]  # the last three of the five
    assert budget.plans == whole_budget.plans and budget.planned_epochs == 5
    assert budget.durations == whole_budget.durations == [40.0, 60.0, 60.0, 60.0, 60.0]
    assert int(keras.ops.convert_to_numpy(schedule.total_steps)) == 20
    assert int(keras.ops.convert_to_numpy(resumed.optimizer.iterations)) == 20
    np.testing.assert_allclose(keras.ops.convert_to_numpy(resumed.weights[0]),
                               keras.ops.convert_to_numpy(whole.weights[0]), rtol=1e-6)
    # The file keeps the last three epochs' states: enough for a backup that falls back to the epoch before. Each
    # is the state after its own epoch (a resume from the epoch before must not see the later epochs' times).
    states = json.loads(state.read_text())
    assert sorted(states) == ["3", "4", "5"]
    assert [len(states[key]["durations"]) for key in ("3", "4", "5")] == [3, 4, 5]
    assert states["3"]["plans"] == [[1, 7], [2, 6], [3, 5]] and states["3"]["seconds"] == 160.0


def test_a_resume_without_a_record_of_its_epoch_budgets_afresh_and_says_so(tmp_path, capsys):
    """A state file that lost the epoch the backup restores (or a run begun without `state_path`): the resumed fit
    plans from its own first epoch, as before, and prints why."""
    schedule = PlannedWarmupCosine(0.1, total_steps=200)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    clock = FakeClock([10.0])
    state = tmp_path / "time_budget.json"
    state.write_text('{"1": {"seconds": 40.0}}')
    budget = TimeBudget(3, schedule, clock=clock, state_path=state)
    x = np.ones((32, 1), "float32")
    model.fit(x, x, batch_size=8, epochs=50, initial_epoch=2, callbacks=[clock.callback(), budget], verbose=0)
    assert f"{state} has no record of epoch 2, so the budget counts from now" in capsys.readouterr().out
    assert budget.plans == [(3, 6)]  # 40 s epochs in 3 minutes: 4 from the resumed one on


@pytest.mark.every_backend  # the jitted JAX step is the case that needs TimeBudget's retrace
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("seconds_per_batch, minutes, plans, least_at_step_5",
                         [([10.0], 160 / 60, [(1, 4)], 0.09),  # warm-up over 4 steps, then the 16-step cosine
                          ([10.0, 15.0], 5, [(1, 7), (2, 6), (3, 5)], 0.07)])  # warm-up over 7 steps
def test_every_new_plan_reaches_the_compiled_training_step(jit, seconds_per_batch, minutes, plans, least_at_step_5):
    """TimeBudget's plans are what the compiled step uses, also in a jitted JAX step (which reads the schedule's
    length as a constant, so TimeBudget traces it again). Every step's gradient is 1, so SGD moves the weight by
    exactly the sum of the learning rates the steps used. Each epoch has 4 steps; the second case shortens the plan
    twice (test_time_budget_shortens_the_plan_when_epochs_get_slower_so_the_decay_ends_inside_the_budget)."""
    if jit and keras.backend.backend() == "torch":
        pytest.skip("torch.compile takes 16-20 s per case on 2 cores; it reads the schedule's variable at every step "
                    "as eager PyTorch does (both cases passed with it on 2026-12-03)")
    schedule = PlannedWarmupCosine(0.1, total_steps=200, warmup_fraction=0.25)  # 50 warm-up steps
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss=lambda y, p: keras.ops.mean(p), jit_compile=jit)
    clock = FakeClock(seconds_per_batch)
    budget = TimeBudget(minutes, schedule, clock=clock, verbose=False)
    x = np.ones((32, 1), "float32")
    model.fit(x, x, batch_size=8, epochs=50, shuffle=False, callbacks=[clock.callback(), budget], verbose=0)
    assert budget.plans == plans
    used = [0.1 * step / 50 for step in range(4)]  # epoch 1 on the first plan: warming up over 50 steps
    for (done, planned), following in zip(plans, plans[1:] + [(plans[-1][1], None)]):
        plan = PlannedWarmupCosine(0.1, total_steps=4 * planned, warmup_fraction=0.25)
        used += [float(keras.ops.convert_to_numpy(plan(step))) for step in range(4 * done, 4 * following[0])]
    assert len(used) == 4 * plans[-1][1]
    assert used[5] > least_at_step_5  # the new plan's learning rates are far from the old one's (0.01 at step 5)
    weight = float(keras.ops.convert_to_numpy(model.weights[0])[0, 0])
    assert weight == pytest.approx(-sum(used), rel=1e-5)
