#!/usr/bin/env bash
# One command for a session with a lent GPU (H200: Python 3.12, torch, transformers 5.x, grpcio; no network):
#
#   bench/gpu_check.sh [gpu_check.py options]        e.g. bench/gpu_check.sh --overlap --steps 5
#   bench/gpu_check.sh --tests [pytest options]       the GPU tests: tests/trainer/test_device.py (model.device)
#
# Runs bench/gpu_check.py (transformers rollout engine + learner on a random-init ~0.5B Llama:
# tokens/s, step time, peak GPU memory; with --overlap, the same steps pipelined as the asynchronous
# pipeline runs them, generation in a second process) from the repository, without installing the
# project: the checkout is linked as `cohort` in a temporary import root.
# Beyond what the machine has (torch, transformers, tokenizers, safetensors, numpy), the trainer
# code imports pydantic (+ pydantic-core, annotated-types, typing-inspection), pyyaml and
# jaxtyping (+ wadler-lindig). Missing ones are installed offline from bench/wheels/ (carry that
# folder with the tree; fill it on a machine with PyPI access with: bench/gpu_check.sh --fetch-wheels).
# Results: printed, and written to $OUT/gpu_check.json when $OUT is set (else runs/gpu_check.json).
#
# Dry run without a GPU (checks the script, figures meaningless):
#   bench/gpu_check.sh --device cpu --size tiny --prompts 2 --generations 4 --completion-len 16 --micro-batch 4 --steps 1 --overlap
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=bench/wheels
NEEDED=(pydantic pyyaml jaxtyping)
# --tests: the project's runtime dependencies too (verifier servers, the CLI, pytest), all from bench/wheels/
TEST_NEEDED=(pytest typer rich grpcio grpcio-health-checking grpcio-reflection "protobuf>=7.35.1" sympy
             latex2sympy2_extended prometheus-client pyseccomp jsonschema cachetools)
TESTS=0
if [ "${1:-}" = "--tests" ]; then TESTS=1; shift; fi
PY=${PYTHON:-python3}

if [ "${1:-}" = "--fetch-wheels" ]; then  # on a networked machine: wheels for the GPU machine's Python 3.12
  mkdir -p "$WHEELS"
  "$PY" -m pip download -q --only-binary=:all: --python-version "${GPU_PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$WHEELS" "${NEEDED[@]}" "${TEST_NEEDED[@]}"
  ls "$WHEELS"
  exit 0
fi

missing=()
"$PY" -c "import pydantic" 2>/dev/null || missing+=(pydantic)
"$PY" -c "import yaml" 2>/dev/null || missing+=(pyyaml)
"$PY" -c "import jaxtyping" 2>/dev/null || missing+=(jaxtyping)
SITE=$(mktemp -d)  # the import root: cohort -> this checkout (the package's folder is the repository root)
trap 'rm -rf "$SITE"' EXIT
ln -s "$PWD" "$SITE/cohort"
if [ $TESTS = 1 ] && ! "$PY" -c "import pytest, typer, grpc_health, grpc_reflection, sympy, jsonschema, cachetools" 2>/dev/null; then
  missing+=("the project's runtime dependencies and pytest")
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ ! -d "$WHEELS" ]; then
    echo "error: missing ${missing[*]} and no $WHEELS/ folder (run bench/gpu_check.sh --fetch-wheels where PyPI is reachable)" >&2
    exit 1
  fi
  # beside the machine's own packages (its torch/transformers stay), offline; a venv would not see them when
  # the machine's python3 is itself a venv's
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -c "import torch, transformers" || { echo "error: $PY cannot import torch and transformers (the GPU machine has them)" >&2; exit 1; }
"$PY" -c "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}')"
if [ $TESTS = 1 ]; then
  HF_HUB_OFFLINE=1 "$PY" -m pytest -q -p no:cacheprovider -rs tests/trainer/test_device.py "$@"
  exit $?
fi
out="${OUT:-runs}/gpu_check.json"
HF_HUB_OFFLINE=1 "$PY" bench/gpu_check.py --out "$out" "$@"  # not exec: the trap removes the import root after
