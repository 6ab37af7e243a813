#!/usr/bin/env bash
# The GPU benchmark suite on a machine with a CUDA GPU, for whoever lends one (bench/gpu_suite.py says what it
# measures; about 8 minutes on one H100-class GPU).
#
#   bash bench/gpu_run.sh [MODELS_DIR]
#
# MODELS_DIR: a models folder written on a machine that has the model packages (python -m engine.models export DIR:
#   files over 64 MiB are split into parts). Its parts are joined here and every file is checked: against its
#   SHA256SUMS, then against the digests pinned in engine.models (specvoice models --verify, which also opens each
#   model). Without it (and without $SPECVOICE_MODELS_DIR) the installed model packages are used.
# $OUT: where the results go (default: bench/results/gpu): $OUT/<gpu name>/*.json, device.json beside them, and the
#   run's log as $OUT/<gpu name>/gpu_run.log.
# $PYTHON: the Python that has specvoice's dependencies with a CUDA build of torch (default: .venv/bin/python when
#   it exists, else python3).
# $SUITE_DEVICE=cpu: a check of this script on a machine without a GPU: the suite's tiny jobs on the CPU, results in
#   $OUT/cpu-tiny/ (never GPU numbers).
#
# Exit status: 0 when every job succeeded; 2 when the machine or the models are not ready (nothing ran); else the
# suite's (1: a job failed; its scratch folder is named in the log).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
MODELS="${1:-${SPECVOICE_MODELS_DIR:-}}"
RESULTS="${OUT:-bench/results/gpu}"
DEVICE="${SUITE_DEVICE:-cuda}"
case "$DEVICE" in
  cuda) SUITE_ARGS=(--device cuda) ;;
  cpu) SUITE_ARGS=(--device cpu --tiny) ;;
  *) printf 'gpu_run: SUITE_DEVICE must be cuda or cpu, not %s\n' "$DEVICE" >&2; exit 2 ;;
esac

say() { printf 'gpu_run: %s\n' "$*" >&2; }

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 || true
else
  say "nvidia-smi not found; continuing (torch decides whether a CUDA device is visible)"
fi

# what the suite imports, and whether torch and CTranslate2 see the GPU (one line each)
if ! SUITE_DEVICE="$DEVICE" "$PYTHON" - <<'EOF'
import importlib, os, sys
missing = [m for m in ("torch", "ctranslate2", "faster_whisper", "transformers", "gguf", "accelerate", "llama_cpp",
                       "piper", "onnxruntime", "jiwer", "sacrebleu", "av", "soundfile")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit("missing Python modules: " + ", ".join(missing) + " (pip install -e '.[torch-gguf]' with a CUDA torch)")
import torch, ctranslate2, llama_cpp
if os.environ["SUITE_DEVICE"] == "cpu":
    print(f"torch {torch.__version__}: the tiny suite on the CPU", file=sys.stderr)
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device")
print(f"torch {torch.__version__} CUDA {torch.version.cuda} on {torch.cuda.get_device_name(0)}; "
      f"CTranslate2 {ctranslate2.__version__}: {ctranslate2.get_cuda_device_count()} CUDA device(s); "
      f"llama.cpp GPU offload: {llama_cpp.llama_supports_gpu_offload()} "
      "(False: the LLM runs in torch bfloat16; CMAKE_ARGS=-DGGML_CUDA=on pip install llama-cpp-python==0.3.36 "
      "rebuilds it with CUDA)", file=sys.stderr)
EOF
then
  say "this machine is not ready; nothing ran"
  exit 2
fi

MODELS_ARGS=()
if [ -n "$MODELS" ]; then
  if [ ! -d "$MODELS" ]; then say "models folder $MODELS does not exist"; exit 2; fi
  MODELS="$(cd "$MODELS" && pwd)"
  if [ ! -f "$MODELS/SHA256SUMS" ]; then say "$MODELS has no SHA256SUMS (write it with python -m engine.models export)"; exit 2; fi
  say "joining and checking $MODELS"
  if ! sh "$MODELS/join.sh" >&2; then say "the models folder failed its checksums; nothing ran"; exit 2; fi
  MODELS_ARGS=(--models "$MODELS")
fi
# every role the suite loads, against the pinned digests, and opened as the engine opens it
if ! "$PYTHON" -m app.cli models --verify --quiet --roles asr_target,asr_draft,llm_target,llm_draft,tts_voice,vad \
     ${MODELS_ARGS[@]+"${MODELS_ARGS[@]}"} --out "$(mktemp -d)"; then
  say "a model failed its check; nothing ran"
  exit 2
fi

if [ "$DEVICE" = cuda ]; then
  NAME="$("$PYTHON" -c 'import torch; from bench.gpu_suite import slug; print(slug(torch.cuda.get_device_name(0)))')"
else
  NAME=cpu-tiny
fi
DEST="$RESULTS/$NAME"
mkdir -p "$DEST"
say "running the suite; results in $DEST"
set +e
"$PYTHON" -m app.cli bench all "${SUITE_ARGS[@]}" ${MODELS_ARGS[@]+"${MODELS_ARGS[@]}"} --out "$DEST" 2>&1 | tee "$DEST/gpu_run.log"
status=${PIPESTATUS[0]}
set -e
say "suite finished with exit status $status; results in $DEST"
exit "$status"
