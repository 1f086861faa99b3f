"""benchmarks/cifar10_budget.py: all three models under a tiny budget on a generated image folder."""

import importlib.util
import json
import math
import pathlib
import sys

import pytest

from tests.data.samples import write_image_folder

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "cifar10_budget.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("cifar10_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # tf.data's AutoGraph reads the module's source through it
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
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
    assert picture.stat().st_size > 0
    printed = capsys.readouterr().out
    assert "| keras_io_cct | 1 |" in printed and "ours / this" in printed


def test_flags_are_checked_before_tensorflow_loads():
    benchmark_flags = load_benchmark().parse_args(["--image-dir", "x", "--models", "ours", "keras_io_cct"])
    assert benchmark_flags.models == ["ours", "keras_io_cct"] and benchmark_flags.minutes == 60.0
    with pytest.raises(SystemExit):
        load_benchmark().parse_args(["--image-dir", "x", "--models", "resnet"])
