"""BackupAndRestore, CSVLogger and LatestCheckpoint: interrupted training resumes exactly, whatever a crash left."""

import csv
import json
import os

import keras
import numpy as np
import pytest

from keras_tfm import files
from keras_tfm.callbacks import BackupAndRestore, CSVLogger, LatestCheckpoint
from keras_tfm.callbacks.backup_and_restore import METADATA, backed_up_epochs, weights_name

X = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")


def model():
    keras.utils.set_random_seed(1)
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    net.compile(keras.optimizers.Adam(0.01), "mse")  # Adam: its moments must be restored too
    return net


def train(folder, epochs, **options):
    net = model()
    backup = BackupAndRestore(folder / "backup", delete_backup=False)
    callbacks = [CSVLogger(folder / "history.csv"), backup, LatestCheckpoint(str(folder / "checkpoint.keras"))]
    net.fit(X, Y, batch_size=8, epochs=epochs, shuffle=False, callbacks=callbacks, verbose=0, **options)
    return net, backup


def weights(net):
    return [keras.ops.convert_to_numpy(w) for w in net.weights + net.optimizer.variables]


def history(folder):
    with open(folder / "history.csv", newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    net, _ = train(folder, 4)
    return weights(net), [row["loss"] for row in history(folder)]


def test_a_resumed_fit_ends_where_an_uninterrupted_one_does_and_logs_each_epoch_once(tmp_path, uninterrupted):
    train(tmp_path, 2)
    assert backed_up_epochs(tmp_path / "backup") == 2
    assert sorted(os.listdir(tmp_path / "backup")) == [weights_name(1), weights_name(2), METADATA]
    net, backup = train(tmp_path, 4)
    assert backup.restored_epoch == 2 and backup.report is None
    for resumed, straight in zip(weights(net), uninterrupted[0]):
        np.testing.assert_allclose(resumed, straight, rtol=1e-6, atol=1e-7)
    rows = history(tmp_path)
    assert [row["epoch"] for row in rows] == ["0", "1", "2", "3"]
    np.testing.assert_allclose([float(row["loss"]) for row in rows], [float(v) for v in uninterrupted[1]], rtol=1e-5)
    assert sorted(os.listdir(tmp_path / "backup")) == [weights_name(3), weights_name(4), METADATA]  # two kept
    for saved, trained in zip(keras.saving.load_model(tmp_path / "checkpoint.keras").get_weights(), net.get_weights()):
        np.testing.assert_array_equal(saved, trained)


@pytest.mark.parametrize("damage", ["cut in half", "emptied", "deleted"])
def test_a_damaged_newest_state_falls_back_to_the_one_before_and_says_so(tmp_path, capsys, uninterrupted, damage):
    train(tmp_path, 3)
    newest = tmp_path / "backup" / weights_name(3)
    if damage == "deleted":
        newest.unlink()
    else:
        content = newest.read_bytes()
        newest.write_bytes(content[: len(content) // 2] if damage == "cut in half" else b"")
    capsys.readouterr()
    net, backup = train(tmp_path, 4)
    assert backup.restored_epoch == 2
    line = capsys.readouterr().out.strip()
    reason = "is missing" if damage == "deleted" else "cannot be read ("
    assert line.startswith(f"{tmp_path / 'backup'}: {weights_name(3)} {reason}") and "\n" not in line
    assert line.endswith(f"restored the state after epoch 2 from {weights_name(2)}, and training goes on from epoch 3")
    assert [row["epoch"] for row in history(tmp_path)] == ["0", "1", "2", "3"]  # epoch 3's row written once more
    for resumed, straight in zip(weights(net), uninterrupted[0]):
        np.testing.assert_allclose(resumed, straight, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("damage", ["empty", "cut short", "not JSON"])
def test_unreadable_metadata_restores_the_newest_epoch_file_that_loads(tmp_path, capsys, damage):
    train(tmp_path, 3)
    text = {"empty": "", "cut short": '{"epoch": 3, "wei', "not JSON": "\x00\x00"}[damage]
    (tmp_path / "backup" / METADATA).write_text(text)
    assert backed_up_epochs(tmp_path / "backup") == 3  # read from the newest file's name
    capsys.readouterr()
    _, backup = train(tmp_path, 4)
    assert backup.restored_epoch == 3
    assert capsys.readouterr().out.strip() == (
        f"{tmp_path / 'backup'}: {METADATA} cannot be read; restored the state after epoch 3 from "
        f"{weights_name(3)}, and training goes on from epoch 4")


def test_no_loadable_state_stops_fit_naming_every_file_instead_of_starting_again(tmp_path):
    train(tmp_path, 2)
    for epoch in (1, 2):
        (tmp_path / "backup" / weights_name(epoch)).write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match=f"no backed-up state can be loaded .*{weights_name(2)} cannot be read.*"
                                         f"{weights_name(1)} cannot be read.*delete it to start again"):
        train(tmp_path, 4)
    assert [row["epoch"] for row in history(tmp_path)] == ["0", "1"]  # nothing written over


def test_partial_files_of_a_killed_write_are_removed_and_the_complete_state_restored(tmp_path):
    train(tmp_path, 2)
    (tmp_path / "backup" / f".partial-999-{weights_name(3)}").write_bytes(b"half")  # a kill during epoch 3's write
    _, backup = train(tmp_path, 3)
    assert backup.restored_epoch == 2
    assert not any(name.startswith(".partial") for name in os.listdir(tmp_path / "backup"))


def test_a_backup_written_by_keras_own_callback_is_restored(tmp_path):
    net = model()
    net.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0,
            callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False)])
    _, backup = train(tmp_path, 3)
    assert backup.restored_epoch == 2
    assert "latest.weights.h5" not in os.listdir(tmp_path / "backup")  # superseded by epoch 3's file


