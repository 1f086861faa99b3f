#!/usr/bin/env bash
# The prepared GPU check: run it as it is on a machine with a GPU (about 8 minutes on one), or with --dry-run
# anywhere (tiny sizes, CPU is fine: CI runs it so that it cannot rot). Everything goes to one log,
# gpu_check.log in the current folder (or $OUT/gpu_check.log when $OUT is set, as on a lent device machine).
#
#   bash benchmarks/gpu_check.sh             # on a GPU machine, from the repository root
#   bash benchmarks/gpu_check.sh --dry-run   # anywhere, in about a minute
#   GPU_CHECK_BACKENDS=jax bash benchmarks/gpu_check.sh --dry-run   # one backend (or several, space-separated)
#
# Per backend (TensorFlow, JAX, PyTorch), in a process each: the devices seen, fit of ViT "small" and a
# TextClassifier "small" under float32 / mixed_float16 / mixed_bfloat16 with jit on and off (samples/s), which
# attention kernel ran (cuDNN in the JAX HLO, flash / efficient / math in the torch profiler), compile counts
# over varying sequence lengths, and on JAX a DataParallel fit; then the input pipeline beside the model step.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-.}/gpu_check.log"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
status=0
{
    echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) $*"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    for backend in ${GPU_CHECK_BACKENDS:-tensorflow jax torch}; do
        if ! "$PYTHON" -c "import $backend" 2>/dev/null; then
            echo "## $backend: not installed, skipped"
            continue
        fi
        KERAS_BACKEND=$backend "$PYTHON" benchmarks/gpu_check.py "$@" || status=1
    done
    echo "## input pipeline beside the model step"
    "$PYTHON" benchmarks/input_pipeline.py ${1:+"$1"} || status=1
    echo "# gpu_check finished, status $status"
    exit $status
} 2>&1 | tee "$LOG"  # with pipefail the script's status is the group's
