"""`benchmarks/gpu_check.sh`, the prepared check for a lent GPU, runs end to end in its dry-run mode on a CPU, so
that it cannot rot before a GPU runs it: on the backend of the run, and with `--run-large` on every installed backend
(about 60 s each on 2 CPU cores; run that before spending a lent GPU's minutes on it)."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import keras
import pytest

pytestmark = pytest.mark.tensorflow_only(reason="the GPU check's dry run starts each backend in its own process")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECTIONS = ("devices", "fit: samples/s", "attention kernels", "compile counts")


def _dry_run(tmp_path, backends):
    result = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run"], cwd=ROOT, capture_output=True,
                            text=True, timeout=900, env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
                                                         "GPU_CHECK_BACKENDS": " ".join(backends)})
    log = (tmp_path / "gpu_check.log").read_text()
    assert result.returncode == 0, log[-3000:]
    assert "gpu_check finished, status 0" in log and "Traceback" not in log
    for backend in ("tensorflow", "jax", "torch"):
        if backend not in backends:
            assert f"## {backend}:" not in log
            continue
        if importlib.util.find_spec(backend) is None:
            assert f"## {backend}: not installed, skipped" in log
            continue
        for section in SECTIONS:
            assert f"## {backend}: {section}" in log, (backend, section)
        assert f"## {backend}: fit" in log and "ViT             float32" in log
    if "jax" in backends and importlib.util.find_spec("jax") is not None:
        assert "## jax: keras.distribution.DataParallel" in log
    assert "pipeline crop+flip" in log and "model step (ViT tiny" in log


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_part_on_this_backend(tmp_path):
    _dry_run(tmp_path, [keras.backend.backend()])


@pytest.mark.slow
@pytest.mark.large
def test_gpu_check_dry_run_runs_every_part_on_every_installed_backend(tmp_path):
    _dry_run(tmp_path, ["tensorflow", "jax", "torch"])
