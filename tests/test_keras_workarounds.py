"""`keras_tfm._keras_workarounds`: each workaround does its job, Keras still needs it (a test per entry that fails
once Keras changes, so the entry can go), and no other module of keras_tfm uses a Keras private name.

CI runs this file on every backend; each test applies to the backend its workaround is for."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tfm import _keras_workarounds
from keras_tfm.models import TextClassifier

ROOT = pathlib.Path(__file__).resolve().parents[1]
BACKEND = keras.backend.backend()
on_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="the workaround is TensorFlow's")
on_jax = pytest.mark.skipif(BACKEND != "jax", reason="the workaround is JAX's")
on_torch = pytest.mark.skipif(BACKEND != "torch", reason="the one-call clipping is PyTorch's")


def tiny_classifier():
    keras.utils.set_random_seed(3)
    return TextClassifier.from_preset("tiny", vocab_size=50, max_length=12, num_classes=3, dropout=0.0)


# --- no Keras private name anywhere else --------------------------------------------------------------------------

# Private names of keras_tfm's own that Keras' source also uses somewhere, each on a class of ours whose Keras base
# class does not have it (checked below), or on something that is not Keras' at all.
OUR_OWN = {
    "_dropout": keras.layers.Layer,  # the blocks' dropout layer (layers/_block.py)
    "_path": keras.callbacks.Callback,  # CheckpointAverage's file of an epoch
    "_encode": None,  # PretrainedTokenizer (not a Keras class)
    "_layout": None,  # the explorer's page (not a Keras class)
    "_start": None,  # the explorer's page
    "_replace": None,  # NamedTuple's own
    "_size": None,  # recipes/runs.py: a byte count in words
    "_run": None,  # tests/test_imports.py: runs code in a fresh interpreter
}


# Where the guard looks: everything in the repository but this file, which tests the workarounds themselves.
GUARDED = ("keras_tfm", "recipes", "benchmarks", "tests")
THIS_FILE = "tests/test_keras_workarounds.py"
# `vars()` of these names is of an argparse namespace (a recipe's or benchmark's flags), not of a Keras object.
FLAG_NAMESPACES = {"args", "settings"}


def _private(name):
    # torch._foreach_*: PyTorch's names, which Keras' PyTorch backend uses too
    return name.startswith("_") and not name.startswith("__") and not name.startswith("_foreach")


def _sources(roots):
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative != THIS_FILE:
                yield relative, ast.parse(path.read_text(encoding="utf-8"))


def _private_names(trees):
    """{name: ["file:line", ...]} of every `x._name`, `def _name` and `getattr/setattr/hasattr/delattr(x, "_name")`
    in `trees` ((file, AST) pairs; not dunders)."""
    found = {}
    for relative, tree in trees:
        for node in ast.walk(tree):
            names = [node.attr] if isinstance(node, ast.Attribute) else [node.name] if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                names.append(node.args[1].value)
            for name in names:
                if _private(name):
                    found.setdefault(name, []).append(f"{relative}:{node.lineno}")
    return found


def _other_private_access(trees):
    """`keras.src` (imported or reached as an attribute) and `vars(x)` on anything but a flags namespace."""
    found = []
    for relative, tree in trees:
        for node in ast.walk(tree):
            imported = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "keras.src" or name.startswith("keras.src.") for name in imported):
                found.append(f"{relative}:{node.lineno}: imports keras.src")
            if isinstance(node, ast.Attribute) and node.attr == "src" and isinstance(node.value, ast.Name) \
                    and node.value.id == "keras":
                found.append(f"{relative}:{node.lineno}: keras.src")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and not (
                    len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in FLAG_NAMESPACES):
                found.append(f"{relative}:{node.lineno}: vars()")
    return found


@pytest.mark.tensorflow_only(reason="reads the source: no backend code")
def test_no_module_but_the_workarounds_uses_a_keras_private_name():
    keras_names = _private_names(_keras_sources())
    trees = list(_sources(GUARDED))  # parsed once, read by both scans
    ours = _private_names(trees)
    workarounds = "keras_tfm/_keras_workarounds.py:"
    used = {name: [where for where in places if not where.startswith(workarounds)]
            for name, places in ours.items() if name in keras_names and name not in OUR_OWN}
    assert {name: places for name, places in used.items() if places} == {}
    # What the workarounds module uses is what its docstring lists.
    assert {name for name, places in ours.items() if name in keras_names and name not in OUR_OWN} == {
        "_jax_state", "_jax_state_synced", "_clip_gradients", "_variables", "_initial_epoch", "_flatten_layers"}
    assert [where for where in _other_private_access(trees) if not where.startswith(workarounds)] == []


def _keras_sources():
    root = pathlib.Path(keras.__file__).parent
    for path in sorted((root / "src").rglob("*.py")):
        yield str(path.relative_to(root)), ast.parse(path.read_text(encoding="utf-8"))


@pytest.mark.tensorflow_only(reason="reads source written here: no backend code")
def test_the_guard_sees_each_kind_of_private_access():
    tree = ast.parse("import keras.src.backend\nfrom keras.src import ops\nkeras.src.backend.core\n"
                     "vars(layer)\nvars(args)\ngetattr(model, '_jax_state', None)\nmodel._layers\n")
    assert sorted(_other_private_access([("x.py", tree)])) == [
        "x.py:1: imports keras.src", "x.py:2: imports keras.src", "x.py:3: keras.src", "x.py:4: vars()"]
    assert _private_names([("x.py", tree)]) == {"_jax_state": ["x.py:6"], "_layers": ["x.py:7"]}


@pytest.mark.tensorflow_only(reason="reads the source and Keras' classes: no backend code")
def test_our_own_private_names_are_not_attributes_of_the_keras_classes_they_live_on():
    for name, keras_class in OUR_OWN.items():
        if keras_class is not None:
            instance = keras_class() if keras_class is not keras.layers.Layer else keras.layers.Layer(name="probe")
            assert not hasattr(instance, name) and not hasattr(keras_class, name), (keras_class, name)


# --- 1. TensorFlow: the optimizer built before the step is traced -------------------------------------------------

class CountingModel(keras.Model):
    """A plain Keras model that counts how often its training step is traced (Python runs once per trace)."""

    def __init__(self):
        inputs = keras.Input((3,))
        super().__init__(inputs, keras.layers.Dense(2)(inputs))
        self.traces = 0

    def train_step(self, data):
        self.traces += 1
        return super().train_step(data)


@on_tensorflow
@pytest.mark.parametrize("workaround", [False, True])
def test_keras_still_traces_the_first_step_twice_without_it(workaround):
    """Fails once Keras builds the optimizer before tracing on TensorFlow: then the entry can go."""
    model = CountingModel()
    model.compile(optimizer="adam", loss="mse")
    if workaround:
        _keras_workarounds.build_optimizer_before_tracing(model)
        assert model.optimizer.built
    model.fit(np.ones((4, 3)), np.ones((4, 2)), epochs=2, batch_size=2, verbose=0)
    assert model.traces == (1 if workaround else 2)


@on_tensorflow
def test_a_model_made_under_a_strategy_is_left_to_keras():
    import tensorflow as tf

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = CountingModel()
        model.compile(optimizer="adam", loss="mse")
    _keras_workarounds.build_optimizer_before_tracing(model)  # outside the scope, as a user calls fit
    assert not model.optimizer.built
    model.fit(np.ones((4, 3)), np.ones((4, 2)), batch_size=2, verbose=0)  # Keras builds it, under its strategy
    assert model.optimizer.built


@on_tensorflow
def test_the_ready_models_fit_calls_it(monkeypatch):
    calls = []
    workaround = _keras_workarounds.build_optimizer_before_tracing

    def recording(model):
        workaround(model)
        calls.append(model.optimizer.built)

    monkeypatch.setattr(_keras_workarounds, "build_optimizer_before_tracing", recording)
    model = tiny_classifier()
    model.compile_for_training()
    model.fit(np.ones((4, 12), "int32"), np.array([0, 1, 0, 1]), epochs=1, batch_size=2, verbose=0)
    assert calls == [True]  # called once, by fit, and the optimizer was built by it


# Keras itself imports TensorFlow during `fit` (its data adapters use tf.data), so what is checked is our part.
_SCRIPT = """
import json, sys
import keras_tfm.models
print(json.dumps(sorted(name for name in ("tensorflow", "torch") if name in sys.modules)))
"""


@pytest.mark.skipif(BACKEND != "jax", reason="one backend without TensorFlow nor PyTorch is enough")
def test_the_workarounds_import_no_other_backend():
    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "KERAS_BACKEND": BACKEND})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


# --- 2. JAX: the weights kept after an error in evaluate or predict -----------------------------------------------

def _failing_batches(bad_at):
    for i in range(4):
        if i == bad_at:
            raise ValueError("a bad batch")
        yield np.ones((2, 3), "float32"), np.ones((2, 2), "float32")


@on_jax
@pytest.mark.parametrize("keeper", [False, True])
@pytest.mark.parametrize("loop", ["evaluate", "predict"])
def test_keras_jax_still_loses_the_weights_after_an_error_without_it(loop, keeper):
    """Fails once Keras' JAX `evaluate` and `predict` put the weights back after an error, as its `fit` does."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    before = model.predict(np.ones((1, 3)), verbose=0)
    callbacks = [_keras_workarounds.JaxStateKeeper()] if keeper else []
    with pytest.raises(ValueError, match="a bad batch"):
        if loop == "evaluate":
            model.evaluate(_failing_batches(2), callbacks=callbacks, verbose=0)
        else:
            model.predict(((x,) for x, _ in _failing_batches(2)), callbacks=callbacks, verbose=0)
    if keeper:
        model.jax_state_sync()
        np.testing.assert_array_equal(model.predict(np.ones((1, 3)), verbose=0), before)
    else:
        with pytest.raises(TypeError):  # the variables hold no values: "'NoneType' object is not callable"
            model.predict(np.ones((1, 3)), verbose=0)


