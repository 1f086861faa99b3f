"""A `.keras` file saved on this backend loads on the other two with the same predictions (<= 1e-5).

Each run of the suite covers the two directions from its own backend; CI runs the suite on TensorFlow, JAX and
PyTorch, so all six directions are checked. One subprocess per target backend loads all four models
(tests/models/cross_backend.py); a backend that is not installed is skipped.
"""

import importlib.util
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, TransformerLM, ViT
from tests.helpers import padded_ids

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
NAMES = ("ViT", "TextClassifier", "Seq2SeqTransformer", "TransformerLM")


def tiny_models():
    """name -> (model, inputs): the four ready models, small, with random weights; 3 samples each."""
    images = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3)).astype("uint8")
    ids = padded_ids([5, 8, 3], 8)
    tiny = dict(dim=16, num_heads=2, mlp_dim=32)
    return {
        "ViT": (ViT.from_preset("tiny", image_size=8, patch_size=4, num_classes=3, depth=1, **tiny), images),
        "TextClassifier": (TextClassifier.from_preset("tiny", vocab_size=20, max_length=16, depth=1, **tiny), ids),
        "Seq2SeqTransformer": (
            Seq2SeqTransformer(20, 20, encoder_depth=1, decoder_depth=1, max_length=8, **tiny),
            [padded_ids([4, 6, 2], 6, seed=1), ids[:, :7]],  # a list: two inputs (a tuple would be (x, y))
        ),
        "TransformerLM": (TransformerLM(vocab_size=20, depth=1, max_length=8, **tiny), ids),
    }


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Saves every tiny model, its inputs and its predictions on this backend; returns the folder."""
    folder = tmp_path_factory.mktemp(f"saved_on_{keras.backend.backend()}")
    models = tiny_models()
    assert tuple(models) == NAMES
    for name, (model, x) in models.items():
        expected = model.predict(x, batch_size=3, verbose=0)  # one compiled call, as the loading side makes
        model.save(folder / f"{name}.keras")
        inputs = {"x0": x[0], "x1": x[1]} if isinstance(x, list) else {"x": x}
        np.savez(folder / f"{name}.npz", expected=expected, **inputs)
    return folder


@pytest.mark.parametrize("target", ["tensorflow", "jax", "torch"])
def test_saved_model_predicts_the_same_on_another_backend(saved_models, target):
    source = keras.backend.backend()
    if target == source:
        pytest.skip("same backend: tests/models/test_*.py cover saving and loading in one process")
    if importlib.util.find_spec(BACKEND_MODULES[target]) is None:
        pytest.skip(f"the {target} backend is not installed")
    env = {**os.environ, "KERAS_BACKEND": target, "PYTHONPATH": os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    result = subprocess.run(
        [sys.executable, "-m", "tests.models.cross_backend", str(saved_models)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in NAMES:
        expected = np.load(saved_models / f"{name}.npz")["expected"]
        loaded = np.load(saved_models / f"{name}.{target}.npy")
        assert loaded.shape == expected.shape, name
        np.testing.assert_allclose(loaded, expected, atol=1e-5, rtol=0, err_msg=f"{name}: {source} -> {target}")
