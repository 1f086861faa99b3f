"""The CIFAR-10 ViT recipe, offline: a generated image folder, and the errors a user meets first (no data, bad
flags). The data module's own tests are in tests/data/test_cifar10.py."""

import csv
import json
import os
import subprocess
import sys
import threading

import keras
import numpy as np
import pytest

from keras_tfm.data import cifar10
from recipes import cifar10_vit
from tests.data.samples import write_image_folder
from tests.helpers import Interrupt, InterruptAfterFirstEpoch
from tests.recipes.saved_models import KeepModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_run_on_an_image_folder_writes_every_promised_file(tmp_path, capsys, loads_without_recipes):
    images = write_image_folder(tmp_path / "cifar", train_per_class=10)
    run = tmp_path / "run"
    keep = KeepModel()
    # --time-budget: the optimizer's schedule is a PlannedWarmupCosine, saved in model.keras with it.
    summary = cifar10_vit.main(["--quick", "--image-dir", str(images), "--output-dir", str(run), "--time-budget",
                                "30"], extra_callbacks=[keep])
    found = loads_without_recipes(run / "model.keras", keep.trained)  # where only keras_tfm is installed
    assert found["schedule"] == "PlannedWarmupCosine"

    for name in ("model.keras", "history.csv", "curves.png", "summary.json", "confusion_matrix.png",
                 "where_it_looks.png"):
        assert (run / name).is_file(), name
    assert sorted(os.listdir(run / "rollout")) == [f"rollout_{i}.png" for i in range(8)]  # preset tiny: a [CLS] token
    attention = os.listdir(run / "attention")
    assert {f"epoch_001_rollout_{i}.png" for i in range(4)} <= set(attention)
    assert any(name.endswith("_heads.png") for name in attention)
    # frame 0 (before training) and the epoch: the change view joins the image and model views
    assert '"views":["image","model","change"]' in (run / "attention" / "attention.html").read_text()
    assert {"epoch_000_rollout_0.png", "epoch_001_change.png"} <= set(attention)
    with open(run / "history.csv") as file:
        assert len(list(csv.DictReader(file))) == 1  # --quick: one epoch
    with open(run / "summary.json") as file:
        assert json.load(file)["metrics"] == summary["metrics"]
    assert summary["flags"]["preset"] == "tiny" and summary["flags"]["validation_images"] == 10
    with open(run / "history.csv") as file:  # on the 10 held-out training images (10%)
        assert float(next(csv.DictReader(file))["val_accuracy"]) == pytest.approx(
            summary["metrics"]["validation_accuracy"])
    # The reported test accuracy is the saved model's on the folder's test images.
    _, test, _ = cifar10.load_image_folder(images)
    test_images, test_labels = cifar10.to_arrays(test)
    predicted = keras.saving.load_model(run / "model.keras").predict(test_images, verbose=0).argmax(-1)
    assert summary["metrics"]["test_accuracy"] == pytest.approx(np.mean(predicted == test_labels))
    out = capsys.readouterr().out
    assert "test accuracy" in out and f"(open in a browser): {run / 'attention' / 'attention.html'}" in out
    assert "validation: 10 of the 100 training images held out (10%)" in out
    assert "(--train-samples)" not in out  # --quick's 384 training images: more than the 90 there are, so all of them


@pytest.mark.slow
def test_a_pooled_preset_shows_where_it_looks_by_occlusion(tmp_path, capsys):
    """cifar10_cpu pools its tokens (no [CLS] token): its pictures hide patches instead of rolling attention out."""
    images = write_image_folder(tmp_path / "cifar", train_per_class=4)
    run = tmp_path / "run"
    cifar10_vit.main(["--quick", "--preset", "cifar10_cpu", "--image-dir", str(images), "--output-dir", str(run),
                      "--no-attention-maps", "--train-samples", "30", "--test-samples", "8"])
    assert "training on 30 of the other 36 (--train-samples)" in capsys.readouterr().out  # 4 of 40 validate
    assert sorted(os.listdir(run / "occlusion")) == [f"occlusion_{i}.png" for i in range(8)]
    assert (run / "where_it_looks.png").is_file() and not (run / "rollout").exists()


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


def test_bad_flags_are_usage_errors(capsys):
    bad = [
        ["--epochs", "-1"],
        ["--preset", "enormous"],
        ["--patch-size", "5"],  # does not divide 32
        ["--image-size", "40", "--preset", "ViT-B/16"],  # 16 does not divide 40
        ["--data-dir", "a", "--image-dir", "b"],
        ["--label-smoothing", "1.5"],
        ["--pretrained", "no-such-file.npz"],
        ["--validation-images", "-1"],
        ["--time-budget", "0"],
    ]
    for flags in bad:  # one test, not one per flag set: each test's Keras teardown costs more than the check
        with pytest.raises(SystemExit) as exit_info:
            cifar10_vit.parse_args(flags)
        assert exit_info.value.code == 2, flags
        assert "error:" in capsys.readouterr().err, flags


