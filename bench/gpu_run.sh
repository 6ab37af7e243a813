#!/usr/bin/env bash
# The device script: every speculative method beside its baseline on one GPU, replayed from the committed acceptance
# traces (bench/gpu_replay.py says what it measures). Needs only what the lent machine's image has (Python with
# torch, transformers, numpy, onnxruntime) and the repository; about 5 minutes on one H200-class GPU.
#
#   bash bench/gpu_run.sh                       # on a machine with a CUDA GPU
#   SUITE_DEVICE=cpu bash bench/gpu_run.sh      # the self-test on a CPU: one item per family, the LLM cut to two narrow
#                                               # layers; a check that it runs, never a measurement
#
# $OUT: where the results go (default bench/results/gpu): $OUT/<gpu name>/*.json with device.json and the run's log
#   gpu_run.log; the self-test writes $OUT/cpu-selftest/ (default out/gpu-replay/cpu-selftest).
# $PYTHON: the Python to use (default: .venv/bin/python when it exists, else python3).
# $BUDGET_S: no new job is started after this many seconds (default 420).
# The full suite with the real models (`specvoice bench all --device cuda`) needs the model packages, CTranslate2,
# llama.cpp and Piper; this script needs none of them (SPECVOICE_IMAGE_ONLY=1 makes importing one fail, as there).
#
# Exit status: 0 when every job ran; 2 when the machine is not ready (nothing ran); 1 when a job failed or the
# budget left one out (device.json says which).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEVICE="${SUITE_DEVICE:-cuda}"
say() { printf 'gpu_run: %s\n' "$*" >&2; }

if ! "$PYTHON" -c 'import torch, transformers, numpy, onnxruntime, safetensors' 2>/dev/null; then
  say "$PYTHON lacks torch, transformers, numpy, onnxruntime or safetensors; nothing ran"
  exit 2
fi
case "$DEVICE" in
  cuda)
    if ! NAME="$("$PYTHON" -c 'import sys, torch
from bench.gpu_suite import slug
if not torch.cuda.is_available(): sys.exit(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device")
print(slug(torch.cuda.get_device_name(0)))')"; then
      say "no usable CUDA device; nothing ran"
      exit 2
    fi
    DEST="${OUT:-bench/results/gpu}/$NAME"
    ARGS=(run --device cuda --budget-s "${BUDGET_S:-420}")
    ;;
  cpu)
    DEST="${OUT:-out/gpu-replay}/cpu-selftest"
    ARGS=(run --device cpu --limit 1 --layers 2 --budget-s "${BUDGET_S:-900}")
    ;;
  *) say "SUITE_DEVICE must be cuda or cpu, not $DEVICE"; exit 2 ;;
esac
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 || true
mkdir -p "$DEST"
say "results in $DEST"
set +e
PYTHONUNBUFFERED=1 "$PYTHON" -m bench.gpu_replay "${ARGS[@]}" --out "$DEST" 2>&1 | tee "$DEST/gpu_run.log"
status=${PIPESTATUS[0]}
set -e
say "finished with exit status $status"
exit "$status"
