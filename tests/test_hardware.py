"""keras_tfm.hardware: thread pools sized to the usable cores, and the precision whose products are fastest."""

import os
import subprocess
import sys

import pytest

from keras_tfm import hardware


def test_usable_cores_are_the_processs_affinity():
    cores = hardware.usable_cores()
    assert 1 <= cores <= os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        assert cores == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("torch_first", [False, True])
def test_a_process_pinned_to_one_core_sizes_every_pool_to_one_thread(torch_first):
    # A fresh interpreter pinned to one core (as `taskset -c 0` would), with no thread variables set: the pools
    # follow the affinity, not os.cpu_count(); PyTorch's whether it was imported before (resized) or after (it
    # reads OMP_NUM_THREADS).
    pytest.importorskip("torch")
    code = ("import os; os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])\n"
            f"{'import torch' if torch_first else 'pass'}\n"
            "from keras_tfm import hardware\n"
            "print(hardware.set_threads())\n"
            "import torch; print(torch.get_num_threads())\n"
            "print(os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                                                             "TF_NUM_INTEROP_THREADS", "XLA_FLAGS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "1", "1", "1"]


def test_a_thread_count_the_user_set_wins(monkeypatch):
    threads = os.environ.get("OMP_NUM_THREADS", "1")  # this test process's own, kept for the tests after this one
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.delenv("TF_NUM_INTEROP_THREADS", raising=False)
    for backend in ("torch", "tensorflow"):  # as if not loaded yet: this process's own pools stay as they are
        monkeypatch.delitem(sys.modules, backend, raising=False)
    assert hardware.set_threads(int(threads) + 2) == int(threads) + 2
    assert os.environ["OMP_NUM_THREADS"] == threads and os.environ["TF_NUM_INTRAOP_THREADS"] == str(int(threads) + 2)


@pytest.mark.parametrize("threads", [0, -2, True, "2", 1.5])
def test_set_threads_refuses_what_is_not_a_positive_int(threads):
    with pytest.raises(ValueError, match=f"`threads` must be a positive integer or None. Received: threads="
                                         f"{threads!r}"):
        hardware.set_threads(threads)


@pytest.mark.parametrize("compiled", [False, True])
def test_matmul_speed_is_measured_in_both_types(compiled):
    for dtype in ("float32", "bfloat16"):
        assert hardware.matmul_gflops(dtype, size=64, repeats=1, compiled=compiled) > 0


@pytest.mark.parametrize("float32, bfloat16, expected", [(100, 250, "mixed_bfloat16"), (100, 150, "float32"),
                                                         (100, 3, "float32")])
def test_bfloat16_is_chosen_where_its_products_are_at_least_twice_as_fast(float32, bfloat16, expected,
                                                                          monkeypatch):
    speeds = {"float32": float32, "bfloat16": bfloat16}
    asked = []

    def measured(dtype, compiled=False, **kwargs):
        asked.append(compiled)
        return speeds[dtype]

    monkeypatch.setattr(hardware, "matmul_gflops", measured)
    policy, why = hardware.choose_precision(compiled=True)
    rounds = 3 if expected == "mixed_bfloat16" else 1  # bfloat16 is confirmed before it is chosen
    assert policy == expected and asked == [True, True] * rounds  # measured the way the step runs (compiled)
    assert why.startswith(f"{expected}: bfloat16 products {bfloat16 / float32:.1f}x as fast as float32")
    policy, why = hardware.choose_precision("mixed_float16")  # asked for: kept, whatever was measured
    assert policy == "mixed_float16" and why.startswith("mixed_float16 as asked; bfloat16 products")


def test_a_busy_moment_during_the_float32_products_does_not_choose_bfloat16(monkeypatch):
    """Another job on the cores while float32 is timed made bfloat16 look 20x as fast on a CPU without bf16 units
    (where it is up to 100x slower); bfloat16 is chosen only if it stays faster over three rounds of each."""
    speeds = {"float32": [2.0, 90.0, 92.0], "bfloat16": [40.0, 45.0, 44.0]}
    monkeypatch.setattr(hardware, "matmul_gflops", lambda dtype, **kwargs: speeds[dtype].pop(0))
    policy, why = hardware.choose_precision()
    assert policy == "float32" and not speeds["float32"] and not speeds["bfloat16"]
    assert "(512x512, eager: 45 and 92 GFLOP/s)" in why  # the best of each


def test_has_amx_bf16_reads_the_cpu_flags():
    try:
        with open("/proc/cpuinfo") as file:
            flags = " ".join(line for line in file if line.startswith("flags"))
    except OSError:
        flags = ""
    assert hardware.has_amx_bf16() == (" amx_bf16" in flags)


@pytest.mark.parametrize("flags, units, kind", [
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", "amx_bf16", "amx_bf16"),  # a Sapphire Rapids Xeon
    ("fpu avx2 avx512f avx512_bf16 avx512_vnni", "avx512_bf16", "avx512_bf16"),  # an AMD EPYC Zen 4
    ("fpu avx2 fma", None, "avx2"),  # an AMD EPYC Zen 3: bf16 is emulated
    ("fpu avx2 avx512_bf16x", None, "avx2"),  # a flag is a whole word, not a prefix
    ("fp asimd aes", None, None),  # an ARM CPU: no measured table applies
])
def test_bf16_units_and_the_cpu_kind_are_read_from_the_cpu_flags(flags, units, kind, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n"
                       "flags\t\t: fpu\n")  # the first CPU's flags count
    assert hardware.bf16_units(str(cpuinfo)) == units
    assert hardware.has_amx_bf16(str(cpuinfo)) == (units == "amx_bf16")
    assert hardware.cpu_kind(str(cpuinfo)) == kind
    assert hardware.bf16_units(str(tmp_path / "missing")) is None  # no /proc (macOS, Windows): none known
    assert hardware.cpu_kind(str(tmp_path / "missing")) is None


def test_thread_environment_sizes_every_pool_and_leaves_what_the_user_set():
    assert hardware.thread_environment(2, {}) == {
        "OMP_NUM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "2"}
    one = hardware.thread_environment(1, {"OMP_NUM_THREADS": "4"})
    assert "OMP_NUM_THREADS" not in one and one["TF_NUM_INTRAOP_THREADS"] == "1"
    assert "intra_op_parallelism_threads=1" in one["XLA_FLAGS"]
