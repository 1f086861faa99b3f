"""keras_tfm.files: a file is replaced whole or not at all, by a clean error, a full disk or a SIGKILL."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from keras_tfm import files


def test_a_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("old")
    files.write_json(path, {"epoch": 3}, indent=2)
    assert path.read_text() == '{\n  "epoch": 3\n}' and os.listdir(tmp_path) == ["run.json"]


def test_an_error_in_the_block_keeps_the_old_file_and_deletes_the_partial_one(tmp_path):
    path = tmp_path / "model.keras"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="the save failed"):
        with files.atomic_path(path) as partial:
            assert os.path.basename(partial) == f".partial-{os.getpid()}-model.keras"  # its ending kept
            with open(partial, "w") as file:
                file.write("half")
            raise RuntimeError("the save failed")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["model.keras"]


def test_a_block_that_writes_nothing_is_an_error_and_the_old_file_stays(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(files.WriteError, match=f"could not write {path}"):
        with files.atomic_path(path):
            pass
    assert path.read_text() == "old"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
def test_a_full_disk_is_a_write_error_that_names_the_file_not_the_partial_one(tmp_path, monkeypatch, code):
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss\n0,1.0\n")

    def full(target):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files, "_fsync", full)  # the disk fills while the new file is flushed
    with pytest.raises(files.WriteError) as raised:
        files.write_text(path, "epoch,loss\n0,1.0\n1,0.5\n")
    error = raised.value
    assert (error.errno, error.filename) == (code, str(path))
    assert str(error) == f"could not write {path}: {os.strerror(code)}"
    assert path.read_text() == "epoch,loss\n0,1.0\n" and os.listdir(tmp_path) == ["history.csv"]


def test_an_error_number_only_in_the_message_is_found():
    # h5py raises OSError("Unable to synchronously create file (... errno = 28, error message = 'No space ...')")
    assert files._errno_in("Unable to create file (file write failed: errno = 28, error message = 'x')") == errno.ENOSPC
    assert files._errno_in("Permission denied") == errno.EACCES
    assert files._errno_in("something else") is None


def test_a_read_only_folder_is_a_write_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")  # CI runs as root: the full-disk test covers it there
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(files.WriteError) as raised:
            files.write_text(folder / "summary.json", "{}")
        assert raised.value.errno == errno.EACCES and raised.value.filename == str(folder / "summary.json")
    finally:
        folder.chmod(0o700)


def test_remove_partials_deletes_only_what_a_killed_writer_left(tmp_path):
    (tmp_path / ".partial-12-model.keras").write_text("half")
    (tmp_path / "model.keras").write_text("whole")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".partial-12-x").write_text("not this folder's")
    assert files.remove_partials(tmp_path) == [".partial-12-model.keras"]
    assert sorted(os.listdir(tmp_path)) == ["model.keras", "sub"] and os.listdir(tmp_path / "sub")
    assert files.remove_partials(tmp_path / "missing") == []


def test_sigkill_inside_the_write_leaves_the_old_file_whole(tmp_path):
    """A real SIGKILL between the new file's fsync and its rename (the test hook pauses there)."""
    path = tmp_path / "summary.json"
    path.write_text('{"old": true}')
    program = textwrap.dedent(f"""
        from keras_tfm import files
        files.write_json({str(path)!r}, {{"new": True, "padding": "x" * 100000}})
    """)
    environment = {**os.environ, files.PAUSE_VARIABLE: "summary.json"}
    process = subprocess.Popen([sys.executable, "-c", program], env=environment)
    marker = tmp_path / f".partial-{process.pid}-summary.json.paused"
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert path.read_text() == '{"old": true}'  # the reader sees the old file, whole
    partial = tmp_path / f".partial-{process.pid}-summary.json"
    assert sorted(os.listdir(tmp_path)) == sorted([marker.name, partial.name, "summary.json"])
    assert len(partial.read_text()) > 100000  # the new file was complete, only not yet renamed
    files.remove_partials(tmp_path)
    assert os.listdir(tmp_path) == ["summary.json"]
