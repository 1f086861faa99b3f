"""The TensorFlow workaround of `fit` (`keras_tfm.models._tf_workarounds`: build the optimizer before Keras traces
the step, else `tf.function` traces the whole step twice) runs on TensorFlow only, and the other backends never
import it. Its effect is tested in test_model_contract.py (`test_fit_traces_the_training_step_once`)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tfm.models import TextClassifier, _base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
on_tensorflow = keras.backend.backend() == "tensorflow"

# Keras itself imports TensorFlow during `fit` (its data adapters use tf.data), so what is checked is our part:
# importing keras_tfm.models does not import TensorFlow, and `fit` never imports the workaround.
_SCRIPT = """
import json, sys
import numpy as np
import keras_tfm.models as models
imported = "tensorflow" in sys.modules
model = models.TextClassifier(vocab_size=20, max_length=8, dim=8, depth=1, num_heads=2, mlp_dim=8)
model.compile_for_training()
model.fit(np.ones((4, 8), "int32"), np.array([0, 1, 0, 1]), epochs=1, batch_size=2, verbose=0)
print(json.dumps({"tensorflow_at_import": imported,
                  "workaround_imported": "keras_tfm.models._tf_workarounds" in sys.modules}))
"""


def _tiny_classifier():
    model = TextClassifier(vocab_size=20, max_length=8, dim=8, depth=1, num_heads=2, mlp_dim=8)
    model.compile_for_training()
    return model, np.ones((4, 8), "int32"), np.array([0, 1, 0, 1])


@pytest.mark.skipif(on_tensorflow, reason="checks a backend other than TensorFlow")
def test_other_backends_do_not_import_tensorflow_for_the_models_nor_the_workaround():
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"tensorflow_at_import": False, "workaround_imported": False}


@pytest.mark.skipif(on_tensorflow, reason="checks a backend other than TensorFlow")
def test_other_backends_fit_without_the_workaround():
    assert _base._tf_workarounds is None
    model, x, y = _tiny_classifier()
    model.fit(x, y, epochs=1, batch_size=2, verbose=0)
    assert "keras_tfm.models._tf_workarounds" not in sys.modules


@pytest.mark.tensorflow_only
def test_on_tensorflow_fit_builds_the_optimizer_before_the_step_is_traced(monkeypatch):
    calls = []
    workaround = _base._tf_workarounds.build_optimizer_before_tracing

    def recording(model):
        workaround(model)
        calls.append(model.optimizer.built)

    monkeypatch.setattr(_base._tf_workarounds, "build_optimizer_before_tracing", recording)
    model, x, y = _tiny_classifier()
    model.fit(x, y, epochs=1, batch_size=2, verbose=0)
    assert calls == [True]  # called once, by fit, and the optimizer was built by it
