"""`keras_tfm.load_model`: a model back from a file or a run folder, in a fresh process without importing
keras_tfm first, and clear errors for what is not a model."""

import os
import subprocess
import sys

import numpy as np
import pytest

import keras_tfm
from keras_tfm.models import TextClassifier
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "run folders and load_model's look-ups; .keras files across backends: "
    "tests/models/test_cross_backend_saving.py"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    model = TextClassifier.from_preset("tiny", vocab_size=20, max_length=8, num_classes=2)
    x = np.arange(16, dtype="int32").reshape(2, 8) % 20
    model.save(folder / "model.keras")
    return folder, x, to_numpy(model(x))


def test_a_file_and_a_run_folder_load_the_same_model(saved):
    folder, x, expected = saved
    for path in (folder / "model.keras", folder, str(folder)):
        np.testing.assert_allclose(to_numpy(keras_tfm.load_model(path)(x)), expected, atol=1e-6)


def test_it_loads_in_a_process_that_imported_only_keras_tfm_load_model(saved):
    """`keras.saving.load_model` alone fails there ("Could not locate class 'TextClassifier'")."""
    folder, _, _ = saved
    script = ("import keras, sys\n"
              "try:\n    keras.saving.load_model(sys.argv[1])\nexcept TypeError as e:\n    print('keras alone:', e)\n"
              "from keras_tfm import load_model\nprint(type(load_model(sys.argv[1])).__name__)\n")
    result = subprocess.run([sys.executable, "-c", script, str(folder / "model.keras")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "keras alone: Could not locate class 'TextClassifier'" in result.stdout
    assert result.stdout.strip().endswith("TextClassifier")


def test_a_truncated_file_is_reported_as_such(saved, tmp_path):
    folder, _, _ = saved
    data = (folder / "model.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.keras' is not a complete .keras file \([\d,]+ bytes, not a readable zip"):
        keras_tfm.load_model(tmp_path / "cut.keras")


def test_missing_files_and_unfinished_runs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"`path` does not exist: '.*nothing.keras'"):
        keras_tfm.load_model(tmp_path / "nothing.keras")
    (tmp_path / "backup").mkdir()
    with pytest.raises(FileNotFoundError, match=r"folder without model.keras.*resume the run to finish it"):
        keras_tfm.load_model(tmp_path)
