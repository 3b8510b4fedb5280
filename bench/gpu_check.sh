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
TESTS=0
if [ "${1:-}" = "--tests" ]; then TESTS=1; shift; fi
source bench/gpu_env.sh
if [ $TESTS = 1 ]; then
  HF_HUB_OFFLINE=1 "$PY" -m pytest -q -p no:cacheprovider -rs tests/trainer/test_device.py "$@"
  exit $?
fi
out="${OUT:-runs}/gpu_check.json"
HF_HUB_OFFLINE=1 "$PY" bench/gpu_check.py --out "$out" "$@"  # not exec: the trap removes the import root after
