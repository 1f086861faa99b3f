"""keras_tfm.data.translation: line-aligned files, the Multi30k layout, tensorflow-datasets (mocked, and without
a network), and the batches for teacher forcing."""

import os

import pytest

from keras_tfm.data import translation
from tests.data.samples import make_corpus, write, write_multi30k_folder


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    return folder, write_multi30k_folder(folder)


def test_loaders_read_aligned_files_and_the_multi30k_layout(corpus_files):
    folder, paths = corpus_files
    corpus = translation.load_files(translation.multi30k_files(str(folder), "en", "de"))
    assert sorted(corpus) == ["test", "train", "validation"]
    assert len(corpus["train"][0]) == 600 and corpus["train"] == make_corpus(600, seed=5)
    assert translation.load_files(paths) == corpus
    with pytest.raises(translation.DataUnavailable, match="no train file for language 'fr'"):
        translation.multi30k_files(str(folder), "en", "fr")
    short = write(folder / "short.de", ["eins"])
    with pytest.raises(ValueError, match="same number of lines"):
        translation.load_pair(paths["train"][0], short)


def test_missing_splits_are_filled_without_testing_on_training_pairs():
    pairs = ([f"s{i}" for i in range(50)], [f"t{i}" for i in range(50)])
    corpus = translation.fill_missing_splits({"train": pairs})
    assert len(corpus["train"][0]) == 45 and corpus["test"] == corpus["validation"] == (pairs[0][45:], pairs[1][45:])
    corpus = translation.fill_missing_splits({"train": pairs, "test": (["a"], ["b"])})
    assert corpus["validation"] == (["a"], ["b"]) and corpus["train"] == pairs


def test_keep_fitting_and_batches_cut_to_the_longest_row():
    source, target, dropped = translation.keep_fitting([[5, 6], [5] * 9, [7]], [[2, 8, 3], [2, 3], [2, 9, 9, 3]], 5)
    assert dropped == 1 and source.shape == (2, 5) and target.tolist() == [[2, 8, 3, 0, 0], [2, 9, 9, 3, 0]]
    (x, y_in), y_out = next(iter(translation.make_dataset(source, target, batch_size=2, multiple=1)))
    assert x.shape == (2, 2) and y_in.shape == (2, 3) and y_out.numpy().tolist() == [[8, 3, 0], [9, 9, 3]]
    (x, y_in), y_out = next(iter(translation.make_dataset(source, target, batch_size=2, multiple=2)))
    assert x.shape == (2, 2) and y_in.shape == (2, 4) and y_out.numpy().tolist() == [[8, 3, 0, 0], [9, 9, 3, 0]]


@pytest.mark.tensorflow_only
def test_tfds_translation_sets_load_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=6):
        corpus = translation.load_tfds("ted_hrlr_translate/pt_to_en")
    assert {split: len(pair[0]) for split, pair in corpus.items()} == {"train": 6, "validation": 6, "test": 6}
    assert all(isinstance(text, str) for text in corpus["train"][0] + corpus["train"][1])


@pytest.mark.tensorflow_only
def test_without_a_network_a_tfds_set_answers_at_once_and_leaves_no_folder(network_unreachable, tmp_path, caplog):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(translation.DataUnavailable) as error:
        translation.load_tfds("ted_hrlr_translate/pt_to_en")  # tfds' (empty) default folder, downloading allowed
    message = str(error.value)
    assert "'ted_hrlr_translate/pt_to_en'" in message and "downloading it failed (cannot connect to" in message
    assert "--train-src" in message and "--tfds-dir FOLDER" in message
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == []  # no tfds warnings before the message


@pytest.mark.tensorflow_only
def test_an_unknown_tfds_name_is_reported_without_touching_the_network(network_unreachable):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(translation.DataUnavailable, match="DatasetNotFoundError"):
        translation.load_tfds("no_such_translation_set")
    assert network_unreachable.connections == []