# --- 3. PyTorch: clipnorm in one call -----------------------------------------------------------------------------

def gradients():
    """Gradients of every kind of size: above the norm, inside it, exactly zero, missing (None), a matrix."""
    import torch

    rng = np.random.default_rng(0)
    return [torch.tensor(rng.normal(size=(7, 5)) * 3, dtype=torch.float32),
            torch.tensor(rng.normal(size=(4,)) * 0.01, dtype=torch.float32),
            torch.zeros(3), None, torch.tensor([0.6, 0.8], dtype=torch.float32) * 1.0000001]


def _torch_calls(function):
    """How many PyTorch functions `function()` calls."""
    import torch

    class Counting(torch.overrides.TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        function()
    return Counting.calls


@on_torch
def test_keras_clipnorm_still_takes_several_calls_per_gradient():
    """Fails once Keras clips the whole list at once: then the entry can go."""
    import torch

    optimizer = keras.optimizers.AdamW(1e-3, clipnorm=1.0)
    grads = [torch.ones(4) * i for i in range(1, 41)]
    keras_calls = _torch_calls(lambda: keras.optimizers.Optimizer._clip_gradients(optimizer, grads))
    our_calls = _torch_calls(lambda: _keras_workarounds._clip_each_gradient_by_norm(optimizer, grads))
    assert keras_calls >= 3 * len(grads) and our_calls <= 10, (keras_calls, our_calls)


@on_torch
@pytest.mark.parametrize("clipnorm", [1.0, 0.25])
def test_equals_keras_own_clipnorm_and_leaves_the_gradients_as_they_were(clipnorm):
    optimizer = keras.optimizers.AdamW(1e-3, clipnorm=clipnorm)
    grads = gradients()
    before = [None if g is None else g.clone() for g in grads]
    ours = _keras_workarounds._clip_each_gradient_by_norm(optimizer, grads)
    theirs = keras.optimizers.Optimizer._clip_gradients(optimizer, grads)
    assert [g is None for g in ours] == [g is None for g in theirs] == [False, False, False, True, False]
    for mine, keras_one in zip(ours, theirs):
        if mine is not None:
            np.testing.assert_allclose(mine.numpy(), keras_one.numpy(), rtol=1e-6, atol=1e-9)
            assert np.linalg.norm(mine.numpy()) <= clipnorm * (1 + 1e-6)
    for g, original in zip(grads, before):  # the inputs are not clipped in place
        if g is not None:
            np.testing.assert_array_equal(g.numpy(), original.numpy())


@on_torch
def test_other_kinds_of_clipping_are_keras_own():
    for options in ({"global_clipnorm": 1.0}, {"clipvalue": 0.5}, {}):
        optimizer = keras.optimizers.Adam(1e-3, **options)
        grads = gradients()
        ours = _keras_workarounds._clip_each_gradient_by_norm(optimizer, grads)
        theirs = keras.optimizers.Optimizer._clip_gradients(optimizer, grads)
        for mine, keras_one in zip(ours, theirs):
            if mine is not None:
                np.testing.assert_allclose(mine.numpy(), keras_one.numpy(), rtol=1e-6, atol=1e-9)


@on_torch
def test_the_training_function_gives_it_and_training_matches_keras_clipping():
    """Two identical models, three steps (the first builds the optimizer) with gradients above the norm: one
    clips in one call, the other with Keras' per-weight code (the instance attribute removed); their weights stay
    equal to float32 rounding."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(1, 50, (8, 12)).astype("int32"), rng.integers(0, 3, 8)
    models = []
    for fused in (True, False):
        model = tiny_classifier()
        model.compile_for_training(optimizer=keras.optimizers.SGD(0.5, clipnorm=0.01))
        model.train_on_batch(x, y)
        assert "_clip_gradients" in vars(model.optimizer)
        if not fused:
            del model.optimizer._clip_gradients
            model.make_train_function = lambda force=False: keras.Model.make_train_function(model, force)
        for _ in range(2):
            model.train_on_batch(x, y)
        models.append(model)
    start = tiny_classifier().get_weights()
    moved = 0
    for fused, plain, first in zip(models[0].get_weights(), models[1].get_weights(), start):
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-7)
        moved += not np.allclose(fused, first)
    assert "_clip_gradients" not in vars(models[1].optimizer)
    assert moved > 5  # the steps did change the weights, by at most 0.5 x 0.01 per weight and step


@on_torch
def test_only_optimizers_that_use_keras_clipping_get_it_and_loss_scaling_passes_it_inside():
    class OwnClipping(keras.optimizers.Adam):
        def _clip_gradients(self, grads):
            return grads

    model = tiny_classifier()
    model.compile(optimizer=OwnClipping(clipnorm=1.0), loss="sparse_categorical_crossentropy")
    model.make_train_function()
    assert "_clip_gradients" not in vars(model.optimizer)  # its own method stays

    keras.config.set_dtype_policy("mixed_float16")
    model = tiny_classifier()
    model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0))
    model.fit(np.ones((2, 12), "int32"), np.array([0, 1]), verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert "_clip_gradients" in vars(model.optimizer.inner_optimizer)


@on_torch
def test_a_keras_file_round_trip_keeps_it(tmp_path):
    model = tiny_classifier()
    model.compile_for_training()
    model.train_on_batch(np.ones((2, 12), "int32"), np.array([0, 1]))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")  # compiled again, by Keras, on loading
    for saved, kept in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(saved), keras.ops.convert_to_numpy(kept))
    loaded.train_on_batch(np.ones((2, 12), "int32"), np.array([0, 1]))  # training goes on
    assert "_clip_gradients" in vars(loaded.optimizer) and loaded.optimizer.clipnorm == 1.0


# --- 4. every backend: step variables an optimizer neither saves nor loads -----------------------------------------

def test_step_variables_are_left_out_of_saving_and_loading_and_removed_keeping_the_others_in_order():
    optimizer = keras.optimizers.Adam()
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    before = list(optimizer.variables)
    added = _keras_workarounds.add_step_variables(optimizer, ["extra_0", "extra_1", "extra_2"])
    assert [id(v) for v in optimizer.variables] == [id(v) for v in before + added]
    added[0].assign(5.0)
    store = {}
    optimizer.save_own_variables(store)
    assert len(store) == len(before)  # the step variables are not saved...
    assert len(optimizer.variables) == len(before) + 3  # ...and are still there afterwards, in their place
    store["0"] = np.array(7, "int64")  # the iteration count
    optimizer.load_own_variables(store)  # loads: the counts agree
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 7
    assert float(keras.ops.convert_to_numpy(added[0])) == 5.0
    _keras_workarounds.remove_step_variables(optimizer, added[:2])
    assert [id(v) for v in optimizer.variables] == [id(v) for v in before] + [id(added[2])]
    assert not hasattr(optimizer.save_own_variables, "__func__")  # one step variable is left: still set

    _keras_workarounds.remove_step_variables(optimizer, added[2:])
    assert optimizer.save_own_variables.__func__ is type(optimizer).save_own_variables
    assert optimizer.load_own_variables.__func__ is type(optimizer).load_own_variables


def test_keras_optimizers_still_save_every_variable_they_have():
    """Fails once Keras leaves some of an optimizer's variables out of what it saves (then use that way)."""
    optimizer = keras.optimizers.Adam()
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    optimizer.add_variable((), initializer="zeros", dtype="float32", name="extra")
    store = {}
    optimizer.save_own_variables(store)
    assert len(store) == len(optimizer.variables)


def test_keras_optimizers_still_have_no_public_way_to_remove_a_variable():
    """Fails once Keras gives one (a public name with "remove", "untrack" or "delete"): then use it instead."""
    public = [name for name in dir(keras.optimizers.Adam()) if not name.startswith("_")]
    assert [name for name in public if any(word in name for word in ("remove", "untrack", "delete"))] == []


# --- 5. every backend: a callback makes fit start at a later epoch -------------------------------------------------

def test_fit_still_starts_where_a_callback_says_at_train_begin():
    """Fails once Keras stops reading `model._initial_epoch` after on_train_begin (then BackupAndRestore breaks)."""

    class StartAtTwo(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            _keras_workarounds.resume_fit_at_epoch(self.model, 2)

        def on_epoch_begin(self, epoch, logs=None):
            seen.append(epoch)

    seen = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=4, verbose=0, callbacks=[StartAtTwo()])
    assert seen == [2, 3]


# --- 6. every backend: the gradients as the optimizer receives them ------------------------------------------------

def test_keras_steps_still_give_the_gradients_to_the_optimizers_apply_on_the_instance():
    """Fails once a Keras step stops calling `optimizer.apply` through the instance (GradientNormCallback would
    then log nothing)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    model.compile(keras.optimizers.SGD(0.0), "mean_squared_error")
    model.optimizer.build(model.trainable_variables)
    seen = model.optimizer.add_variable((), initializer="zeros", dtype="float32", name="seen")
    _keras_workarounds.watch_gradients(model.optimizer, lambda grads, variables: seen.assign_add(
        keras.ops.sum(keras.ops.cast(grads[0], "float32"))))
    # x = (1, 2), target 0, w = (1, 1): the gradient of (w·x)² is 2(w·x)x = (6, 12) at each of the 3 steps
    model.fit(np.array([[1.0, 2.0]] * 3, "float32"), np.zeros((3, 1), "float32"), batch_size=1, verbose=0)
    assert float(keras.ops.convert_to_numpy(seen)) == pytest.approx(3 * 18.0)
    _keras_workarounds.unwatch_gradients(model.optimizer)
    assert model.optimizer.apply.__func__ is type(model.optimizer).apply


# --- 7. every backend: the layers a layer holds --------------------------------------------------------------------

def test_sublayers_are_every_layer_held_under_any_attribute_and_a_layer_still_has_no_public_list():
    """Fails once a Keras layer has a public `layers` (then `iter_layers` reads that)."""

    class Holder(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.first = keras.layers.Dense(1)
            self._hidden = keras.layers.Dense(2)
            self.stack = [keras.layers.Dense(3)]
            self.table = {"a": keras.layers.Dense(4)}
            self.count = 5

    holder = Holder()
    assert [layer.units for layer in _keras_workarounds.sublayers(holder)] == [1, 2, 3, 4]
    assert not hasattr(holder, "layers")
