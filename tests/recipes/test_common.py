"""The recipes' shared plumbing: flags, run folders, optimizer options, history and curves."""

import argparse
import json
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
from recipes import (cifar10_vit, common, devices, experiments, fast_paths, fitting, flags, imdb_classifier,
                     language_model, pretrain_text,
                     reverse_digits, translate)
from tests.helpers import load_script, never_waits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = ("reverse_digits", "cifar10_vit", "imdb_classifier", "translate", "language_model", "experiments",
           "pretrain_text")
MINIMAL_ARGUMENTS = {"experiments": ["all"], "pretrain_text": ["--text-file", "corpus.txt"]}


def test_the_recipes_flag_choices_are_the_librarys_names():
    # Presets, tasks, pools and tokenizer types come from keras_tfm's Keras-free modules (keras_tfm.presets,
    # keras_tfm.data.digits), the same values the models and the tokenizer check against.
    assert reverse_digits.TASKS == digits.TASKS
    assert reverse_digits.PRESETS == translate.PRESETS == tuple(sorted(SEQ2SEQ_PRESETS))
    assert imdb_classifier.PRESETS == pretrain_text.PRESETS == tuple(sorted(TEXT_CLASSIFIER_PRESETS))
    assert imdb_classifier.POOLS == tuple(p for p in POOLS if p != "pooler")  # "pooler": pretrained BERTs only
    assert cifar10_vit.PRESETS == tuple(sorted(VIT_PRESETS))
    assert cifar10_vit.PATCH_SIZES == {name: preset["patch_size"] for name, preset in VIT_PRESETS.items()}
    assert translate.TOKENIZERS == MODEL_TYPES
    assert language_model.PRESETS == tuple(sorted(LANGUAGE_MODEL_PRESETS))
    assert experiments.EXPERIMENT_NAMES == tuple(experiments.EXPERIMENTS)


@pytest.mark.parametrize("recipe", RECIPES)
def test_help_answers_without_tensorflow_start_up_lines(recipe):
    """TensorFlow loads with the recipe (keras_tfm imports Keras), its C++ start-up lines silenced by
    `recipes/__init__.py` even when the environment does not set TF_CPP_MIN_LOG_LEVEL."""
    environment = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-m", f"recipes.{recipe}", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=environment)
    assert result.returncode == 0 and "usage:" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_flag_has_a_help_text(recipe, capsys):
    module = {"reverse_digits": reverse_digits, "cifar10_vit": cifar10_vit, "imdb_classifier": imdb_classifier,
              "translate": translate, "language_model": language_model, "experiments": experiments,
              "pretrain_text": pretrain_text}[recipe]
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
        module.parse_args(MINIMAL_ARGUMENTS.get(recipe, []))
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


def test_a_finished_run_of_another_recipe_is_named_as_such(tmp_path, capsys):
    (tmp_path / "summary.json").write_text('{"recipe": "reverse_digits"}')
    with pytest.raises(SystemExit):
        common.output_directory("cifar10_vit", str(tmp_path))
    assert "holds a finished reverse_digits run (not a cifar10_vit one)" in capsys.readouterr().out


