"""Fault injection on a tiny recipe run: SIGKILL inside each file write and at random moments, a damaged backup,
a second run in the same folder, a full disk. After each the run resumes and ends as an uninterrupted run of the
same seed does: the same weights, the same log, no epoch lost or repeated, no traceback.

The kills are real (a recipe process, `SIGKILL`); to land one inside a write, the test sets
`KERAS_TFM_PAUSE_BEFORE_RENAME` to the file's name, and the write stops between its fsync and its rename
(`keras_tfm.files`). Each process costs a TensorFlow start, so CI runs the kills inside the two writes that carry
a run (the backup and the log row) and a random one, and the full disk; `--run-large` adds a kill inside every
other write and more random kills (12 kills per seed), a damaged backup, and a second run in a held folder.
"""

import glob
import os
import random
import shutil
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_tfm import files
from recipes import reverse_digits, runs
from tests.helpers import epochs_in

pytestmark = pytest.mark.tensorflow_only(reason="kills TensorFlow recipe processes: the order of batches is tf.data's")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Four short epochs of the digit-reversal recipe (about 1 s each here), without XLA's compile or pictures.
FLAGS = ["--train-samples", "256", "--test-samples", "16", "--max-digits", "4", "--batch-size", "32", "--no-jit",
         "--no-attention-maps", "--epochs", "4"]


