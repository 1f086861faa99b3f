"""The CIFAR-10 ViT recipe and its data module, offline: a generated image folder, mocked tensorflow-datasets,
and the errors a user meets first (no data, bad flags)."""

import csv
import json
import os

import keras
import numpy as np
import pytest

from keras_tfm.data import cifar10
from keras_tfm.data import DataUnavailable
from recipes import cifar10_vit


def write_image_folder(root, train_per_class=3, test_per_class=2):
    """root/{train,test}/<class>/*.png with random 32x32 images of a class-dependent tint."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for label, name in enumerate(cifar10.CLASS_NAMES):
            os.makedirs(root / split / name)
            for i in range(count):
                pixels = rng.integers(0, 128, (32, 32, 3)) + 12 * label
                keras.utils.save_img(root / split / name / f"{i}.png", pixels.astype("uint8"))
    return root


@pytest.mark.slow
def test_quick_run_on_an_image_folder_writes_every_promised_file(tmp_path, capsys):
    images = write_image_folder(tmp_path / "cifar")
    run = tmp_path / "run"
    summary = cifar10_vit.main(["--quick", "--image-dir", str(images), "--output-dir", str(run)])

    for name in ("model.keras", "history.csv", "curves.png", "summary.json", "confusion_matrix.png"):
        assert (run / name).is_file(), name
    assert sorted(os.listdir(run / "rollout")) == [f"rollout_{i}.png" for i in range(8)]
    attention = os.listdir(run / "attention")
    assert {f"epoch_001_rollout_{i}.png" for i in range(4)} <= set(attention)
    assert any(name.endswith("_heads.png") for name in attention)
    assert '"views":["image","model"]' in (run / "attention" / "attention.html").read_text()
    with open(run / "history.csv") as file:
        assert len(list(csv.DictReader(file))) == 1  # --quick: one epoch
    with open(run / "summary.json") as file:
        assert json.load(file)["metrics"] == summary["metrics"]
    assert 0.0 <= summary["metrics"]["test_accuracy"] <= 1.0
    assert summary["flags"]["preset"] == "tiny"
    out = capsys.readouterr().out
    assert "test accuracy" in out and f"(open in a browser): {run / 'attention' / 'attention.html'}" in out


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


def test_no_data_prints_how_to_provide_it_and_exits_with_status_2(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cifar10_vit.main(["--quick", "--data-dir", str(tmp_path), "--output-dir", str(run)])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "CIFAR-10 is not available" in message and str(tmp_path) in message
    assert "--data-dir" in message and "--image-dir" in message
    assert "Traceback" not in message
    assert not run.exists()  # nothing written for a run that never started

    with pytest.raises(SystemExit) as exit_info:
        cifar10_vit.main(["--quick", "--image-dir", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "train" in capsys.readouterr().err


def test_offline_download_fails_fast_with_the_same_message(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar10, "DOWNLOAD_URL", "https://unreachable.invalid/cifar-10-binary.tar.gz")
    with pytest.raises(DataUnavailable, match="downloading it from https://unreachable.invalid"):
        cifar10.load_tfds(str(tmp_path), download=True)


def test_bad_flags_are_usage_errors(capsys):
    bad = [
        ["--epochs", "-1"],
        ["--preset", "enormous"],
        ["--patch-size", "5"],  # does not divide 32
        ["--image-size", "40", "--preset", "ViT-B/16"],  # 16 does not divide 40
        ["--data-dir", "a", "--image-dir", "b"],
        ["--label-smoothing", "1.5"],
        ["--pretrained", "no-such-file.npz"],
    ]
    for flags in bad:  # one test, not one per flag set: each test's Keras teardown costs more than the check
        with pytest.raises(SystemExit) as exit_info:
            cifar10_vit.parse_args(flags)
        assert exit_info.value.code == 2, flags
        assert "error:" in capsys.readouterr().err, flags


def test_defaults_and_quick():
    args = cifar10_vit.parse_args([])
    assert (args.preset, args.epochs, args.label_smoothing, args.image_size) == ("small", 100, 0.1, 32)
    assert (args.randaugment, args.mixup, args.cutmix) == (0.0, 0.0, 0.0)
    args = cifar10_vit.parse_args(["--quick", "--randaugment", "--mixup", "--cutmix", "0.5"])
    assert (args.preset, args.epochs, args.randaugment, args.mixup, args.cutmix) == ("tiny", 1, 0.5, 0.8, 0.5)


def test_pretrained_builds_a_checkpoint_shaped_model_and_keeps_a_fresh_head(tmp_path, monkeypatch):
    checkpoint = tmp_path / "weights.npz"
    checkpoint.write_bytes(b"")
    calls = []
    monkeypatch.setattr(cifar10_vit, "load_vit_weights", lambda model, path, skip_head: calls.append(
        (model, path, skip_head)))
    args = cifar10_vit.parse_args(["--preset", "tiny", "--pretrained", str(checkpoint), "--image-size", "64"])
    model = cifar10_vit.build_model(args, num_classes=10)
    assert (model.position, model.pool, model.image_size, model.num_classes) == ("learned", "cls", 64, 10)
    assert calls == [(model, str(checkpoint), True)]
