"""The NCCL and CUDA-IPC transports of ``cohort-gloo``'s protocol (``trainer.engines.weight_stream``), between this
process (the sender: rank 0) and a receiving process standing in for a server's worker (tests/vllm/standin.py's
``receive_updates``; no vLLM): a full push, then deltas, in buckets smaller than the buffer, bit for bit. They
run where the GPUs exist (IPC: one, both processes on it; NCCL: two, one each) and skip elsewhere."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from cohort.trainer.flat_layout import FlatLayout, FlatWeights

sys.path.insert(0, str(Path(__file__).parent))
import standin  # noqa: E402


def _versions(device: str) -> list[FlatWeights]:
    gen = torch.Generator().manual_seed(3)
    layout = FlatLayout(("a", "b"), ((1000, 1000), (500_000,)), torch.bfloat16)
    flat = torch.randn(layout.numel, generator=gen).to(torch.bfloat16)
    out = []
    for _ in range(3):
        out.append(FlatWeights(flat.to(device), layout))
        flat = flat.clone()
        flat[torch.randperm(layout.numel, generator=gen)[:20_000]] += 1
    return out


@pytest.mark.skipif(torch.cuda.device_count() < 1, reason="CUDA IPC needs a GPU")
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_cuda_ipc_on_one_gpu(where):
    results = standin.run_transfer("ipc", _versions(where), bucket_bytes=2**20, sender_device=torch.device("cuda", 0),
                                   receiver_device_index=0, timeout_s=120)
    assert [r["kind"] for r in results] == ["full", "delta", "delta"]
    assert all(r["equal"] for r in results), results


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between two processes needs two GPUs")
def test_nccl_between_two_gpus():
    results = standin.run_transfer("nccl", _versions("cuda"), bucket_bytes=2**20,
                                   sender_device=torch.device("cuda", 0), receiver_device_index=1, timeout_s=120)
    assert [r["kind"] for r in results] == ["full", "delta", "delta"]
    assert all(r["equal"] for r in results), results
