"""The loading half of tests/models/test_cross_backend_saving.py, run in a subprocess on another backend.

    KERAS_BACKEND=jax python -m tests.models.cross_backend FOLDER

loads every `NAME.keras` in FOLDER, predicts on the inputs saved beside it (`NAME.npz`: "x", or "x0" and "x1"
for a model with two inputs) with `predict` and writes the outputs to `NAME.BACKEND.npy`.
"""

import glob
import os
import sys

import numpy as np


def load_and_predict(folder):
    import keras

    import keras_tfm  # noqa: F401  (registers the models' classes for deserialization)

    for path in sorted(glob.glob(os.path.join(folder, "*.keras"))):
        name = os.path.basename(path)[: -len(".keras")]
        arrays = np.load(os.path.join(folder, f"{name}.npz"))
        x = arrays["x"] if "x" in arrays else [arrays["x0"], arrays["x1"]]  # a list: two inputs, not (x, y)
        model = keras.saving.load_model(path)
        out = model.predict(x, batch_size=len(arrays["expected"]), verbose=0)  # one compiled call (fast on JAX)
        np.save(os.path.join(folder, f"{name}.{keras.backend.backend()}.npy"), np.asarray(out))


if __name__ == "__main__":
    load_and_predict(sys.argv[1])
