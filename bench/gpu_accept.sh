#!/usr/bin/env bash
# The GPU acceptance run, in one call of under 9 minutes on a single-GPU machine (H100/H200: Python 3.12, torch,
# transformers; no vLLM, no network). Run it first thing whenever a GPU is lent, with bench/wheels/ carried in
# (fill it here first: bench/gpu_accept.sh --fetch-wheels):
#
#   bench/gpu_accept.sh                 # writes $OUT/gpu_accept.json (else runs/gpu_accept.json)
#   bench/gpu_accept.sh --dry-run       # the same stages on the CPU with tiny sizes (a test runs this)
#
# Stages (bench/gpu_accept.py; each has a time budget, the JSON is rewritten after each, so a stage that fails
# or runs out of time leaves the others' figures): (1) the model.device, precision and chunked-head tests;
# (2) the precision gate on the device (one update at lr 1e-6 moves >= 99 % of the float32 masters under
# model.dtype=bfloat16, < 10 % under bfloat16-pure); (3) one learner step of a Qwen2.5-1.5B-geometry model
# (random init) at 64 rows x 512 tokens with the plan's settings: measured peak against `cohort plan`;
# (4) CUDA IPC weight transfer (rollout.vllm.transfer_backend=ipc) of a SmolLM2-sized bf16 buffer to a receiving
# process standing in for a vLLM server's worker, bit for bit, against gloo (the dry run: gloo only, IPC skipped);
# (5) `cohort train` on the GPU: the embedded task to its target, then a random-init SmolLM2-135M-geometry model
# for about 3 minutes: generation and update tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=1
source bench/gpu_env.sh
out="${OUT:-runs}/gpu_accept.json"
HF_HUB_OFFLINE=1 "$PY" bench/gpu_accept.py --out "$out" "$@"  # not exec: the trap removes the import root after
