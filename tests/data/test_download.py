"""keras_tfm.data's download helpers: one reachability check before tensorflow-datasets downloads, and no
half-written folders after a failed download."""

import os
import socket

import pytest

from keras_tfm import data

pytestmark = pytest.mark.tensorflow_only(reason="tensorflow-datasets downloads")


def test_unreachable_tells_an_open_port_from_a_closed_one():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert data.unreachable(f"http://127.0.0.1:{port}/file.tar.gz") is None
    problem = data.unreachable(f"http://127.0.0.1:{port}/file.tar.gz")  # closed now: connection refused
    assert problem.startswith("cannot connect to 127.0.0.1:")


def test_unreachable_tries_once_with_the_short_timeout(monkeypatch):
    calls = []

    def refuse(address, timeout=None):
        calls.append((address, timeout))
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    problem = data.unreachable("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz")
    assert calls == [(("ai.stanford.edu", 443), data.CONNECT_TIMEOUT)] and data.CONNECT_TIMEOUT <= 10
    assert problem == "cannot connect to ai.stanford.edu: [Errno -2] Name or service not known"


def test_download_tfds_does_not_start_a_download_without_a_network(network_unreachable, tmp_path):
    pytest.importorskip("tensorflow_datasets")
    problem = data.download_tfds("imdb_reviews", str(tmp_path / "tfds"), "https://ai.stanford.edu/x.tar.gz")
    assert problem.startswith("cannot connect to ai.stanford.edu")
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert not (tmp_path / "tfds").exists()


def test_a_failed_download_removes_the_folders_it_created_and_only_those(monkeypatch, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    monkeypatch.setattr(data, "unreachable", lambda url: None)  # the host answers, then the download breaks

    def half_download(builder, *args, **kwargs):
        os.makedirs(os.path.join(builder.data_dir + ".incomplete.ABC", "x"))  # what tfds leaves mid-download
        os.makedirs(os.path.join(builder._data_dir_root, "downloads", "extracted"))
        raise ConnectionError("connection reset")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", half_download)
    root = tmp_path / "tfds"
    (root / "cifar10").mkdir(parents=True)  # another set the user already has
    (root / "cifar10" / "keep.txt").write_text("mine")
    problem = data.download_tfds("imdb_reviews", str(root), "https://ai.stanford.edu/x.tar.gz")
    assert problem == "ConnectionError: connection reset"
    assert sorted(os.listdir(root)) == ["cifar10"] and (root / "cifar10" / "keep.txt").read_text() == "mine"

    problem = data.download_tfds("imdb_reviews", str(tmp_path / "new"), "https://ai.stanford.edu/x.tar.gz")
    assert problem is not None and not (tmp_path / "new").exists()