def test_a_row_written_before_its_backup_was_complete_is_dropped_on_resume(tmp_path):
    """A crash between an epoch's log row and its backup: the resumed fit trains that epoch again, logging it once."""
    train(tmp_path, 2)
    with open(tmp_path / "history.csv", "a") as file:
        file.write("2,0.123\n")  # epoch 3's row; its backup never finished
    train(tmp_path, 3)
    assert [row["epoch"] for row in history(tmp_path)] == ["0", "1", "2"]
    assert history(tmp_path)[2]["loss"] != "0.123"


def test_the_backup_is_deleted_when_fit_ends_unless_asked_to_keep_it(tmp_path):
    net = model()
    net.fit(X, Y, epochs=1, verbose=0, callbacks=[BackupAndRestore(tmp_path / "backup")])
    assert not (tmp_path / "backup").exists()


def test_csv_logger_writes_what_keras_logger_writes(tmp_path):
    ours, theirs = tmp_path / "ours.csv", tmp_path / "theirs.csv"
    for logger in (CSVLogger(ours), keras.callbacks.CSVLogger(str(theirs))):
        model().fit(X, Y, batch_size=8, epochs=2, shuffle=False, validation_data=(X, Y), verbose=0,
                    callbacks=[logger])
    assert ours.read_text() == theirs.read_text().replace("\r\n", "\n")


def test_csv_logger_without_append_starts_the_file_again(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss\n0,9\n1,9\n")
    model().fit(X, Y, epochs=1, verbose=0, callbacks=[CSVLogger(path, append=False)])
    assert [row["epoch"] for row in csv.DictReader(open(path))] == ["0"]


def test_a_failed_checkpoint_save_keeps_the_previous_epochs_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.keras"
    net = model()
    net.fit(X, Y, epochs=1, verbose=0, callbacks=[LatestCheckpoint(str(path))])
    before = keras.saving.load_model(path).get_weights()

    def full(target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "_fsync", full)
    with pytest.raises(files.WriteError, match=f"could not write {path}: No space left on device"):
        net.fit(X, Y, epochs=1, verbose=0, callbacks=[LatestCheckpoint(str(path))])
    monkeypatch.undo()
    for kept, saved in zip(keras.saving.load_model(path).get_weights(), before):
        np.testing.assert_array_equal(kept, saved)
    assert os.listdir(tmp_path) == ["checkpoint.keras"]


@pytest.mark.parametrize("make, message", [
    (lambda: BackupAndRestore(""), "`backup_dir` must be a folder's path. Received: backup_dir=''"),
    (lambda: BackupAndRestore("b", delete_backup="yes"), "`delete_backup` must be True or False"),
    (lambda: CSVLogger(None), "`filename` must be a file's path. Received: filename=None"),
    (lambda: CSVLogger("h.csv", append=1), "`append` must be True or False. Received: append=1"),
    (lambda: LatestCheckpoint("model.h5"), "`filepath` must be a path ending in '.keras'"),
    (lambda: LatestCheckpoint("m.keras", save_weights_only=True), "must be a path ending in '.weights.h5'"),
])
def test_bad_arguments_are_named(make, message):
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_the_metadata_keeps_keras_key(tmp_path):
    train(tmp_path, 1)
    assert json.loads((tmp_path / "backup" / METADATA).read_text())["epoch"] == 1  # what Keras' own reads
