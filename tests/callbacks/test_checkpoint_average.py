"""CheckpointAverage and average_weights: the average of known weights, on every backend."""

import json

import keras
import numpy as np
import pytest

from keras_tfm.callbacks import CheckpointAverage, average_weights


def test_average_weights_is_the_element_wise_mean_and_keeps_dtypes():
    first = [np.array([0.0, 2.0], np.float32), np.array([[1.0]], np.float16), np.array([7], np.int64)]
    second = [np.array([1.0, 4.0], np.float32), np.array([[2.0]], np.float16), np.array([9], np.int64)]
    third = [np.array([2.0, 0.0], np.float32), np.array([[6.0]], np.float16), np.array([11], np.int64)]
    mean = average_weights([first, second, third])
    np.testing.assert_array_equal(mean[0], [1.0, 2.0])
    np.testing.assert_array_equal(mean[1], [[3.0]])
    np.testing.assert_array_equal(mean[2], [11])  # not a float: the last snapshot's
    assert [a.dtype for a in mean] == [np.float32, np.float16, np.int64]


def test_average_weights_refuses_mismatched_snapshots():
    with pytest.raises(ValueError, match="at least one snapshot"):
        average_weights([])
    with pytest.raises(ValueError, match="snapshot 0 has 2 arrays, snapshot 1 has 1"):
        average_weights([[np.zeros(2), np.zeros(2)], [np.zeros(2)]])
    with pytest.raises(ValueError, match=r"shape of weight 0: \[\(2,\), \(3,\)\]"):
        average_weights([[np.zeros(2)], [np.zeros(3)]])


@pytest.mark.parametrize("bad, message", [
    (dict(count=0), "`count` must be a positive integer.*count=0"),
    (dict(count=2.0), "`count` must be a positive integer.*count=2.0"),
    (dict(mode="bigger"), "`mode` must be 'auto', 'min' or 'max'.*mode='bigger'"),
])
def test_bad_arguments_name_themselves(bad, message):
    with pytest.raises(ValueError, match=message):
        CheckpointAverage(**bad)
    with pytest.raises(TypeError, match="`monitor` must be None or the name"):
        CheckpointAverage(monitor=3)


def test_auto_mode_maximises_scores_and_minimises_losses():
    assert CheckpointAverage(monitor="val_bleu").mode == "max"
    assert CheckpointAverage(monitor="val_accuracy").mode == "max"
    assert CheckpointAverage(monitor="val_loss").mode == "min"


class _Recorder(keras.callbacks.Callback):
    """The model's weights at each epoch end, and an injected log value per epoch (before the averaging)."""

    def __init__(self, values=None):
        super().__init__()
        self.weights, self.values = {}, values

    def on_epoch_end(self, epoch, logs=None):
        self.weights[epoch] = [keras.ops.convert_to_numpy(w).copy() for w in self.model.weights]
        if self.values is not None:
            logs["val_score"] = self.values[epoch]


def _model_and_data():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    return model, rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")


def _assert_weights_are_mean_of(model, recorder, epochs):
    expected = [np.mean([recorder.weights[e][i] for e in epochs], axis=0) for i in range(len(model.weights))]
    for got, want in zip(model.weights, expected):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, rtol=1e-6, atol=1e-7)


def test_the_model_ends_with_the_mean_of_the_last_epochs():
    model, x, y = _model_and_data()
    recorder = _Recorder()
    average = CheckpointAverage(count=3, verbose=False)
    model.fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[recorder, average])
    assert [e for e, _ in average.kept] == [2, 3, 4] and average.averaged_epochs == [2, 3, 4]
    _assert_weights_are_mean_of(model, recorder, [2, 3, 4])
    assert not np.allclose(keras.ops.convert_to_numpy(model.weights[0]), recorder.weights[4][0])  # it moved


def test_with_a_monitor_it_averages_the_best_epochs():
    model, x, y = _model_and_data()
    recorder = _Recorder(values=[1.0, 5.0, 2.0, 4.0, float("nan")])  # a NaN is never kept
    average = CheckpointAverage(count=2, monitor="val_score", mode="max", verbose=False)
    model.fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[recorder, average])
    assert average.kept == [(1, 5.0), (3, 4.0)]
    _assert_weights_are_mean_of(model, recorder, [1, 3])
    model.set_weights(average.average([3]))  # one kept snapshot, as it was
    _assert_weights_are_mean_of(model, recorder, [3])
    with pytest.raises(ValueError, match=r"`epochs` must name kept snapshots \[1, 3\]"):
        average.average([0])


def test_snapshots_on_disk_survive_a_resumed_run(tmp_path):
    model, x, y = _model_and_data()
    recorder = _Recorder()
    # The first run is interrupted after epoch 4 (of 6); its snapshots of epochs 2-3 are on disk, the one of
    # epoch 3 (0-based) will be redone by the resumed run.
    model.fit(x, y, epochs=4, batch_size=8, verbose=0,
              callbacks=[recorder, CheckpointAverage(3, directory=str(tmp_path), apply=False)])
    index = json.loads((tmp_path / "snapshots.json").read_text())
    assert [kept["epoch"] for kept in index["kept"]] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["epoch_002.npz", "epoch_003.npz", "epoch_004.npz"]
    resumed = CheckpointAverage(3, directory=str(tmp_path), verbose=False)  # a new process: nothing in memory
    model.fit(x, y, epochs=5, initial_epoch=3, batch_size=8, verbose=0, callbacks=[recorder, resumed])
    assert resumed.averaged_epochs == [2, 3, 4]
    _assert_weights_are_mean_of(model, recorder, [2, 3, 4])  # epoch 3 as the resumed run trained it
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["epoch_003.npz", "epoch_004.npz", "epoch_005.npz"]


def test_a_directory_kept_for_another_monitor_is_refused(tmp_path):
    model, x, y = _model_and_data()
    model.fit(x, y, epochs=1, verbose=0, callbacks=[CheckpointAverage(2, directory=str(tmp_path), apply=False)])
    with pytest.raises(ValueError, match="kept by monitor=None, not 'val_loss'"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[CheckpointAverage(2, "val_loss", directory=str(tmp_path))])


def test_bfloat16_weights_average_exactly_through_the_disk(tmp_path):
    snapshot = CheckpointAverage(2, directory=str(tmp_path))
    arrays = [keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.array([1.5, -2.25]), "bfloat16"))]
    snapshot._store(0, arrays)
    assert snapshot._load(0)[0].tolist() == [1.5, -2.25]
