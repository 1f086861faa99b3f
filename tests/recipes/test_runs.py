"""A run's life without training: the resume command, refused resumes, segments, and stopping by signal."""

import argparse
import json
import os
import signal

import pytest

from recipes import runs


def _args(**flags):
    values = dict(epochs=4, learning_rate=0.01, preset="tiny", max_digits=6, output_dir=None, overwrite=False,
                  argv=["--epochs", "4"])
    return argparse.Namespace(**{**values, **flags})


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
    (tmp_path / "backup").mkdir()
    (tmp_path / runs.BACKUP_METADATA).write_text('{"epoch": 3, "batch": 0}')  # what Keras' backup writes
    capsys.readouterr()
    run = runs.Run.start("reverse_digits", str(tmp_path), _args(epochs=6, learning_rate=0.001), ("preset",))
    out = capsys.readouterr().out
    assert "resuming from epoch 4 of 6 (3 finished epochs restored from backup/)" in out
    assert "changed since the last start: --epochs 4 -> 6, --learning-rate 0.01 -> 0.001" in out
    assert [segment["from_epoch"] for segment in run.segments()] == [0, 3]
    assert run.segments()[1]["flags"] == {"epochs": 6, "learning_rate": 0.001}
    assert run.stopped_message() == (
        f"stopped after epoch 3 of 6; resume with: python -m recipes.reverse_digits --epochs 4 --output-dir {tmp_path}")


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
