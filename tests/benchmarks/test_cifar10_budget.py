"""benchmarks/cifar10_budget.py: every model under a tiny budget on a generated image folder."""

import json
import math

import pytest

from tests.data.samples import write_image_folder
from tests.helpers import load_script

pytestmark = pytest.mark.tensorflow_only(reason="a benchmark's end-to-end check on the default backend")


def load_benchmark():
    return load_script("benchmarks/cifar10_budget.py")


@pytest.mark.slow
@pytest.mark.large  # 135 s on 2 cores: four models trained and scored; run before measuring
@pytest.mark.tensorflow_only
def test_every_model_trains_under_the_budget_and_is_scored_once(tmp_path, capsys):
    images = write_image_folder(tmp_path / "cifar", train_per_class=6, test_per_class=2)
    output, picture = tmp_path / "budget.json", tmp_path / "budget.png"
    benchmark = load_benchmark()
    benchmark.main(["--image-dir", str(images), "--minutes", "0.001", "--validation-images", "10",
                    "--output", str(output), "--plot", str(picture), "--run-dir", str(tmp_path / "runs")])

    with open(output) as file:
        report = json.load(file)
    assert list(report["models"]) == list(benchmark.MODELS)
    for name, result in report["models"].items():
        assert 0.0 <= result["test_accuracy"] <= 1.0, name
        # A budget shorter than one epoch: the first epoch runs, and training stops at its end.
        assert result["epochs_trained"] == len(result["epochs"]) == 1, name
        epoch = result["epochs"][0]
        assert epoch["minutes"] > 0 and not math.isnan(epoch["validation_accuracy"]), name
    assert report["models"]["ours"]["recipe_flags"][:4] == ["--preset", "cifar10_cpu", "--time-budget", "0.001"]
    deit = report["models"]["deit_tiny"]
    assert deit["recipe_flags"][:4] == ["--preset", "ViT-Ti/16", "--patch-size", "4"]
    assert deit["parameters"] > 5_000_000  # DeiT-tiny's 5.5M weights (with a 10-class head and 65 positions)
    # Every model trained on the path ours' recipe took here, and the report says which it was.
    paths = {name: result["path"] for name, result in report["models"].items()}
    assert paths["keras_io_cct"] == paths["keras_io_vit"] == paths["ours"], paths
    assert picture.stat().st_size > 0
    printed = capsys.readouterr().out
    path = f"{paths['ours']['dtype_policy']}, jit_compile={paths['ours']['jit_compile']}"
    assert f"| keras_io_cct | {path} | 1 |" in printed and "ours / this" in printed


def test_flags_are_checked_before_tensorflow_loads():
    benchmark_flags = load_benchmark().parse_args(["--image-dir", "x", "--models", "ours", "keras_io_cct"])
    assert benchmark_flags.models == ["ours", "keras_io_cct"] and benchmark_flags.minutes == 60.0
    with pytest.raises(SystemExit):
        load_benchmark().parse_args(["--image-dir", "x", "--models", "resnet"])


def test_the_keras_io_models_take_ours_path_unless_told_float32(monkeypatch):
    benchmark = load_benchmark()
    from recipes import fast_paths
    import keras
    import numpy as np

    from keras_tfm import hardware

    measured = ("mixed_bfloat16", False, 314.0)  # a Zen 4's measured fast path for ours' model, on any CPU
    monkeypatch.setattr(hardware, "cpu_kind", lambda: "avx512_bf16")
    monkeypatch.setattr(fast_paths, "measured_fast_path", lambda recipe, backend, distribute="none", quick=False: measured
                        if recipe == "cifar10_vit --preset cifar10_cpu" else None)
    assert benchmark.keras_io_path(benchmark.parse_args(["--image-dir", "x"])) == ("mixed_bfloat16", False)
    float32 = benchmark.parse_args(["--image-dir", "x", "--keras-io-path", "float32"])
    assert benchmark.keras_io_path(float32) == ("float32", "auto")
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--image-dir", "x", "--keras-io-path", "bf16"])

    # Built under the mixed policy, the model computes in bfloat16 (stochastic depth included) and gives float32
    # logits.
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = benchmark.keras_io_cct(num_classes=10)
        branch = benchmark.StochasticDepth(0.5)(keras.ops.ones((8, 4, 2)), training=True)
        images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3)).astype("uint8")
        vit = benchmark.keras_io_vit(images, num_classes=10)  # adapts its Normalization to the images
    finally:
        keras.config.set_dtype_policy(previous)
    normalization = vit.get_layer("data_augmentation").layers[0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(normalization.mean).ravel(),
                               images.reshape(-1, 3).mean(0), rtol=1e-5)  # adapted, in float32
    assert keras.backend.standardize_dtype(vit(images.astype("float32")).dtype) == "float32"
    attention = [layer for layer in model.layers if isinstance(layer, keras.layers.MultiHeadAttention)]
    assert attention and all(layer.compute_dtype == "bfloat16" for layer in attention)
    assert keras.backend.standardize_dtype(branch.dtype) == "bfloat16"
    kept = keras.ops.convert_to_numpy(keras.ops.cast(branch, "float32"))[:, 0, 0]
    assert set(np.unique(kept)) <= {0.0, 2.0}  # dropped, or kept and scaled by 1 / (1 - rate)
    logits = model(np.zeros((2, 32, 32, 3), "float32"))
    assert keras.backend.standardize_dtype(logits.dtype) == "float32" and logits.shape == (2, 10)


