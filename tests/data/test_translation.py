"""keras_tfm.data.translation: line-aligned files, the Multi30k layout, tensorflow-datasets (mocked, and without
a network), and the batches for teacher forcing."""

import collections
import os

import numpy as np
import pytest

from keras_tfm.data import translation
from tests.data.samples import make_corpus, write, write_multi30k_folder

pytestmark = pytest.mark.tensorflow_only(reason="tf.data loaders")


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


def random_pairs(count, longest, seed=0):
    """`keep_fitting`-style arrays: sources of 1..longest tokens, targets (start ... end) of 1..longest read
    (longest <= 30)."""
    rng = np.random.default_rng(seed)
    source = [list(rng.integers(4, 50, rng.integers(1, longest + 1))) for _ in range(count)]
    target = [[1, *rng.integers(4, 50, rng.integers(0, longest)), 2] for _ in range(count)]
    source, target, dropped = translation.keep_fitting(source, target, 32)  # rows 32 wide: a multiple of 4
    assert dropped == 0
    return source, target


@pytest.mark.parametrize("shuffle", [False, True])
def test_token_batches_hold_every_pair_once_within_the_token_and_sentence_limits(shuffle):
    source, target = random_pairs(300, 30)
    tokens, most = 64, 12
    batches = list(translation.make_dataset(source, target, most, shuffle=shuffle, tokens_per_batch=tokens, multiple=4))
    assert len(batches) == translation.batch_count(source, target, most, tokens_per_batch=tokens, multiple=4)
    seen, partial = [], collections.Counter()
    for (x, y_in), y_out in batches:
        x, y_in, y_out = x.numpy(), y_in.numpy(), y_out.numpy()
        assert len(x) <= most and len(x) * max(x.shape[1], y_in.shape[1]) <= tokens
        assert x.shape[1] % 4 == 0 and y_in.shape[1] in (4, 8, 12, 16, 20, 24, 28, 31)  # 31: all the target reads
        lengths = np.maximum((x > 0).sum(1), (y_in > 0).sum(1))
        bucket = (lengths.max() - 1) // 4
        assert ((lengths - 1) // 4 == bucket).all()  # one length bucket per batch
        size = min(most, tokens // ((bucket + 1) * 4))  # pairs of length up to 8 come 8 at a time, up to 32 two
        assert len(x) <= size
        partial[bucket] += len(x) < size
        seen += [(tuple(a[a > 0]), tuple(b[b > 0])) for a, b in zip(x, y_out)]
    assert max(partial.values()) <= 1  # each bucket's last batch may be short, no other
    expected = [(tuple(a[a > 0]), tuple(b[1:][b[1:] > 0])) for a, b in zip(source, target)]
    assert sorted(seen) == sorted(expected)


def test_token_batches_are_reproducible_with_a_seed_and_bad_limits_are_named():
    source, target = random_pairs(100, 20, seed=1)

    def first_rows(seed):
        return [x.numpy()[0].tolist() for (x, _), _ in translation.make_dataset(
            source, target, 16, shuffle=True, seed=seed, tokens_per_batch=48)]

    assert first_rows(3) == first_rows(3) != first_rows(4)
    assert translation.batch_count(source, target, 16) == 7  # without tokens_per_batch: ceil(100 / 16)
    with pytest.raises(ValueError, match="`tokens_per_batch` must be a positive int. Received: tokens_per_batch=0"):
        translation.make_dataset(source, target, 16, tokens_per_batch=0)


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
