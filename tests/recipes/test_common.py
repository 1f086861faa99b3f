"""The recipes' shared plumbing: flags, run folders, optimizer options, history and curves."""

import argparse
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tfm.data import digits
from keras_tfm.models import LANGUAGE_MODEL_PRESETS, SEQ2SEQ_PRESETS, TEXT_CLASSIFIER_PRESETS, VIT_PRESETS
from keras_tfm.models.text_classifier import POOLS
from keras_tfm.text import MODEL_TYPES
from recipes import cifar10_vit, common, experiments, flags, imdb_classifier, language_model, reverse_digits, translate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = ("reverse_digits", "cifar10_vit", "imdb_classifier", "translate", "language_model", "experiments")


def test_the_recipes_flag_choices_are_the_librarys_names():
    # The recipes spell these out so that they can parse flags before TensorFlow loads; they must not drift.
    assert reverse_digits.TASKS == digits.TASKS
    assert reverse_digits.PRESETS == translate.PRESETS == tuple(sorted(SEQ2SEQ_PRESETS))
    assert imdb_classifier.PRESETS == tuple(sorted(TEXT_CLASSIFIER_PRESETS))
    assert imdb_classifier.POOLS == POOLS
    assert cifar10_vit.PRESETS == tuple(sorted(VIT_PRESETS))
    assert cifar10_vit.PATCH_SIZES == {name: preset["patch_size"] for name, preset in VIT_PRESETS.items()}
    assert translate.TOKENIZERS == MODEL_TYPES
    assert language_model.PRESETS == tuple(sorted(LANGUAGE_MODEL_PRESETS))
    assert experiments.EXPERIMENT_NAMES == tuple(experiments.EXPERIMENTS)


@pytest.mark.parametrize("recipe", RECIPES)
def test_help_answers_before_tensorflow_is_imported(recipe):
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", f"recipes.{recipe}", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "usage:" in result.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line]
    assert "argparse" in imported  # the import log is read right...
    assert not [name for name in imported if name.split(".")[0] in ("tensorflow", "keras", "jax", "torch")]


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_flag_has_a_help_text(recipe, capsys):
    module = {"reverse_digits": reverse_digits, "cifar10_vit": cifar10_vit, "imdb_classifier": imdb_classifier,
              "translate": translate, "language_model": language_model, "experiments": experiments}[recipe]
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "(default: True)" not in text and "(default: False)" not in text and "(default: None)" not in text
    parser_actions = []
    original = argparse.ArgumentParser.parse_args

    def capture(parser, *args, **kwargs):
        parser_actions.extend(parser._actions)
        return original(parser, *args, **kwargs)

    argparse.ArgumentParser.parse_args = capture
    try:
        module.parse_args(["all"] if recipe == "experiments" else [])
    finally:
        argparse.ArgumentParser.parse_args = original
    missing = [action.option_strings or action.dest for action in parser_actions if not action.help]
    assert not missing


@pytest.mark.parametrize("parse, text, ok", [
    (flags.positive_int, "3", 3), (flags.positive_int, "0", None), (flags.positive_float, "0.5", 0.5),
    (flags.positive_float, "0", None), (flags.non_negative_float, "0", 0.0), (flags.non_negative_float, "-1", None),
    (flags.fraction, "0.99", 0.99), (flags.fraction, "1", None),
])
def test_argument_types(parse, text, ok):
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be .*got {text}"):
            parse(text)
    else:
        assert parse(text) == ok


def test_a_finished_run_is_kept_and_overwrite_starts_again(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    (run / "model.keras").write_text("weights")
    with pytest.raises(SystemExit) as exit_info:
        common.output_directory("reverse_digits", str(run))
    assert exit_info.value.code == 0
    message = capsys.readouterr().out
    assert "finished reverse_digits run" in message and "--overwrite" in message
    assert (run / "model.keras").read_text() == "weights"
    assert common.output_directory("reverse_digits", str(run), overwrite=True) == str(run)
    assert os.listdir(run) == []
    (run / "history.csv").write_text("epoch\n0\n")  # an interrupted run: kept, so that training resumes
    assert common.output_directory("reverse_digits", str(run)) == str(run)
    assert (run / "history.csv").exists()


def test_history_and_curves_are_readable(tmp_path):
    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,2.5\n1,1.0,1.5\n")
    history = common.read_history(str(tmp_path))
    assert history == {"epoch": [0.0, 1.0], "loss": [2.0, 1.0], "val_loss": [2.5, 1.5]}
    path = common.plot_curves(history, str(tmp_path / "curves.png"))
    assert keras.utils.load_img(path).size[0] > 100


def test_warmup_cosine_schedule():
    schedule = common.warmup_cosine(1.0, total_steps=100, warmup_fraction=0.1)
    values = [float(schedule(step)) for step in (0, 5, 10, 55, 100)]
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0, 0.5, 0.0], atol=1e-6)


def _args(**overrides):
    values = dict(learning_rate=0.05, warmup_fraction=0.0, weight_decay=0.01, clipnorm=1.0, accumulate_steps=1)
    return argparse.Namespace(**{**values, **overrides})


@pytest.mark.parametrize("steps", [2, 4])
def test_accumulating_n_batches_equals_one_batch_n_times_larger(steps):
    """--accumulate-steps N: N batches of b give the weights of one batch of N·b (clipping included: Keras clips
    the averaged gradient)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8 * steps, 5)).astype("float32"), rng.integers(0, 3, 8 * steps)

    def train(batch_size, accumulate):
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])
        optimizer = common.adamw(_args(accumulate_steps=accumulate), total_steps=10**9)  # ~constant rate
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        return model.get_weights(), int(optimizer.iterations)

    accumulated, updates = train(8, steps)
    large, large_updates = train(8 * steps, 1)
    assert updates == large_updates == 1
    for got, want in zip(accumulated, large):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # ...and without accumulation the same small batches take `steps` updates and end elsewhere.
    unaccumulated, _ = train(8, 1)
    assert not np.allclose(unaccumulated[0], large[0], atol=1e-5)


def test_optimizer_options_follow_the_flags():
    assert common.optimizer_options(_args()) == {"clipnorm": 1.0, "gradient_accumulation_steps": None}
    assert common.optimizer_options(_args(clipnorm=0.0, accumulate_steps=3)) == {
        "clipnorm": None, "gradient_accumulation_steps": 3}


def test_progress_is_a_bar_on_a_terminal_and_one_line_per_epoch_otherwise(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert common.fit_verbosity() == 1
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert common.fit_verbosity() == 2