def test_defaults_and_quick():
    args = cifar10_vit.parse_args([])
    assert (args.preset, args.epochs, args.label_smoothing, args.image_size) == ("small", 100, 0.1, 32)
    assert (args.validation_images, args.time_budget) == (None, None)  # None: a share of the training images
    assert [cifar10_vit.validation_count(args, n) for n in (50_000, 60_000, 60, 5)] == [5000, 5000, 6, 0]
    assert cifar10_vit.validation_count(cifar10_vit.parse_args(["--validation-images", "7"]), 60) == 7
    assert cifar10_vit.validation_count(cifar10_vit.parse_args(["--quick"]), 50_000) == 64
    assert (args.randaugment, args.mixup, args.cutmix) == (0.0, 0.0, 0.0)
    args = cifar10_vit.parse_args(["--quick", "--randaugment", "--mixup", "--cutmix", "0.5"])
    assert (args.preset, args.epochs, args.randaugment, args.mixup, args.cutmix) == ("tiny", 1, 0.5, 0.8, 0.5)


@pytest.mark.slow
def test_pretrained_timm_file_fine_tunes_in_its_own_shape(tmp_path):
    from tests.models.test_vit_weights import DEPTH, DIM, PATCH, random_parameters, timm_tensors, write_safetensors

    checkpoint = tmp_path / "vit_tiny.safetensors"  # timm's names and layout, 16x16 images in 4x4 patches
    write_safetensors(checkpoint, timm_tensors(random_parameters()))
    images = write_image_folder(tmp_path / "cifar", train_per_class=4)
    run = tmp_path / "run"
    summary = cifar10_vit.main(["--quick", "--pretrained", str(checkpoint), "--image-size", "16", "--freeze-blocks",
                                "1", "--image-dir", str(images), "--output-dir", str(run), "--no-attention-maps"])
    assert 0 <= summary["metrics"]["test_accuracy"] <= 1
    model = keras.saving.load_model(run / "model.keras")
    assert (model.depth, model.dim, model.patch_size, model.image_size, model.num_classes) == (DEPTH, DIM, PATCH,
                                                                                               16, 10)
    flags = json.loads((run / "run.json").read_text())["segments"][0]["flags"]
    assert (flags["learning_rate"], flags["drop_path"], flags["freeze_blocks"]) == (1e-4, 0.0, 1)  # fine-tuning


