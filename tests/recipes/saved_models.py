"""Checks that a recipe's `model.keras` loads where only `keras_tfm` is installed, and predicts as it did in training.

A loader runs in its own interpreter: outside the repository, with only a link to this checkout's `keras_tfm` on
its path and `sys.modules["recipes"] = None`, so that `import recipes` fails whatever the environment holds. It
imports TensorFlow once and then answers one request per model (a line of JSON in, a line out): load it with
`keras_tfm.load_model` (optimizer and schedule included), run it on the inputs the trained model was given, and
write the outputs. The recipe tests reuse the models their quick runs train (`KeepModel`), so the check adds
no training, only one interpreter per test process (the `loads_without_recipes` fixture, tests/recipes/conftest.py).
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LOADER = textwrap.dedent("""
    import json, sys
    sys.modules["recipes"] = None  # `import recipes` raises ImportError, whatever the environment holds
    import numpy as np
    import keras
    import keras_tfm

    try:
        import recipes.common
    except ImportError:
        pass
    else:
        raise SystemExit("recipes is importable: the check would prove nothing")
    print(json.dumps({"keras_tfm": keras_tfm.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            model = keras_tfm.load_model(request["model"])  # compiled: the optimizer and its schedule too
            saved = np.load(request["probe"])
            flat = [saved[f"input_{i}"] for i in range(request["inputs"])]
            outputs = model(keras.tree.pack_sequence_as(model.input, flat), training=False)
            outputs = [np.asarray(keras.ops.convert_to_numpy(x)) for x in keras.tree.flatten(outputs)]
            np.savez(request["outputs"], *outputs)
            np.savez(request["weights"], *[np.asarray(keras.ops.convert_to_numpy(w)) for w in model.weights])
            schedule = getattr(model.optimizer, "_learning_rate", None)
            answer = {"optimizer": type(model.optimizer).__name__ if model.optimizer else None,
                      "schedule": type(schedule).__name__}
        except Exception as error:  # reported to the test, which fails with it
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)
""")


class KeepModel(keras.callbacks.Callback):
    """Keeps the model `fit` trained (`trained`): the one a recipe then saves as `model.keras`."""

    def on_train_end(self, logs=None):
        self.trained = self.model


def probe_inputs(model, seed=0):
    """Two examples for the model's inputs, in their structure (`model.input`: a tensor, a list or a dict): token
    ids 1..5 (valid in every vocabulary the tests make; a padding mask of ones and others), pixel values for float
    inputs. A length the model leaves open is 8, or its `max_length` if shorter."""
    rng = np.random.default_rng(seed)
    length = min(8, getattr(model, "max_length", 8))

    def example(tensor):
        shape = [2] + [length if size is None else size for size in tensor.shape[1:]]
        if "int" in str(tensor.dtype) or "bool" in str(tensor.dtype):
            return rng.integers(1, 6, shape).astype(tensor.dtype)
        return rng.uniform(0, 255, shape).astype(tensor.dtype)

    return keras.tree.map_structure(example, model.input)


def outputs_of(model, inputs):
    """The model's outputs on `inputs`, as a flat list of NumPy arrays."""
    return [np.asarray(keras.ops.convert_to_numpy(x)) for x in keras.tree.flatten(model(inputs, training=False))]


class Loader:
    """The loader interpreter (started on first use; `close` ends it)."""

    def __init__(self, folder):
        self.folder = folder
        self.process = None
        self.requests = 0

    def _start(self):
        site, elsewhere = os.path.join(self.folder, "site"), os.path.join(self.folder, "elsewhere")
        os.makedirs(site)
        os.makedirs(elsewhere)
        os.symlink(os.path.join(ROOT, "keras_tfm"), os.path.join(site, "keras_tfm"))
        environment = {**os.environ, "PYTHONPATH": site, "TF_CPP_MIN_LOG_LEVEL": "3"}
        environment.pop("PYTHONSTARTUP", None)
        self.process = subprocess.Popen([sys.executable, "-c", LOADER], cwd=elsewhere, env=environment, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        started = self._answer()
        assert started.get("keras_tfm") == os.path.join(site, "keras_tfm", "__init__.py"), started

    def _answer(self):
        line = self.process.stdout.readline()
        assert line, f"the loader stopped (exit status {self.process.poll()})"
        return json.loads(line)

    def check(self, model_path, trained, atol=None):
        """Loads `model_path` without the recipes and asserts that its weights are the trained model's, exactly,
        and that it predicts what `trained` predicts.

        Args:
            model_path: the `.keras` file a recipe saved.
            trained: the model the recipe trained and saved (`KeepModel.trained`).
            atol: the largest difference allowed between the two models' outputs; by default 1e-5, or 0.05 for a
                model that computes in bfloat16 (8 significant bits: another process may add up a product in
                another order, with other roundings, layer after layer).

        Returns:
            What the loader found: {"optimizer": class name, "schedule": its learning-rate schedule's class name}.
        """
        if self.process is None:
            self._start()
        self.requests += 1
        inputs = probe_inputs(trained)
        expected = outputs_of(trained, inputs)
        flat = keras.tree.flatten(inputs)
        probe = os.path.join(self.folder, f"probe_{self.requests}.npz")
        outputs = os.path.join(self.folder, f"outputs_{self.requests}.npz")
        weights = os.path.join(self.folder, f"weights_{self.requests}.npz")
        np.savez(probe, **{f"input_{i}": x for i, x in enumerate(flat)})
        self.process.stdin.write(json.dumps({"model": os.fspath(model_path), "probe": probe, "inputs": len(flat),
                                             "outputs": outputs, "weights": weights}) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        assert "error" not in answer, f"{model_path} does not load without the recipes: {answer['error']}"
        with np.load(outputs) as loaded:
            found = [loaded[f"arr_{i}"] for i in range(len(loaded.files))]
        with np.load(weights) as loaded:
            loaded_weights = [loaded[f"arr_{i}"] for i in range(len(loaded.files))]
        trained_weights = [np.asarray(keras.ops.convert_to_numpy(w)) for w in trained.weights]
        assert len(loaded_weights) == len(trained_weights)
        for got, want in zip(loaded_weights, trained_weights):
            np.testing.assert_array_equal(got, want)  # the file holds exactly what was trained
        if atol is None:
            atol = 0.05 if trained.dtype_policy.compute_dtype == "bfloat16" else 1e-5
        assert [x.shape for x in found] == [x.shape for x in expected]
        for got, want in zip(found, expected):
            np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)
        return answer

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)
