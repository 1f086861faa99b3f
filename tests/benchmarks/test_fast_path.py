"""`benchmarks/fast_path.py`: its FLOP counts, and a one-step run end to end (a worker process per backend)."""

import json
import pathlib
import subprocess
import sys

import keras
import pytest

from recipes import fast_paths
from tests.helpers import load_script

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the fast-path benchmark measures every backend from one TensorFlow process"))

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _fast_path():
    return load_script("benchmarks/fast_path.py")


def test_flop_counts_are_the_matrix_products_of_the_blocks():
    fast_path = _fast_path()
    # One block, 2 tokens, width 4, MLP 8: Q, K, V, O (4 products of 2x4 by 4x4), the MLP (2x4 by 4x8, 2x8 by
    # 8x4), scores QK^T (2x4 by 4x2) and the weighted sum (2x2 by 2x4); 2 FLOPs per multiply-add.
    by_hand = 4 * (2 * 2 * 4 * 4) + 2 * (2 * 2 * 4 * 8) + 2 * (2 * 2 * 4 * 2)
    assert fast_path.encoder_flops(2, 4, 8, 1) == by_hand
    # A decoder block adds cross-attention (Q, O over the target; K, V over the source; two products) and the
    # output layer.
    encoder, decoder_self = fast_path.encoder_flops(3, 4, 8, 1), fast_path.encoder_flops(2, 4, 8, 1)
    cross = 2 * (2 * 2 * 4 * 4) + 2 * (2 * 3 * 4 * 4) + 2 * (2 * 2 * 3 * 4)
    assert fast_path.seq2seq_flops(3, 2, 4, 8, 1, 1, 10) == encoder + decoder_self + cross + 2 * 2 * 4 * 10


@pytest.mark.slow
@pytest.mark.large  # 132 s on 2 cores (two XLA compiles and the peak products); run before measuring
def test_one_step_of_one_setup_runs_end_to_end(tmp_path):
    backend = keras.backend.backend()
    output = tmp_path / "fast_path.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/fast_path.py", "--setups", "reverse_digits", "--backends", backend,
         "--precisions", "float32", "mixed_bfloat16", "--jit", "on", "--cores", "1", "--rounds", "1", "--steps",
         "1", "--warmup", "1", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(output.read_text())
    assert [(c["backend"], c["precision"], c["cores"]) for c in measured["configurations"]] == [
        (backend, "float32", 1), (backend, "mixed_bfloat16", 1)]
    assert all(c["seconds"][0] > 0 and c["flops"] > 0 for c in measured["configurations"])
    assert set(measured["peaks"][f"{backend}/1"]) == {"float32", "bfloat16"}
    assert "reverse_digits (Seq2SeqTransformer 'tiny'" in result.stdout and "examples/s" in result.stdout


def test_the_table_of_fast_paths_takes_the_fastest_measured_per_recipe_and_backend(tmp_path):
    fast_path = _fast_path()

    def measured(setup, backend, precision, jit, seconds, cores=2):
        return dict(setup=setup, backend=backend, precision=precision, jit=jit, cores=cores, batch=64,
                    seconds=[seconds, seconds * 2, seconds])
    first = {"cpu": "AMD EPYC (AVX512-BF16)", "bf16_units": "avx512_bf16",
             "configurations": [measured("reverse_digits", "torch", "float32", False, 0.10),
                                  measured("reverse_digits", "torch", "mixed_bfloat16", False, 0.08),
                                  measured("reverse_digits", "jax", "float32", True, 0.05),
                                  measured("reverse_digits", "jax", "mixed_bfloat16", True, 0.01, cores=1),
                                  measured("a setup since renamed", "jax", "float32", True, 0.01)]}
    again = {"bf16_units": "avx512_bf16",
             "configurations": [measured("reverse_digits", "torch", "mixed_bfloat16", False, 0.20)]}
    entry = json.loads(fast_path.fast_paths_table([first, again]))  # the entry of recipes/fast_paths.json
    assert entry == {"avx512_bf16": {"measured": "?, ?; AMD EPYC (AVX512-BF16), ?", "paths": {"reverse_digits": {
        # 64 examples / the median seconds; the 1-core measurement is left out
        "jax": {"policy": "float32", "jit_compile": True, "examples_per_second": 1280.0},
        # the later run's bf16 (320/s) replaced the earlier one's (800/s)
        "torch": {"policy": "float32", "jit_compile": False, "examples_per_second": 640.0},
    }}}}
    written = tmp_path / "fast_paths.json"  # and the recipes read such an entry as (policy, jit, examples/s)
    written.write_text(json.dumps({"about": "...", **entry}))
    assert fast_paths.read_fast_paths(written) == {"avx512_bf16": {"reverse_digits": {
        "jax": ("float32", True, 1280.0), "torch": ("float32", False, 640.0)}}}


def test_the_table_is_made_from_runs_on_one_kind_of_cpu():
    fast_path = _fast_path()
    xeon = {"cpu": "Intel Xeon (AMX-BF16)", "configurations": []}  # written before runs recorded their units
    epyc = {"cpu": "AMD EPYC (AVX512-BF16)", "bf16_units": "avx512_bf16", "configurations": []}  # before their kind
    zen3 = {"cpu": "AMD EPYC (AVX2, no bf16 units)", "cpu_kind": "avx2", "configurations": []}
    assert fast_path.run_kind(xeon) == "amx_bf16" and fast_path.run_kind(epyc) == "avx512_bf16"
    assert fast_path.run_kind(zen3) == "avx2"
    assert json.loads(fast_path.fast_paths_table([xeon]))["amx_bf16"]["paths"] == {}
    assert json.loads(fast_path.fast_paths_table([zen3]))["avx2"]["paths"] == {}
    with pytest.raises(ValueError, match=r"one kind .*got \['amx_bf16', 'avx512_bf16'\]"):
        fast_path.fast_paths_table([xeon, epyc])
    with pytest.raises(ValueError, match=r"got \['avx2', 'avx512_bf16'\]"):
        fast_path.fast_paths_table([zen3, epyc])
    with pytest.raises(ValueError, match=r"got \['None'\]. A CPU of no known kind has no table"):
        fast_path.fast_paths_table([{"cpu": "AMD EPYC", "bf16_units": None, "configurations": []}])