@pytest.mark.parametrize("name, content, message", [
    ("notes.txt", b"not weights", "Unknown checkpoint format"),
    ("model.keras", b"PK", "a whole saved Keras model"),
    ("broken.npz", b"PK\x03\x04", "not a readable .npz checkpoint"),
])
def test_a_pretrained_file_that_is_not_a_checkpoint_is_one_line_and_leaves_no_run(tmp_path, capsys, name, content,
                                                                                  message):
    (tmp_path / name).write_bytes(content)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cifar10_vit.main(["--quick", "--pretrained", str(tmp_path / name), "--image-dir", str(tmp_path / "none"),
                          "--output-dir", str(run)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: --pretrained {tmp_path / name}: ") and message in error
    assert "\n" not in error and "Traceback" not in error
    assert not run.exists()


def test_pretrained_flag_errors(tmp_path, capsys):
    checkpoint = tmp_path / "weights.safetensors"
    checkpoint.write_bytes(b"")
    for flags in (["--pretrained", str(checkpoint), "--preset", "tiny"],  # the checkpoint sets the sizes
                  ["--freeze-blocks", "2"]):  # nothing pretrained to freeze
        with pytest.raises(SystemExit) as exit_info:
            cifar10_vit.parse_args(flags)
        assert exit_info.value.code == 2, flags
        assert "error:" in capsys.readouterr().err, flags
    args = cifar10_vit.parse_args(["--pretrained", str(checkpoint), "--epochs", "5"])
    assert (args.epochs, args.batch_size, args.learning_rate, args.image_size) == (5, 64, 1e-4, 112)


def _fake_split(monkeypatch, seen):
    """Replaces the loader by 40 training and 20 test images, and records what the model is fitted and scored on."""
    import numpy as np
    import tensorflow as tf

    from keras_tfm.data import cifar10

    rng = np.random.default_rng(0)
    train = tf.data.Dataset.from_tensor_slices((rng.integers(0, 256, (40, 32, 32, 3)).astype("uint8"),
                                                np.arange(40) % 10))
    test = tf.data.Dataset.from_tensor_slices((np.full((20, 32, 32, 3), 7, "uint8"), np.arange(20) % 10))
    monkeypatch.setattr(cifar10_vit.cifar10, "load", lambda *a, **k: (train, test, list(cifar10.CLASS_NAMES)))
    fit = cifar10_vit.ViT.fit

    def recording_fit(model, x=None, *args, validation_data=None, callbacks=(), **kwargs):
        batches = [] if validation_data is None else [images.numpy() for images, _ in validation_data]
        seen["validation"] = np.concatenate(batches) if batches else None
        seen["callbacks"] = [type(c).__name__ for c in callbacks]
        return fit(model, x, *args, validation_data=validation_data, callbacks=callbacks, **kwargs)

    monkeypatch.setattr(cifar10_vit.ViT, "fit", recording_fit)


def test_validation_is_on_held_out_training_images_and_the_budget_plans_the_run(tmp_path, monkeypatch, capsys):
    seen = {}
    _fake_split(monkeypatch, seen)
    summary = cifar10_vit.main(["--preset", "tiny", "--epochs", "3", "--batch-size", "16", "--validation-images",
                                "10", "--time-budget", "30", "--no-attention-maps", "--output-dir",
                                str(tmp_path / "run")])
    assert seen["validation"].shape == (10, 32, 32, 3)
    assert not (seen["validation"] == 7).all(axis=(1, 2, 3)).any()  # no test image (all 7s) among them
    assert "TimeBudget" in seen["callbacks"]
    metrics = summary["metrics"]
    assert set(metrics) >= {"test_accuracy", "validation_accuracy", "epochs_trained"}
    assert metrics["epochs_trained"] == 3  # 30 minutes hold all 3 epochs of 30 images

    with pytest.raises(SystemExit) as exit_info:  # more held out than there are training images
        cifar10_vit.main(["--preset", "tiny", "--validation-images", "40", "--output-dir", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
    assert "error: --validation-images 40: `validation_images` must be an integer in [0, 40)" in capsys.readouterr().err


def test_a_budgeted_run_resumed_after_a_crash_goes_on_with_its_budget_and_plan(tmp_path, monkeypatch, capsys):
    """The budget's state is kept with the backup: the resumed run reads the plan made in its first epoch (and the
    seconds it used) instead of planning a new 30 minutes from its own first epoch."""
    _fake_split(monkeypatch, {})
    run = tmp_path / "run"
    argv = ["--preset", "tiny", "--epochs", "3", "--batch-size", "16", "--validation-images", "10", "--time-budget",
            "30", "--no-attention-maps", "--output-dir", str(run)]
    with pytest.raises(Interrupt):
        cifar10_vit.main(argv, extra_callbacks=[InterruptAfterFirstEpoch()])
    with open(run / "backup" / "time_budget.json") as file:
        state = json.load(file)
    assert list(state) == ["1"] and state["1"]["planned_epochs"] == 3 and state["1"]["steps"] == 2
    capsys.readouterr()
    summary = cifar10_vit.main(argv)
    out = capsys.readouterr().out
    assert f"resumed after epoch 1, {state['1']['seconds']:.0f} s of it used; training is planned for 3 epochs" in out
    assert "used by the first epoch" not in out  # no new plan from the resumed run's first epoch
    assert summary["metrics"]["epochs_trained"] == 2  # this process's epochs: the second and the third
    assert not (run / "backup").exists()  # the finished run keeps no resume state


def test_without_data_or_network_the_recipe_answers_at_once(network_unreachable, tmp_path, capsys):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(SystemExit) as exit_info:
        cifar10_vit.main(["--quick", "--download", "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "cannot connect to www.cs.toronto.edu" in message and "--image-dir" in message
    assert len(network_unreachable.connections) <= 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_by_default_a_tenth_of_the_training_images_validate_and_the_start_says_so(tmp_path):
    # The command as a user types it; stopped once the start has printed the hold-out (the run itself is not
    # the point, and a 3-minute budget would take 3 minutes).
    images = write_image_folder(tmp_path / "cifar", train_per_class=6, test_per_class=1)  # 60 training images
    command = [sys.executable, "-m", "recipes.cifar10_vit", "--image-dir", str(images), "--time-budget", "3",
               "--output-dir", str(tmp_path / "run")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines, watchdog = [], threading.Timer(300, process.kill)  # a hung start fails the test instead of CI
    watchdog.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("validation:") or line.startswith("Epoch"):
                break
    finally:
        watchdog.cancel()
        process.kill()
        process.wait(timeout=60)
    assert "validation: 6 of the 60 training images held out (10%)\n" in lines, "".join(lines)
