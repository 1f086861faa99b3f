"""A run's life without training: the resume command, refused resumes, segments, and stopping by signal."""

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest

from keras_tfm import files

from recipes import runs


def _args(**flags):
    values = dict(epochs=4, learning_rate=0.01, preset="tiny", max_digits=6, output_dir=None, overwrite=False,
                  argv=["--epochs", "4"])
    return argparse.Namespace(**{**values, **flags})


def _backup(run, epochs):
    """A backup of `epochs` finished epochs, as keras_tfm's BackupAndRestore leaves it (weights: one array)."""
    (run / runs.BACKUP).mkdir()
    with h5py.File(run / runs.BACKUP / f"epoch-{epochs:04d}.weights.h5", "w") as file:
        file.create_dataset("w", data=np.zeros(3))
    (run / runs.BACKUP / "training_metadata.json").write_text(
        json.dumps({"epoch": epochs, "batch": 0, "weights": f"epoch-{epochs:04d}.weights.h5"}))


def test_the_resume_command_keeps_the_flags_and_names_the_folder_once():
    argv = ["--quick", "--output-dir", "old", "--overwrite", "--output-dir=older", "--preset", "my run"]
    assert runs.command("translate", argv, "runs/x y") == (
        "python -m recipes.translate --quick --preset 'my run' --output-dir 'runs/x y'")


def test_a_new_run_prints_its_folder_and_resume_command_first(tmp_path, capsys):
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"run folder: {tmp_path}",
                     f"  if it is stopped, resume it with: python -m recipes.reverse_digits --epochs 4 --output-dir {tmp_path}"]
    record = json.loads((tmp_path / runs.RUN_FILE).read_text())
    assert record["recipe"] == "reverse_digits" and record["model_flags"] == {"preset": "tiny"}
    assert record["segments"][0]["flags"]["learning_rate"] == 0.01 and "argv" not in record["segments"][0]["flags"]


def test_a_resume_says_where_it_continues_and_records_what_changed(tmp_path, capsys):
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    _backup(tmp_path, 3)
    capsys.readouterr()
    run = runs.Run.start("reverse_digits", str(tmp_path), _args(epochs=6, learning_rate=0.001), ("preset",))
    out = capsys.readouterr().out
    assert "resuming from epoch 4 of 6 (3 finished epochs restored from backup/)" in out
    assert "changed since the last start: --epochs 4 -> 6, --learning-rate 0.01 -> 0.001" in out
    assert [segment["from_epoch"] for segment in run.segments()] == [0, 3]
    assert run.segments()[1]["flags"] == {"epochs": 6, "learning_rate": 0.001}
    assert run.stopped_message() == (
        f"stopped after epoch 3 of 6; resume with: python -m recipes.reverse_digits --epochs 4 --output-dir {tmp_path}")


def test_a_time_budgets_plan_is_the_epoch_count_a_resume_and_a_stop_name(tmp_path, capsys):
    """With `--time-budget` the run trains the epochs its budget planned (the progress bar's "Epoch 2/17"), not
    `--epochs` (its most): the lines that say where a run stopped and resumes count the plan recorded for the
    epoch the backup holds."""
    runs.Run.start("cifar10_vit", str(tmp_path), _args(epochs=100), ("preset",))
    _backup(tmp_path, 3)
    state = {str(done): {"seconds": 400.0 * done, "steps": 352, "planned_epochs": planned, "plans": [],
                         "durations": []} for done, planned in ((2, 17), (3, 16))}
    (tmp_path / runs.BACKUP / runs.BUDGET_STATE).write_text(json.dumps(state))
    capsys.readouterr()
    run = runs.Run.start("cifar10_vit", str(tmp_path), _args(epochs=100), ("preset",))
    assert "resuming from epoch 4 of 16 (3 finished epochs restored from backup/)" in capsys.readouterr().out
    assert run.stopped_message().startswith("stopped after epoch 3 of 16; resume with: ")
    (tmp_path / runs.BACKUP / runs.BUDGET_STATE).write_text("{")  # damaged: the flag's count, as without a budget
    assert run.stopped_message().startswith("stopped after epoch 3 of 100; resume with: ")


def test_a_flag_that_shapes_the_weights_is_refused_on_resume(tmp_path, capsys):
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset", "max_digits"))
    before = (tmp_path / runs.RUN_FILE).read_text()
    with pytest.raises(SystemExit) as stop:
        runs.Run.start("reverse_digits", str(tmp_path), _args(preset="small"), ("preset", "max_digits"))
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "--preset small differs from the run's --preset tiny" in error and "Resume with --preset tiny" in error
    assert (tmp_path / runs.RUN_FILE).read_text() == before  # nothing recorded


def test_another_recipes_unfinished_folder_is_refused(tmp_path, capsys):
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ())
    with pytest.raises(SystemExit) as stop:
        runs.Run.start("cifar10_vit", str(tmp_path), _args(), ())
    assert stop.value.code == 2
    assert "holds an unfinished reverse_digits run, not a cifar10_vit one" in capsys.readouterr().err


@pytest.mark.parametrize("number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_run_with_one_line_after_the_files_being_written(tmp_path, capsys, number, code):
    steps = []

    def main():
        runs.Run.start("reverse_digits", str(tmp_path), _args(), ())
        runs.hold()  # an epoch's backup and log row being written: the signal waits for them
        os.kill(os.getpid(), number)
        steps.append("written")
        runs.release()
        steps.append("trained on")  # never reached
        return {}

    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert runs.run_main(main) == code
    assert steps == ["written"]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"stopped before the first epoch ended; resume with: python -m recipes.reverse_digits --epochs 4 "
        f"--output-dir {tmp_path}"]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # put back


