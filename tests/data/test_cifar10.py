"""keras_tfm.data.cifar10: image folders, a prepared tensorflow-datasets copy, no network, and the pipelines."""

import os

import numpy as np
import pytest

from keras_tfm.data import DataUnavailable, cifar10
from tests.data.samples import write_image_folder

pytestmark = pytest.mark.tensorflow_only(reason="tf.data and tensorflow-datasets loaders")


def test_image_folder_loader_gives_uint8_images_and_shared_class_names(tmp_path):
    train, test, class_names = cifar10.load_image_folder(write_image_folder(tmp_path, 2, 1))
    assert class_names == list(cifar10.CLASS_NAMES)  # alphabetical folder order is CIFAR-10's order
    images, labels = cifar10.to_arrays(test)
    assert images.shape == (10, 32, 32, 3) and images.dtype == np.uint8
    assert sorted(labels) == list(range(10))
    assert cifar10.num_examples(train) == 20


def test_tfds_loader_reads_a_prepared_copy(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):  # stands in for a prepared copy in data_dir
        _, test, class_names = cifar10.load_tfds(str(tmp_path), download=False)
        images, labels = cifar10.to_arrays(test)
    assert class_names == list(cifar10.CLASS_NAMES)
    assert images.shape == (6, 32, 32, 3) and images.dtype == np.uint8
    assert labels.min() >= 0 and labels.max() < 10


def test_training_pipeline_augments_and_mixes_raw_pixels():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 32, 32, 3)).astype("uint8")
    data = tf.data.Dataset.from_tensor_slices((images, np.arange(64) % 10))
    pipeline = cifar10.training_pipeline(data, 32, image_size=48, randaugment=0.5, mixup=0.8, cutmix=1.0, seed=1)
    batches = list(pipeline)
    assert [tuple(x.shape) for x, _ in batches] == [(32, 48, 48, 3)] * 2
    pixels = np.concatenate([x.numpy() for x, _ in batches])
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert pixels.min() >= 0 and pixels.max() <= 255 and pixels.max() > 1  # still [0, 255]: the ViT rescales
    np.testing.assert_allclose(labels.sum(-1), 1.0, atol=1e-5)  # mixed one-hot labels stay distributions
    assert labels.max(-1).min() < 1.0  # some labels were mixed

    plain = cifar10.training_pipeline(data, 64, seed=1)
    x, y = next(iter(plain))
    assert x.shape == (64, 32, 32, 3) and set(np.unique(y.numpy())) == {0.0, 1.0}


def test_offline_download_fails_fast_with_the_same_message(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar10, "DOWNLOAD_URL", "https://unreachable.invalid/cifar-10-binary.tar.gz")
    with pytest.raises(DataUnavailable, match="downloading it from https://unreachable.invalid"):
        cifar10.load_tfds(str(tmp_path), download=True)


def test_without_a_network_the_download_is_not_started_and_no_folder_is_left(network_unreachable, tmp_path, caplog):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(DataUnavailable) as error:
        cifar10.load_tfds(str(tmp_path / "tfds"), download=True)
    message = str(error.value)
    assert "CIFAR-10 is not available" in message and "cannot connect to www.cs.toronto.edu" in message
    assert "--data-dir DIR" in message and "--image-dir PATH" in message
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == []  # no tfds warnings before the message


def test_image_folders_given_as_the_tfds_folder_are_named_for_what_they_are(network_unreachable, tmp_path):
    """`--data-dir` pointing at train/<class>/ and test/<class>/ (what `--image-dir` takes): the error says so."""
    pytest.importorskip("tensorflow_datasets")
    folder = write_image_folder(tmp_path / "cifar", 1, 1)
    for download in (False, True):  # and nothing is downloaded into it
        with pytest.raises(DataUnavailable, match="holds image folders .* pass it as `image_dir` \\(`--image-dir`"):
            cifar10.load_tfds(str(folder), download=download)
    assert network_unreachable.connections == []


def test_holdout_is_stratified_seeded_and_disjoint():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), [30, 30, 30, 30, 30, 30, 30, 30, 30, 60])  # one class twice as large
    images = rng.integers(0, 256, (len(labels), 32, 32, 3)).astype("uint8")
    images[:, 0, 0, 0] = np.arange(len(labels)) % 256  # tell the images apart
    images[:, 0, 0, 1] = np.arange(len(labels)) // 256
    data = tf.data.Dataset.from_tensor_slices((images, labels))

    train, (held_images, held_labels) = cifar10.holdout(data, 33, seed=1)
    train_images, train_labels = cifar10.to_arrays(train)
    assert len(held_labels) == 33 and len(train_labels) == len(labels) - 33
    assert np.bincount(held_labels, minlength=10).tolist() == [3] * 9 + [6]  # each class its share
    ids = lambda x: x[:, 0, 0, 0].astype(int) + 256 * x[:, 0, 0, 1].astype(int)  # noqa: E731
    assert not set(ids(held_images)) & set(ids(train_images))  # no image in both
    assert sorted(set(ids(held_images)) | set(ids(train_images))) == list(range(len(labels)))
    assert not np.all(np.diff(held_labels) >= 0) and not np.all(np.diff(train_labels) >= 0)  # not in class order

    again = cifar10.holdout(data, 33, seed=1)[1][1]
    other = cifar10.holdout(data, 33, seed=2)[1][0]
    np.testing.assert_array_equal(again, held_labels)  # the same seed holds out the same images
    assert set(ids(other)) != set(ids(held_images))
    assert len(cifar10.to_arrays(cifar10.holdout(data, 0)[0])[1]) == len(labels)

    for bad in (len(labels), -1, 2.5):
        with pytest.raises(ValueError, match=rf"`validation_images` must be an integer in \[0, 330\).*{bad}"):
            cifar10.holdout(data, bad)


def test_a_corrupt_or_truncated_image_is_named_before_training_or_skipped(tmp_path, capsys):
    root = write_image_folder(tmp_path, 2, 1)
    cat = root / "train" / "cat" / "0.png"
    cat.write_bytes(cat.read_bytes()[:200])  # cut off while copying
    jpeg = root / "train" / "dog" / "photo.jpg"
    jpeg.write_bytes(b"not an image at all")
    with pytest.raises(DataUnavailable) as error:
        cifar10.load_image_folder(root)
    message = str(error.value)
    assert f"2 of the 21 image files in {root / 'train'} are not readable images" in message
    assert str(cat) in message and str(jpeg) in message and "--skip-bad-images" in message
    train, test, _ = cifar10.load_image_folder(root, skip_unreadable=True)
    assert cifar10.num_examples(train) == 19 and f"skipping 2 unreadable image files in {root / 'train'}" in (
        capsys.readouterr().out)
    images, labels = cifar10.to_arrays(train)  # what is left decodes
    assert images.shape == (19, 32, 32, 3) and np.bincount(labels).tolist() == [2, 2, 2, 1, 2, 2, 2, 2, 2, 2]


def test_jpeg_images_of_another_size_are_read_and_resized(tmp_path):
    import keras

    for split in ("train", "test"):
        for name in cifar10.CLASS_NAMES:
            os.makedirs(tmp_path / split / name)
            keras.utils.save_img(tmp_path / split / name / "a.jpg", np.full((40, 48, 3), 200, "uint8"), scale=False)
    train, _, _ = cifar10.load_image_folder(tmp_path)
    images, _ = cifar10.to_arrays(train)
    assert images.shape == (10, 32, 32, 3) and abs(int(images.mean()) - 200) <= 2
