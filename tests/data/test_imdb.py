"""keras_tfm.data.imdb: the aclImdb folder loader and tensorflow-datasets without a network (the standardiser and
the vocabulary file: tests/data/test_word_ids.py)."""

import os

import numpy as np
import pytest

from keras_tfm.data import DataUnavailable, imdb
from tests.data.samples import NEGATIVE, POSITIVE, write_acl_imdb

pytestmark = pytest.mark.tensorflow_only(reason="the loaders and TextVectorization run on tf.data")


def test_folder_loader_reads_texts_and_labels(tmp_path):
    train, test = imdb.load_folder(str(write_acl_imdb(tmp_path / "aclImdb", per_class=3)))
    pairs = [(text.numpy().decode(), int(label)) for text, label in train]
    assert len(pairs) == 6 and sorted(label for _, label in pairs) == [0, 0, 0, 1, 1, 1]
    for text, label in pairs:  # 1 = pos: the positive words are in the positive reviews
        assert any(word in text.lower() for word in (POSITIVE if label else NEGATIVE))
    assert len(list(test)) == 6


def test_texts_and_labels_reads_a_dataset_once_into_arrays(tmp_path):
    train, _ = imdb.load_folder(str(write_acl_imdb(tmp_path / "aclImdb", per_class=3)))
    texts, labels = imdb.texts_and_labels(train, batch_size=4)  # two batches
    pairs = [(text.numpy().decode(), int(label)) for text, label in train]
    assert texts.shape == labels.shape == (6,) and labels.dtype == np.int32
    assert sorted(zip(texts, labels.tolist())) == sorted(pairs)  # every review once, decoded, with its label
    with pytest.raises(DataUnavailable, match="empty"):
        imdb.texts_and_labels(train.take(0))


def test_tfds_loader_reads_a_prepared_copy(tmp_path):
    """The `--data-dir` path of the recipes: tensorflow-datasets' `imdb_reviews`, train and test, as `(text, label)`."""
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):  # stands in for a prepared copy in data_dir
        train, test = imdb.load_imdb(data_dir=str(tmp_path))
        texts, labels = imdb.texts_and_labels(train)
        test_texts, _ = imdb.texts_and_labels(test)
    assert texts.shape == labels.shape == (6,) and len(test_texts) == 6
    assert all(isinstance(text, str) for text in texts) and set(labels.tolist()) <= {0, 1}


@pytest.mark.parametrize("data_dir", [None, "tfds"])
def test_without_a_network_tfds_answers_at_once_and_leaves_no_folder(data_dir, network_unreachable, tmp_path, caplog):
    pytest.importorskip("tensorflow_datasets")
    data_dir = None if data_dir is None else str(tmp_path / data_dir)
    with pytest.raises(DataUnavailable) as error:
        imdb.load_tfds(data_dir, download=True)  # no prepared copy anywhere, downloading allowed
    message = str(error.value)
    assert "downloading it from https://ai.stanford.edu" in message and "cannot connect to ai.stanford.edu" in message
    assert "--imdb-dir path/to/aclImdb" in message and "--data-dir FOLDER" in message
    assert len(network_unreachable.connections) == 1  # one check, no retries
    assert network_unreachable.downloads == []  # tensorflow-datasets never started downloading
    assert os.listdir(tmp_path) == []  # neither the default folder nor the named one was created
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == []  # no tfds warnings before the message


def test_a_named_tfds_folder_is_not_downloaded_into_by_default(network_unreachable, tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(DataUnavailable, match="nothing is downloaded into a folder you name"):
        imdb.load_imdb(data_dir=str(tmp_path / "tfds"))
    assert network_unreachable.connections == [] and not (tmp_path / "tfds").exists()


def test_an_unpacked_archive_given_as_the_tfds_folder_is_named_for_what_it_is(network_unreachable, tmp_path):
    """`--data-dir path/to/aclImdb` (the folder `--imdb-dir` takes): the error says which flag it belongs to."""
    pytest.importorskip("tensorflow_datasets")
    folder = str(write_acl_imdb(tmp_path / "aclImdb", per_class=1))
    for download in (False, True):  # and nothing is downloaded into it
        with pytest.raises(DataUnavailable, match="is an unpacked aclImdb folder .* pass it as `--imdb-dir`"):
            imdb.load_tfds(folder, download=download)
    assert network_unreachable.connections == []