def test_the_finished_recipe_is_read_from_the_summary(tmp_path):
    assert runs.finished_recipe(str(tmp_path)) is None
    (tmp_path / runs.FINISHED).write_text(json.dumps({"recipe": "translate"}))
    assert runs.finished_recipe(str(tmp_path)) == "translate"


# -- one writer per run folder ------------------------------------------------------------------------------------

def _lock_of(pid, host=None):
    return json.dumps({"pid": pid, "host": host or socket.gethostname(), "process_start": runs._process_start(pid),
                       "command": "python -m recipes.reverse_digits --epochs 4", "since": "2026-12-05T10:00:00"})


def test_a_second_run_in_a_folder_held_by_a_live_process_is_refused_with_one_line(tmp_path, capsys):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / runs.LOCK_FILE).write_text(_lock_of(other.pid))
        with pytest.raises(SystemExit) as refused:
            runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
        assert refused.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {tmp_path} is in use by process {other.pid} (since 2026-12-05T10:00:00: "
                              "python -m recipes.reverse_digits --epochs 4)") and "\n" not in err
        assert not (tmp_path / runs.RUN_FILE).exists()  # nothing written
    finally:
        other.kill()
        other.wait()
    # The same lock once its process is gone (killed): taken over, with a line that says so.
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    assert f"{tmp_path}: taking over the lock of process {other.pid}, which is gone" in capsys.readouterr().out
    assert json.loads((tmp_path / runs.LOCK_FILE).read_text())["pid"] == os.getpid()
    runs.unlock(str(tmp_path))
    assert not (tmp_path / runs.LOCK_FILE).exists()


def test_a_lock_from_another_host_is_respected_and_an_empty_one_taken_over(tmp_path, capsys):
    (tmp_path / runs.LOCK_FILE).write_text(_lock_of(1, host="another-machine"))
    with pytest.raises(SystemExit):
        runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    assert "in use by process 1 on another-machine" in capsys.readouterr().err
    (tmp_path / runs.LOCK_FILE).write_text("")  # a process killed while writing its lock
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    assert "taking over an unreadable lock (a run that was killed)" in capsys.readouterr().out
    runs.unlock(str(tmp_path))


def test_a_pid_reused_by_a_later_process_is_not_the_owner(tmp_path):
    lock = json.loads(_lock_of(os.getppid()))
    assert runs._alive(lock)
    assert not runs._alive({**lock, "process_start": lock["process_start"] + 1})  # another process, same pid


def test_the_same_process_starting_again_keeps_its_lock(tmp_path):
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))  # a recipe's main called twice
    runs.unlock(str(tmp_path))


def test_a_start_removes_what_a_killed_writer_left(tmp_path):
    (tmp_path / ".partial-12-run.json").write_text("{")
    runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    assert sorted(os.listdir(tmp_path)) == [runs.RUN_FILE, runs.LOCK_FILE]
    runs.unlock(str(tmp_path))


# -- a full disk named --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_write_error_ends_the_run_with_one_line_naming_the_file_and_the_free_space(tmp_path, capsys, code):
    run = runs.Run.start("reverse_digits", str(tmp_path), _args(), ("preset",))
    _backup(tmp_path, 2)
    target = str(tmp_path / "checkpoint.keras")

    def main():
        raise files.WriteError(code, os.strerror(code), target)

    assert runs.run_main(main) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"error: could not write {target}: {os.strerror(code)} (") and " free there). " in err
    assert err.endswith(f"The run stopped; epoch 2 is kept in {tmp_path}. Make room (or make the folder writable) "
                        f"and resume with: {run.segments()[-1]['command']}")
    runs.unlock(str(tmp_path))


def test_other_os_errors_are_not_taken_for_a_full_disk():
    def main():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "data.csv")

    with pytest.raises(FileNotFoundError):
        runs.run_main(main)


def test_a_lock_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """The lock is written under a partial name and linked into place: another process reading `run.lock` never
    finds it empty while its owner is still writing (an empty lock is taken over as a killed run's)."""
    path, linked = tmp_path / runs.LOCK_FILE, []
    real_link = os.link

    def watched_link(source, target):
        assert not path.exists()  # nothing under the lock's name before its text is complete
        linked.append(json.loads(open(source).read()))
        real_link(source, target)

    monkeypatch.setattr(runs.os, "link", watched_link)
    runs.lock(str(tmp_path))
    assert linked == [runs.lock_owner(str(tmp_path))] and linked[0]["pid"] == os.getpid()
    assert os.listdir(tmp_path) == [runs.LOCK_FILE]  # the partial file removed
    runs.unlock(str(tmp_path))

    def interrupted(source, target):
        raise KeyboardInterrupt  # a Ctrl-C between writing the text and linking it

    monkeypatch.setattr(runs.os, "link", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runs.lock(str(tmp_path))
    assert os.listdir(tmp_path) == []  # no lock, and no partial file left behind


def test_a_lock_is_taken_on_a_file_system_without_hard_links(tmp_path, monkeypatch):
    def refused(source, target):
        raise PermissionError(1, "Operation not permitted")  # what FAT and some network mounts answer

    monkeypatch.setattr(runs.os, "link", refused)
    runs.lock(str(tmp_path))
    assert runs.lock_owner(str(tmp_path))["pid"] == os.getpid() and os.listdir(tmp_path) == [runs.LOCK_FILE]
    runs.unlock(str(tmp_path))
    assert os.listdir(tmp_path) == []