def launch(run, pause=None):
    environment = dict(os.environ)
    if pause:
        environment[files.PAUSE_VARIABLE] = pause
    return subprocess.Popen([sys.executable, "-m", "recipes.reverse_digits", *FLAGS, "--output-dir", str(run)],
                            cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_inside(run, name):
    """Starts the run and kills it inside its first write of the file `name` (after the fsync, before the
    rename). Returns what the process printed."""
    process = launch(run, pause=name)
    deadline = time.monotonic() + 240
    while not glob.glob(os.path.join(glob.escape(str(run)), "**", f".partial-*-{name}.paused"), recursive=True):
        if process.poll() is not None:
            pytest.fail(f"the run ended before writing {name}: {process.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.kill()
    return process.communicate()


def kill_after(run, seconds):
    """Starts the run and kills it `seconds` after it took the folder's lock (a random moment of building the model,
    training or scoring)."""
    process = launch(run)
    deadline = time.monotonic() + 240
    while (runs.lock_owner(run) or {}).get("pid") != process.pid:
        if process.poll() is not None:
            return process.communicate()  # it finished: nothing left to kill
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(seconds)
    process.kill()
    return process.communicate()


def finish(run, capsys):
    """Resumes the run in this process to its end; returns the summary and what it printed."""
    capsys.readouterr()
    summary = reverse_digits.main([*FLAGS, "--output-dir", str(run)])
    return summary, capsys.readouterr()


def model_weights(run):
    return [np.asarray(w) for w in keras.saving.load_model(os.path.join(run, "model.keras")).get_weights()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    summary = reverse_digits.main([*FLAGS, "--output-dir", str(run)])
    with open(run / "history.csv") as file:
        return summary, model_weights(run), file.read()


def assert_same_end(run, summary, uninterrupted):
    """The resumed run ends with the uninterrupted run's weights, log and metrics: no epoch lost or repeated."""
    straight_summary, straight_weights, straight_log = uninterrupted
    for resumed, straight in zip(model_weights(run), straight_weights):
        np.testing.assert_allclose(resumed, straight, rtol=1e-5, atol=1e-6)
    assert epochs_in(run) == [0, 1, 2, 3]
    with open(run / "history.csv") as file:
        log = [line.split(",") for line in file.read().splitlines()]
    straight = [line.split(",") for line in straight_log.splitlines()]
    assert log[0] == straight[0]
    np.testing.assert_allclose(np.array(log[1:], float), np.array(straight[1:], float), rtol=1e-4, atol=1e-6)
    assert summary["metrics"] == straight_summary["metrics"]
    left = sorted(os.listdir(run))
    assert not [name for name in left if name.startswith(".partial") or name in ("backup", "run.lock",
                                                                                 "checkpoint.keras")], left


@pytest.mark.slow
def test_sigkill_inside_the_backup_and_inside_the_log_row_then_at_random(tmp_path, capsys, uninterrupted):
    run = tmp_path / "run"
    kill_inside(run, "epoch-0002.weights.h5")  # epoch 2 trained, its row written, its backup not yet renamed
    assert epochs_in(run) == [0, 1] and runs.finished_epochs(run) == 1
    _, err = kill_inside(run, "history.csv")  # the resumed run, inside epoch 2's row (written again)
    assert "Traceback" not in err
    assert runs.finished_epochs(run) == 1
    kill_after(run, random.Random(0).uniform(0.5, 3.0))
    summary, printed = finish(run, capsys)
    assert "Traceback" not in printed.err
    assert_same_end(run, summary, uninterrupted)
    assert [segment["from_epoch"] for segment in summary["segments"]][0] == 0


@pytest.mark.large  # the callback's own tests damage a backup in every way; this one on a recipe's folder
def test_a_damaged_newest_backup_resumes_from_the_one_before_with_one_line(tmp_path, capsys, uninterrupted):
    run = tmp_path / "run"
    kill_inside(run, "epoch-0004.weights.h5")  # three epochs backed up; the fourth trained, not yet backed up
    newest = run / runs.BACKUP / "epoch-0003.weights.h5"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as a failing disk would leave it
    (run / runs.BACKUP / "training_metadata.json").write_text("")
    summary, printed = finish(run, capsys)
    notes = [line for line in printed.out.splitlines() if line.startswith(str(run / runs.BACKUP))]
    assert len(notes) == 1 and notes[0].startswith(
        f"{run / runs.BACKUP}: training_metadata.json cannot be read; epoch-0003.weights.h5 cannot be read (")
    assert notes[0].endswith("restored the state after epoch 2 from epoch-0002.weights.h5, and training goes on "
                             "from epoch 3")
    assert_same_end(run, summary, uninterrupted)


@pytest.mark.slow
def test_a_full_disk_ends_the_run_with_one_line_and_it_resumes_once_there_is_room(tmp_path, capsys, monkeypatch,
                                                                                  uninterrupted):
    run = tmp_path / "run"
    flushed, flush = [], files._fsync

    def full_at_the_third_checkpoint(path):
        if os.path.basename(path).endswith("checkpoint.keras"):
            flushed.append(path)
            if len(flushed) == 3:
                raise OSError(28, "No space left on device")
        flush(path)

    monkeypatch.setattr(files, "_fsync", full_at_the_third_checkpoint)
    code = runs.run_main(lambda: reverse_digits.main([*FLAGS, "--output-dir", str(run)]))
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not any("Traceback" in line for line in err)
    assert err[-1].startswith(f"error: could not write {run / 'checkpoint.keras'}: No space left on device (")
    assert err[-1].endswith(f"The run stopped; epoch 3 is kept in {run}. Make room (or make the folder writable) and "
                            f"resume with: python -m recipes.reverse_digits {' '.join(FLAGS)} --output-dir {run}")
    assert epochs_in(run) == [0, 1, 2] and keras.saving.load_model(run / "checkpoint.keras")  # epoch 2's, whole
    summary, _ = finish(run, capsys)
    assert_same_end(run, summary, uninterrupted)


@pytest.mark.large  # tests/recipes/test_runs.py refuses a live owner's folder in CI; this one with two recipes
def test_a_second_run_in_the_folder_is_refused_while_the_first_trains(tmp_path, capsys, uninterrupted):
    run = tmp_path / "run"
    first = launch(run, pause="epoch-0002.weights.h5")  # holds the folder, paused inside a write
    deadline = time.monotonic() + 240
    while not glob.glob(str(run / runs.BACKUP / ".partial-*.paused")):
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    try:
        second = subprocess.run([sys.executable, "-m", "recipes.reverse_digits", *FLAGS, "--output-dir", str(run)],
                                cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines()[-1].startswith(f"error: {run} is in use by process {first.pid} (")
    finally:
        first.kill()
        first.communicate()
    summary, printed = finish(run, capsys)  # the first's lock is taken over: its process is gone
    assert f"{run}: taking over the lock of process {first.pid}, which is gone" in printed.out
    assert_same_end(run, summary, uninterrupted)


@pytest.mark.large
@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_inside_every_write_and_at_random_moments(tmp_path, capsys, uninterrupted, seed):
    """Every file a run writes, killed inside its first write, in a seeded order, with random kills between
    (12 kills in all per seed)."""
    run = tmp_path / "run"
    names = ["run.json", "history.csv", "epoch-0001.weights.h5", "training_metadata.json", "checkpoint.keras",
             "model.keras", "summary.json"]
    rng = random.Random(seed)
    kills = 0
    for name in names:  # the last two are written after training: the run trains what is left, then is killed
        out, err = kill_inside(run, name)
        kills += 1
        assert "Traceback" not in err, err[-3000:]
        if name not in ("model.keras", "summary.json"):
            kill_after(run, rng.uniform(0.5, 5.0))
            kills += 1
    summary, printed = finish(run, capsys)
    assert "Traceback" not in printed.err and kills >= 10
    assert_same_end(run, summary, uninterrupted)
    shutil.rmtree(run)