def report(models, minutes=60.0, cpus=2):
    """A report as `main` writes it, for the models given as {name: (test accuracy, [(minutes, validation)])}."""
    return {
        "minutes": minutes, "seed": 0, "image_dir": "/tmp/cifar10", "validation_images": 5000, "train_images": None,
        "test_images": None, "keras_io_vit_version": "2021",
        "machine": {"cpus": 2, "cpus_usable": cpus, "load_average_at_start": [0.1, 0.2, 0.3]},
        "models": {name: {"test_accuracy": test, "parameters": 1000, "epochs_trained": len(epochs),
                          "epochs": [{"epoch": i + 1, "minutes": m, "validation_accuracy": v}
                                     for i, (m, v) in enumerate(epochs)]}
                   for name, (test, epochs) in models.items()},
    }


def write(path, content):
    path.write_text(json.dumps(content))
    return str(path)


def test_reports_of_separate_runs_merge_into_one_table(tmp_path, capsys):
    cct = write(tmp_path / "cct.json", report({"keras_io_cct": (0.75, [(30.0, 0.70), (58.0, 0.74)])}))
    ours = write(tmp_path / "ours.json", report({"ours": (0.80, [(20.0, 0.60), (59.0, 0.81)])}, cpus=2))
    output, picture = tmp_path / "merged.json", tmp_path / "merged.png"
    benchmark = load_benchmark()
    merged = benchmark.main(["--merge", cct, ours, "--output", str(output), "--plot", str(picture)])

    assert json.loads(output.read_text()) == merged
    assert list(merged["models"]) == ["ours", "keras_io_cct"]  # the benchmark's order, not the files'
    assert merged["minutes"] == 60.0 and merged["seed"] == 0
    assert merged["models"]["keras_io_cct"]["report"] == cct
    assert merged["models"]["ours"]["machine"]["load_average_at_start"] == [0.1, 0.2, 0.3]
    assert picture.stat().st_size > 0
    printed = capsys.readouterr().out
    assert "| ours | – | 2 | 59.0 | 0.8100 / 0.8100 | 0.8000 | 1.00× |" in printed  # no path recorded in these
    assert "| keras_io_cct | – | 2 | 58.0 | 0.7400 / 0.7400 | 0.7500 | 1.07× |" in printed

    # A merged report merges again (a model run later joins the table) and its models keep where they came from.
    vit = write(tmp_path / "vit.json", report({"keras_io_vit": (0.55, [(50.0, 0.56)])}, cpus=1))
    again = benchmark.merge([str(output), vit])
    assert list(again["models"]) == ["ours", "keras_io_vit", "keras_io_cct"]
    assert again["models"]["keras_io_cct"]["report"] == cct
    assert again["models"]["ours"]["machine"]["cpus_usable"] == 2
    assert again["models"]["keras_io_vit"]["machine"]["cpus_usable"] == 1
    assert again["models"]["keras_io_vit"]["keras_io_vit_version"] == "2021"


def test_merge_refuses_reports_that_do_not_belong_in_one_table(tmp_path):
    benchmark = load_benchmark()
    ours = write(tmp_path / "ours.json", report({"ours": (0.80, [(59.0, 0.81)])}))
    shorter = write(tmp_path / "cct.json", report({"keras_io_cct": (0.70, [(34.0, 0.70)])}, minutes=35.0))
    with pytest.raises(ValueError, match=r"must share `minutes`.*minutes=35\.0"):
        benchmark.merge([ours, shorter])
    with pytest.raises(ValueError, match="'ours' is in two reports"):
        benchmark.merge([ours, ours])
    with pytest.raises(ValueError, match="no 'models'"):
        benchmark.merge([ours, write(tmp_path / "other.json", {"accuracy": 0.9})])


def test_training_needs_an_image_folder_and_merging_does_not():
    benchmark = load_benchmark()
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--minutes", "60"])
    assert benchmark.parse_args(["--merge", "a.json", "b.json"]).merge == ["a.json", "b.json"]
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--merge", "a.json", "--image-dir", "/tmp/cifar10"])
