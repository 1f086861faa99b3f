"""`--quick` honours the size flags written on the command line and says what it set (recipes/flags.py)."""

import os

from recipes import imdb_classifier, reverse_digits, translate


def test_quick_keeps_an_explicit_epochs_and_says_so(capsys):
    args = reverse_digits.parse_args(["--quick", "--epochs", "6"])
    assert args.epochs == 6 and args.train_samples == 512  # the rest shrinks
    assert "as given: epochs=6" in capsys.readouterr().out
    assert reverse_digits.parse_args(["--quick"]).epochs == 2
    args = translate.parse_args(["--quick", "--train-samples=3000"])
    assert args.train_samples == 3000 and args.epochs == 2


def test_imdb_defaults_by_path_and_quick():
    scratch, pretrained = imdb_classifier.parse_args([]), imdb_classifier.parse_args(["--pretrained", "folder"])
    assert (scratch.epochs, scratch.batch_size, scratch.learning_rate) == (3, 64, 1e-3)
    assert (pretrained.epochs, pretrained.batch_size, pretrained.learning_rate) == (1, 32, 1e-4)
    assert imdb_classifier.parse_args(["--pretrained", "folder", "--lora-rank", "8"]).learning_rate == 5e-4
    assert imdb_classifier.parse_args(["--quick", "--epochs", "2"]).epochs == 2


def test_history_with_validation_on_some_epochs_only_reads_and_plots(tmp_path):
    """Validation once per epoch of four parts (`validation_freq`): CSVLogger writes NA in the other rows."""
    import math

    from recipes import common

    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,0.5,NA\n1,0.4,NA\n2,0.3,0.35\n")
    history = common.read_history(tmp_path)
    assert history["loss"] == [0.5, 0.4, 0.3] and math.isnan(history["val_loss"][0]) and history["val_loss"][2] == 0.35
    assert os.path.getsize(common.plot_curves(history, tmp_path / "curves.png")) > 0


def test_expected_time_counts_steps_by_index_whatever_the_steps_per_execution(capsys):
    from recipes.progress import ExpectedTime

    now = [0.0]
    timer = ExpectedTime(total_steps=1000, measure=10, clock=lambda: now[0])
    for batch in range(3, 40, 4):  # one call per execution of 4 steps, 2 s a step
        timer.on_train_batch_end(batch)
        now[0] += 8.0
    assert timer.seconds_per_step == 2.0
    assert "expected training time: 33 min (1000 steps at 2.00 s/step" in capsys.readouterr().out


def test_imdb_freeze_blocks_needs_a_checkpoint_and_excludes_lora(capsys):
    import pytest

    assert imdb_classifier.parse_args(["--pretrained", "folder", "--freeze-blocks", "3"]).freeze_blocks == 3
    for argv, said in ((["--freeze-blocks", "3"], "give --pretrained FOLDER"),
                       (["--pretrained", "f", "--freeze-blocks", "3", "--lora-rank", "8"], "leave out --freeze-blocks")):
        with pytest.raises(SystemExit):
            imdb_classifier.parse_args(argv)
        assert said in capsys.readouterr().err