def test_history_and_curves_are_readable(tmp_path):
    (tmp_path / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,2.5\n1,1.0,1.5\n")
    history = common.read_history(str(tmp_path))
    assert history == {"epoch": [0.0, 1.0], "loss": [2.0, 1.0], "val_loss": [2.5, 1.5]}
    path = common.plot_curves(history, str(tmp_path / "curves.png"))
    assert keras.utils.load_img(path).size[0] > 100
    assert [tick.get_text() for tick in common.curves_figure(history).axes[0].get_xticklabels()] == ["1", "2"]


def test_curves_of_a_run_in_parts_count_epochs_not_parts():
    # imdb_classifier --parts-per-epoch 4, one epoch: four rows, each a quarter of the epoch (as the explorer says).
    history = {"epoch": [0.0, 1.0, 2.0, 3.0], "loss": [0.6, 0.4, 0.3, 0.25]}
    axis = common.curves_figure(history, parts_per_epoch=4).axes[0]
    assert [tick.get_text() for tick in axis.get_xticklabels()] == ["0.25", "0.5", "0.75", "1"]
    assert axis.get_xlabel() == "epoch"


def test_warmup_cosine_schedule():
    schedule = fitting.warmup_cosine(1.0, total_steps=100, warmup_fraction=0.1)
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
        optimizer = fitting.adamw(_args(accumulate_steps=accumulate), total_steps=10**9)  # ~constant rate
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
    assert fitting.optimizer_options(_args()) == {"clipnorm": 1.0, "gradient_accumulation_steps": None}
    assert fitting.optimizer_options(_args(clipnorm=0.0, accumulate_steps=3)) == {
        "clipnorm": None, "gradient_accumulation_steps": 3}


def test_progress_is_a_bar_on_a_terminal_and_one_line_per_epoch_otherwise(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert fitting.fit_verbosity() == 1
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert fitting.fit_verbosity() == 2


@pytest.mark.every_backend  # on JAX it failed until the zero gradients were made with ops.zeros (zeros_like of a
@pytest.mark.parametrize("decay_all", [False, True])  # Keras variable cannot be converted there)
def test_adamw_exempts_what_the_model_names_unless_told_to_decay_everything(decay_all):
    from keras_tfm.models import TextClassifier

    model = TextClassifier.from_preset("tiny", vocab_size=20, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32)
    args = argparse.Namespace(learning_rate=1.0, warmup_fraction=0.0, weight_decay=0.5, clipnorm=0, accumulate_steps=1,
                              decay_all_weights=decay_all)
    optimizer = fitting.adamw(args, total_steps=10, model=model)
    gamma = model.encoder.get_layer("encoder_norm").gamma
    kernel = model.get_layer("head").kernel
    before = keras.ops.convert_to_numpy(gamma).copy(), keras.ops.convert_to_numpy(kernel).copy()
    optimizer.apply_gradients([(keras.ops.zeros(v.shape, v.dtype), v) for v in model.trainable_variables])
    assert np.allclose(keras.ops.convert_to_numpy(kernel), 0.5 * before[1])  # matrices always decay
    np.testing.assert_allclose(keras.ops.convert_to_numpy(gamma), 0.5 * before[0] if decay_all else before[0])


def test_recipes_compile_by_default_and_run_several_steps_per_execution():
    from recipes import reverse_digits

    args = reverse_digits.parse_args([])
    options = fast_paths.compile_options(args)
    backend = keras.backend.backend()
    assert options == {"jit_compile": "auto", "steps_per_execution": 1 if backend == "torch" else 8}
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", **options)
    assert model.jit_compile == (backend == "jax")  # Keras' "auto": jax.jit on JAX, no XLA on a CPU-only TF
    assert fast_paths.compile_options(reverse_digits.parse_args(["--no-jit"]))["jit_compile"] is False
    assert fast_paths.compile_options(reverse_digits.parse_args(["--jit"]))["jit_compile"] is True
    assert fast_paths.compile_options(reverse_digits.parse_args(["--distribute", "mirrored"]))["steps_per_execution"] == 1
    if backend == "torch":
        with pytest.raises(ValueError, match="--steps-per-execution 4.*one step per call"):
            fast_paths.compile_options(reverse_digits.parse_args(["--steps-per-execution", "4"]))


def test_standard_callbacks_never_wait_for_every_step():
    callbacks = fitting.standard_callbacks("unused")
    assert not any(type(c) is keras.callbacks.TerminateOnNaN for c in callbacks)
    assert all(never_waits(callback) for callback in callbacks)


@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_tensorflow_is_kept_off_the_gpus_unless_it_trains(backend, monkeypatch):
    import tensorflow as tf

    hidden = []
    monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    monkeypatch.setattr(tf.config, "set_visible_devices", lambda devices, kind: hidden.append((devices, kind)))
    devices.hide_gpus_from_tensorflow()
    assert hidden == ([] if backend == "tensorflow" else [([], "GPU")])


_IMPORT_ONLY = """
import json
import tensorflow as tf
calls = []
tf.config.set_visible_devices = lambda *args: calls.append(repr(args))
import recipes.common
print(json.dumps(calls))
"""


def test_importing_common_hides_nothing_and_setup_hides_the_gpus(monkeypatch):
    """No device changes as a side effect of an import (on JAX, in a fresh process); `setup` does it, first."""
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run([sys.executable, "-c", _IMPORT_ONLY], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
    from recipes import reverse_digits

    called = []
    monkeypatch.setattr(devices, "hide_gpus_from_tensorflow", lambda: called.append(True))
    common.setup(reverse_digits.parse_args([]))
    assert called == [True]


def test_setup_prints_the_devices_it_trains_on(capsys):
    from recipes import reverse_digits

    common.setup(reverse_digits.parse_args([]))
    out = capsys.readouterr().out
    assert f"{keras.backend.backend()} backend, training on " in out
    assert any(device.split(" ")[0] in out for device in devices.training_devices())


@pytest.mark.every_backend
@pytest.mark.parametrize("bfloat16_speedup, flags", [(5.0, []), (0.8, []), (5.0, ["--jit"])])
def test_without_a_measured_path_bfloat16_is_chosen_by_measuring_products(bfloat16_speedup, flags, monkeypatch,
                                                                          capsys):
    from keras_tfm import hardware
    from recipes import reverse_digits

    measured = []

    def products(dtype, compiled=False, **kwargs):
        measured.append(compiled)
        return 100.0 * (bfloat16_speedup if dtype == "bfloat16" else 1.0)

    monkeypatch.setattr(hardware, "matmul_gflops", products)
    monkeypatch.setattr(hardware, "cpu_kind", lambda: None)  # no table of FAST_PATHS applies
    args = reverse_digits.parse_args(flags)
    assert args.mixed_precision == "auto"
    common.setup(args, "reverse_digits")
    # The products are measured as the step runs them: through XLA with --jit; as Keras' "auto" runs them on a
    # CPU otherwise (jax.jit on JAX: matmul_gflops does that itself).
    rounds = 3 if bfloat16_speedup >= 2 else 1  # bfloat16 is confirmed before it is chosen
    assert measured == [bool(flags)] * 2 * rounds and args.jit == (True if flags else "auto")
    chosen = "mixed_bfloat16" if bfloat16_speedup >= 2 else "float32"
    assert keras.config.dtype_policy().name == chosen
    assert args.mixed_precision == ("bfloat16" if bfloat16_speedup >= 2 else None)  # what summary.json records
    out = capsys.readouterr().out
    assert f"{chosen}, jit_compile={args.jit!r}: {chosen}: bfloat16 products {bfloat16_speedup:.1f}x as fast" in out


@pytest.mark.every_backend
@pytest.mark.parametrize("kind, recipe", [(kind, recipe) for kind in sorted(fast_paths.FAST_PATHS)
                                          for recipe in sorted(fast_paths.FAST_PATHS[kind])])
def test_on_a_measured_kind_of_cpu_each_recipe_takes_the_fast_path_measured_there(kind, recipe, monkeypatch, capsys):
    from keras_tfm import hardware
    from recipes import reverse_digits

    monkeypatch.setattr(hardware, "cpu_kind", lambda: kind)
    monkeypatch.setattr(devices, "on_gpu", lambda: False)
    monkeypatch.setattr(hardware, "matmul_gflops", lambda *a, **k: pytest.fail("measured, not looked up"))
    backend = keras.backend.backend()
    policy, jit, _ = fast_paths.FAST_PATHS[kind][recipe][backend]
    args = reverse_digits.parse_args([])
    common.setup(args, recipe)
    assert keras.config.dtype_policy().name == policy and args.jit is jit
    assert (f"{policy}, jit_compile={jit!r}: the fastest path measured for this model on {backend} with "
            f"{fast_paths.KINDS_IN_WORDS[kind]} (benchmarks/fast_path.py)") in capsys.readouterr().out
    # Under a tf.distribute strategy the table does not apply (it was measured on one device).
    assert fast_paths.measured_fast_path(recipe, backend, "mirrored") is None


@pytest.mark.every_backend
def test_a_quick_run_trains_its_tiny_model_on_keras_defaults_not_the_measured_path(monkeypatch, capsys):
    from keras_tfm import hardware
    from recipes import reverse_digits

    # A table in which the measured path differs from Keras' defaults on every backend, and another backend is
    # faster: none of it is about a --quick run's tiny model.
    monkeypatch.setattr(hardware, "cpu_kind", lambda: "avx2")
    monkeypatch.setattr(devices, "on_gpu", lambda: False)
    monkeypatch.setattr(fast_paths, "FAST_PATHS", {"avx2": {"r": {"tensorflow": ("float32", True, 10.0),
                                                                  "jax": ("float32", False, 10.0),
                                                                  "torch": ("float32", True, 10.0),
                                                                  "other": ("float32", False, 99.0)}}})
    monkeypatch.setattr(hardware, "matmul_gflops", lambda dtype, **kwargs: 1.0 if dtype == "bfloat16" else 50.0)
    args = reverse_digits.parse_args(["--quick"])
    common.setup(args, "r")
    out = capsys.readouterr().out
    assert args.jit == "auto" and keras.config.dtype_policy().name == "float32"
    assert "float32, jit_compile='auto': float32: bfloat16 products 0.0x as fast" in out
    assert "the fastest path measured" not in out and "KERAS_BACKEND=" not in out
    args = reverse_digits.parse_args([])  # the recipe's own model: the table, and the faster backend named
    common.setup(args, "r")
    assert args.jit is fast_paths.FAST_PATHS["avx2"]["r"][keras.backend.backend()][1]
    assert "note: KERAS_BACKEND=other trains this model 9.9x as fast" in capsys.readouterr().out


@pytest.mark.every_backend
@pytest.mark.parametrize("flags, policy, jit", [(["--mixed-precision", "off", "--no-jit"], "float32", False),
                                                (["--mixed-precision", "bfloat16", "--jit"], "mixed_bfloat16", True),
                                                (["--mixed-precision"], "mixed_float16", "auto")])
def test_setup_keeps_what_the_flags_ask_for(flags, policy, jit, monkeypatch):
    from keras_tfm import hardware
    from recipes import reverse_digits

    monkeypatch.setattr(hardware, "matmul_gflops", lambda dtype, **kwargs: 500.0 if dtype == "bfloat16" else 1.0)
    monkeypatch.setattr(hardware, "cpu_kind", lambda: None)
    args = reverse_digits.parse_args(flags)
    common.setup(args, "translate")
    assert keras.config.dtype_policy().name == policy and args.jit == jit


@pytest.mark.every_backend
def test_a_faster_backend_is_named_at_the_start_never_switched_to(monkeypatch):
    from keras_tfm import hardware

    monkeypatch.setattr(hardware, "cpu_kind", lambda: "avx512_bf16")
    monkeypatch.setattr(devices, "on_gpu", lambda: False)
    monkeypatch.setattr(fast_paths, "FAST_PATHS", {"avx512_bf16": {"r": {"tensorflow": ("mixed_bfloat16", False, 10.0),
                                                                     "jax": ("float32", True, 10.5),
                                                                     "torch": ("mixed_bfloat16", False, 16.0)}},
                                               "amx_bf16": {"r": {"tensorflow": ("mixed_bfloat16", False, 30.0),
                                                                  "jax": ("float32", True, 10.0),
                                                                  "torch": ("mixed_bfloat16", False, 20.0)}}})
    hint = fast_paths.faster_backend_hint("r", "tensorflow")
    assert hint.startswith("note: KERAS_BACKEND=torch trains this model 1.6x as fast as tensorflow does")
    assert hint.endswith("this run stays on tensorflow, as set")
    assert fast_paths.faster_backend_hint("r", "jax").startswith("note: KERAS_BACKEND=torch trains this model 1.5x")
    assert fast_paths.faster_backend_hint("r", "torch") is None  # the fastest already
    assert fast_paths.faster_backend_hint("other", "tensorflow") is None  # not measured
    # Where the table does not apply: a --quick run's tiny model, and a tf.distribute strategy, which no other
    # backend runs (the advice would be to leave the strategy behind).
    assert fast_paths.faster_backend_hint("r", "tensorflow", quick=True) is None
    for strategy in ("mirrored", "multiworker"):
        assert fast_paths.faster_backend_hint("r", "tensorflow", strategy) is None
    assert fast_paths.faster_backend_hint("r", "jax", "data_parallel").startswith("note: KERAS_BACKEND=torch")
    monkeypatch.setattr(hardware, "cpu_kind", lambda: "amx_bf16")  # that CPU's own table: TensorFlow is fastest
    assert fast_paths.faster_backend_hint("r", "tensorflow") is None
    assert fast_paths.faster_backend_hint("r", "jax").startswith("note: KERAS_BACKEND=tensorflow trains this model 3.0x")
    monkeypatch.setattr(hardware, "cpu_kind", lambda: None)  # a CPU of no measured kind: nothing applies
    assert fast_paths.faster_backend_hint("r", "jax") is None


def test_the_measured_fast_paths_name_the_benchmarks_setups():
    fast_path = load_script("benchmarks/fast_path.py")
    assert set(fast_paths.FAST_PATHS) == set(fast_paths.KINDS_IN_WORDS) == {"amx_bf16", "avx512_bf16", "avx2"}
    for table in fast_paths.FAST_PATHS.values():
        assert set(table) == {recipe for recipe, _, _ in fast_path.SETUPS.values()}
        for paths in table.values():
            assert set(paths) == {"tensorflow", "jax", "torch"}
            assert all(policy in ("float32", "mixed_bfloat16") and jit in (True, False) and speed > 0
                       for policy, jit, speed in paths.values())


def test_the_progress_line_counts_the_epochs_a_time_budget_planned(tmp_path, capsys):
    from keras_tfm.callbacks import TimeBudget
    from tests.callbacks.test_time_budget import FakeClock

    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    clock = FakeClock([1.0])  # 4 s an epoch of 4 batches: 2 minutes hold 30 epochs
    budget = TimeBudget(2, clock=clock, verbose=False)
    callbacks = [clock.callback(), budget] + fitting.standard_callbacks(str(tmp_path))
    history = model.fit(x, x[:, :1], batch_size=8, epochs=100, callbacks=callbacks, verbose=2)
    assert len(history.epoch) == budget.planned_epochs == 30
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Epoch ")]
    assert lines[0] == "Epoch 1/100"  # before the plan: fit's upper bound
    assert lines[1:] == [f"Epoch {epoch}/30" for epoch in range(2, 31)]


def test_scoring_compiles_with_xla_for_float32_on_tensorflow_unless_no_jit_was_asked():
    def model():
        inputs = keras.Input((4,))
        built = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        built.compile(jit_compile=False)
        return built

    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    scored = model()
    graph = scored.predict(x, verbose=0)
    if keras.backend.backend() != "tensorflow":
        assert not fitting.compile_for_scoring(scored) and not scored.jit_compile
        return
    assert not fitting.compile_for_scoring(scored, jit=False) and not scored.jit_compile  # --no-jit is kept
    assert fitting.compile_for_scoring(scored) and scored.jit_compile
    assert scored.predict_function is None  # the graph's function is made again, with XLA
    np.testing.assert_allclose(scored.predict(x, verbose=0), graph, atol=1e-5)
    assert not fitting.compile_for_scoring(scored)  # already compiled: nothing to switch
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        assert not fitting.compile_for_scoring(model())  # bf16 keeps the graph it trained with
    finally:
        keras.config.set_dtype_policy("float32")
