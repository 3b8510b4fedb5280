"""Weights in buckets (``trainer.engines.weight_stream``) without vLLM and without a GPU: tensor-parallel-sized
groups (a stand-in server with two ranks), buckets smaller than the model, a relay's spooled versions; the NCCL
and CUDA-IPC transports are tests/vllm/test_transfer_gpu.py's (they skip without GPUs)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from cohort.trainer import wire
from cohort.trainer.config import RolloutSection, load_config
from cohort.trainer.engines import weight_stream
from cohort.trainer.engines.vllm_server import VLLMServerEngine
from cohort.trainer.flat_layout import FlatLayout, FlatWeights
from cohort.trainer.models import build_policy
from cohort.trainer.precision import resolve

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import standin  # noqa: E402  (tests/vllm/standin.py: the receiving process)

BUCKET_MIB = 0.01  # ~10 KB: the tiny model's 0.27 MB bf16 buffer is 26 buckets


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tp_server():
    """A stand-in server whose transfer group has two ranks (as a tensor-parallel server's)."""
    port = _port()
    proc = subprocess.Popen([sys.executable, str(HERE / "standin.py"), "--port", str(port), "--vocab", "128",
                             "--world-size", "2"], start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/health", timeout=1)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait()


def _sha(flat: torch.Tensor) -> str:
    import hashlib

    return hashlib.sha256(flat.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _steps(policy, n: int):
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        ids = torch.randint(0, policy.config.vocab_size, (2, 12), generator=gen)
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        yield


def test_every_rank_of_a_tensor_parallel_server_gets_every_bucket(tp_server):
    """The group is sized by the server (GET /get_world_size: 2 ranks, so 3 in the group); a full push and then
    deltas, each in buckets far smaller than the model, reach both ranks bit for bit."""
    policy, tokenizer = build_policy(load_config(None, []).model)  # float32 masters
    cfg = RolloutSection(engine="vllm-server", weight_sync_timeout_s=60,
                         vllm={"servers": [tp_server], "bucket_mib": BUCKET_MIB, "full_push_every": 100})
    engine = VLLMServerEngine(cfg, policy, tokenizer, seed=0, precision=resolve("bfloat16", torch.device("cpu")))
    try:
        assert engine.servers[0].world_size == 2 and engine.servers[0].channel.world_size == 3
        layout = FlatLayout.of(policy, torch.bfloat16)
        assert layout.nbytes > 20 * engine.bucket_bytes
        for _ in _steps(policy, 4):
            engine.sync_weights(policy)
        assert [r.kind for r in engine.pushed] == ["full"] + ["delta"] * 4
        held = httpx.get(f"{tp_server}/weights").json()
        learner = _sha(wire.flat_parameters(policy, dtype=torch.bfloat16))
        assert held["version"] == 4 and held["ranks_sha256"] == [learner, learner]
    finally:
        engine.close()


def test_a_relay_pushes_spooled_versions_and_keeps_only_the_newest_on_disk(tp_server):
    """A relay's versions come as files (as its weight thread writes them, slice by slice); each is pushed a
    bucket at a time, its delta spooled too; after the push only the newest version's file is left."""
    policy, tokenizer = build_policy(load_config(None, []).model)
    layout = FlatLayout.of(policy, torch.bfloat16)
    spool = weight_stream.Spool()
    cfg = RolloutSection(engine="vllm-server", weight_sync_timeout_s=60,
                         vllm={"servers": [tp_server], "bucket_mib": BUCKET_MIB, "full_push_every": 100})
    engine = VLLMServerEngine(cfg, None, tokenizer, seed=0)
    try:
        files = []
        for _ in _steps(policy, 4):
            flat = wire.flat_parameters(policy, dtype=torch.bfloat16)
            version = spool.new(layout, f"v{len(files)}")
            for start in range(0, flat.numel(), 1000):  # as wire.receive_weights_to hands them over
                version.write(flat[start:start + 1000])
            version.close()
            files.append(version.path)
            engine.sync_weights(version)
            assert [p.exists() for p in files] == [False] * (len(files) - 1) + [True]
            assert not any(engine._spool.folder.iterdir()) if engine._spool else True  # deltas deleted
        assert [r.kind for r in engine.pushed] == ["full", "delta", "delta", "delta"]
        held = httpx.get(f"{tp_server}/weights").json()
        assert held["ranks_sha256"] == [_sha(flat)] * 2
    finally:
        engine.close()
        spool.close()
    assert not files[-1].exists()  # the engine's close removes the version it held


def test_a_delta_of_spooled_versions_is_the_delta_in_memory():
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(10_000, generator=gen).to(torch.bfloat16)
    new = old.clone()
    new[torch.randperm(10_000, generator=gen)[:700]] += 1
    layout = FlatLayout(("a", "b"), ((100, 50), (5000,)), torch.bfloat16)
    spool = weight_stream.Spool()
    try:
        files = []
        for flat in (new, old):
            f = spool.new(layout, "x")
            f.write(flat)
            f.close()
            files.append(f)
        held = weight_stream.delta(FlatWeights(new, layout), FlatWeights(old, layout), 2048, keep=True)
        spooled = weight_stream.delta(files[0], files[1], 2048, keep=True, spool=spool)
        assert held.count == spooled.count == 700
        pairs = [[(i.clone(), v.clone()) for i, v in d.pairs(333, torch.bfloat16)]  # spooled: reused buffers
                 for d in (held, spooled)]
        for d in pairs:
            assert torch.equal(torch.cat([i for i, _ in d]).long(), torch.nonzero(new.view(torch.int16)
                                                                                   != old.view(torch.int16)).squeeze(1))
        assert torch.equal(torch.cat([v for _, v in pairs[0]]), torch.cat([v for _, v in pairs[1]]))
        too_many = weight_stream.delta(FlatWeights(new + 1, layout), FlatWeights(old, layout), 2048, keep=True)
        assert not too_many.kept and too_many.count > 9000  # counted, but no smaller than in full: not kept
    finally:
        spool.close()


def test_the_protocol_between_two_processes_over_gloo():
    """The receiving process of the GPU tests and of bench/gpu_accept.py's IPC stage, over gloo: a full push then
    deltas in buckets, bit for bit."""
    gen = torch.Generator().manual_seed(2)
    layout = FlatLayout(("w",), ((50_000,),), torch.bfloat16)
    flat = torch.randn(50_000, generator=gen).to(torch.bfloat16)
    versions = [FlatWeights(flat, layout)]
    for _ in range(2):
        flat = flat.clone()
        flat[torch.randperm(50_000, generator=gen)[:1000]] += 1
        versions.append(FlatWeights(flat, layout))
    results = standin.run_transfer("gloo", versions, bucket_bytes=8192, timeout_s=60)
    assert [r["kind"] for r in results] == ["full", "delta", "delta"]
    assert all(r["equal"] for r in results)
    assert results[0]["bytes"] == 100_000 and results[1]["bytes"] < 100_000
