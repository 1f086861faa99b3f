"""`LatestCheckpoint`: the model after the latest epoch, in one `.keras` file that is never left half written."""

import os

import keras

from keras_tfm import files


class LatestCheckpoint(keras.callbacks.Callback):
    """Saves the whole model (`model.save`: architecture, weights, optimizer) to `filepath` after every epoch,
    replacing the previous epoch's file in one step: the file is written under a temporary name in the same
    folder and renamed (`keras_tfm.files.atomic_path`). A crash or a full disk during the save leaves the
    previous epoch's model, which still loads; `keras.callbacks.ModelCheckpoint` writes in place.

    For the best epoch by a metric, or a file per epoch, use `keras.callbacks.ModelCheckpoint`; to resume
    training, `BackupAndRestore`.

    Args:
        filepath: the `.keras` file (or, with `save_weights_only`, the `.weights.h5` file).
        save_weights_only: save the weights alone (`model.save_weights`).

    Example:

    >>> path = os.path.join(tempfile.mkdtemp(), "checkpoint.keras")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, callbacks=[LatestCheckpoint(path)], verbose=0)
    >>> keras.saving.load_model(path).count_params()
    3
    """

    async_safe = True  # saves at epoch ends only

    def __init__(self, filepath, save_weights_only=False):
        super().__init__()
        if not isinstance(save_weights_only, bool):
            raise TypeError("`save_weights_only` must be True or False. "
                            f"Received: save_weights_only={save_weights_only!r}")
        ending = ".weights.h5" if save_weights_only else ".keras"
        if not isinstance(filepath, (str, os.PathLike)) or not os.fspath(filepath).endswith(ending):
            raise ValueError(f"`filepath` must be a path ending in {ending!r} (save_weights_only={save_weights_only}). "
                             f"Received: filepath={filepath!r}")
        self.filepath, self.save_weights_only = os.fspath(filepath), save_weights_only

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(os.path.dirname(os.path.abspath(self.filepath)), exist_ok=True)
        with files.atomic_path(self.filepath) as partial:
            if self.save_weights_only:
                self.model.save_weights(partial)
            else:
                self.model.save(partial)
