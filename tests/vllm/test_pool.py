"""``rollout.engine=vllm-server`` without vLLM: pools of servers, delta pushes and model-free relays, against
stand-in servers (tests/vllm/standin.py: real HTTP on 127.0.0.1, the real ``cohort-gloo`` receiver, no model).
What a stand-in cannot show (a real server's log-probs and loading) is tests/vllm/test_server.py's (vLLM)."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from cohort.trainer import wire
from cohort.trainer.config import RolloutSection, load_config
from cohort.trainer.engines.vllm_server import VLLMServerEngine
from cohort.trainer.flat_layout import FlatLayout, FlatWeights
from cohort.trainer.models import build_policy, build_tokenizer
from cohort.trainer.precision import resolve

STANDIN = Path(__file__).with_name("standin.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One stand-in server process on 127.0.0.1 (killed and started again on the same port)."""

    def __init__(self, vocab: int, delay_s: float = 0.0) -> None:
        self.port, self.vocab, self.delay_s = _free_port(), vocab, delay_s
        self.url = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(STANDIN), "--port", str(self.port), "--vocab",
                                      str(self.vocab), "--delay-s", str(self.delay_s)], start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{self.url}/health", timeout=1)
                return
            except httpx.HTTPError:
                assert self.proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def weights(self) -> dict:
        return httpx.get(f"{self.url}/weights", timeout=10).json()


@pytest.fixture
def tiny():
    cfg = load_config(None, [])
    policy, tokenizer = build_policy(cfg.model)  # float32 masters (the learner's)
    return policy, tokenizer


@pytest.fixture(scope="module")
def pair():
    """Two stand-in servers for the module (each completion call takes 0.4 s: a kill lands during one)."""
    vocab = len(build_tokenizer(load_config(None, []).model)[0])
    made = [Server(vocab, delay_s=0.4) for _ in range(2)]
    yield made
    for s in made:
        if s.proc.poll() is None:
            s.kill()


@pytest.fixture
def servers(pair):
    """The pair, both running (a test that killed one leaves it to be started again here)."""
    for s in pair:
        if s.proc.poll() is not None:
            s.start()
    return pair


def _digest(flat: torch.Tensor, layout: FlatLayout) -> str:
    digest = hashlib.sha256()
    for _, view in layout.views(flat):
        digest.update(view.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _adamw_steps(policy, steps: int, lr: float):
    """Optimizer steps as the learner takes them (AdamW on float32 masters), on an LM loss of random tokens."""
    opt = torch.optim.AdamW(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids = torch.randint(0, policy.config.vocab_size, (2, 12), generator=gen)
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        yield


def test_after_twenty_delta_pushes_the_server_holds_the_learners_bf16_copy_bit_for_bit(tiny, servers):
    policy, tokenizer = tiny
    cfg = RolloutSection(engine="vllm-server", weight_sync_timeout_s=30,
                         vllm={"servers": [servers[0].url], "full_push_every": 100})
    bf16 = resolve("bfloat16", torch.device("cpu"))  # float32 masters, bf16 pushes
    engine = VLLMServerEngine(cfg, policy, tokenizer, seed=0, precision=bf16)
    try:
        layout = FlatLayout.of(policy, torch.bfloat16)
        for _ in _adamw_steps(policy, 20, lr=1e-5):
            engine.sync_weights(policy)
        kinds = [r.kind for r in engine.pushed]
        assert kinds == ["full"] + ["delta"] * 20, kinds
        assert all(0 < r.changed < 1 for r in engine.pushed[1:]), [r.changed for r in engine.pushed]
        assert all(r.nbytes < engine.pushed[0].nbytes for r in engine.pushed[1:])
        held = servers[0].weights()
        assert held["version"] == 20 and held["tensors"] == len(layout.names)
        learner = wire.flat_parameters(policy, dtype=torch.bfloat16)
        assert held["sha256"] == _digest(learner, layout)  # every bit of every tensor
    finally:
        engine.close()


def test_every_kth_version_and_a_version_with_too_many_changes_go_in_full(tiny, servers):
    policy, tokenizer = tiny
    cfg = RolloutSection(engine="vllm-server", vllm={"servers": [servers[0].url], "full_push_every": 3})
    engine = VLLMServerEngine(cfg, policy, tokenizer, seed=0, precision=resolve("bfloat16", torch.device("cpu")))
    try:
        for _ in _adamw_steps(policy, 4, lr=1e-5):
            engine.sync_weights(policy)
        with torch.no_grad():  # every element changes: a delta would be 3 times the buffer
            for p in policy.parameters():
                p.add_(1.0)
        engine.sync_weights(policy)
        assert [r.kind for r in engine.pushed] == ["full", "delta", "delta", "full", "delta", "full"]
        assert servers[0].weights()["sha256"] == _digest(wire.flat_parameters(policy, dtype=torch.bfloat16),
                                                         FlatLayout.of(policy, torch.bfloat16))
    finally:
        engine.close()


def test_a_pool_loses_no_prompt_when_a_server_dies_and_the_server_rejoins_with_a_full_push(tiny, servers, capfd):
    """A relay's engine (no model: flat buffers and their layout) over two servers; one is killed during a
    generation call: its prompts go to the other, one line says so; it comes back on the same port and rejoins
    with a full push at the next call after its backoff."""
    policy, tokenizer = tiny
    layout = FlatLayout.of(policy, torch.bfloat16)
    versions = iter(_adamw_steps(policy, 10, lr=1e-5))

    def version() -> FlatWeights:
        next(versions)
        return FlatWeights(wire.flat_parameters(policy, dtype=torch.bfloat16), layout)

    cfg = RolloutSection(engine="vllm-server", max_completion_length=5, weight_sync_timeout_s=30,
                         vllm={"servers": [s.url for s in servers]})
    engine = VLLMServerEngine(cfg, None, tokenizer, seed=0)
    try:
        engine.sync_weights(version())
        prompts = [[5 + i, 6 + i] for i in range(8)]
        batch = engine.generate(prompts, 3)
        assert batch.completion_ids.shape == (24, 5)
        assert {r.url for r in engine.pushed} == {s.url for s in servers}

        box = {}
        thread = threading.Thread(target=lambda: box.update(batch=engine.generate(prompts, 3)))
        thread.start()
        time.sleep(0.15)  # both servers hold a share of the call
        servers[1].kill()
        thread.join(30)
        batch = box["batch"]
        assert batch.completion_ids.shape == (24, 5)  # no prompt lost: the dead server's share went to the other
        assert [row[:2].tolist() for row in batch.input_ids[::3]] == prompts  # in order
        lines = [ln for ln in capfd.readouterr().err.splitlines() if servers[1].url in ln]
        assert len(lines) == 1 and "failed a completion call (4 prompts)" in lines[0], lines

        engine.sync_weights(version())  # the dead server misses this version
        assert engine.pushed[-1].url == servers[0].url and engine.pushed[-1].kind == "delta"
        servers[1].start()
        time.sleep(1.2)  # its backoff (1 s)
        engine.sync_weights(version())
        back = [r for r in engine.pushed if r.url == servers[1].url]
        assert back[-2].kind == "full" and back[-1].kind == "delta", back  # rejoined in full, then deltas
        err = capfd.readouterr().err
        assert f"vLLM server {servers[1].url} rejoined the pool" in err, err
        assert servers[0].weights()["sha256"] == servers[1].weights()["sha256"]
        assert engine.generate(prompts, 2).completion_ids.shape == (16, 5)
    finally:
        engine.close()


def test_a_pool_with_every_server_gone_fails_in_one_line_naming_them(tiny, servers):
    policy, tokenizer = tiny
    cfg = RolloutSection(engine="vllm-server", weight_sync_timeout_s=2, vllm={"servers": [s.url for s in servers]})
    engine = VLLMServerEngine(cfg, policy, tokenizer, seed=0)
    try:
        for s in servers:
            s.kill()
        with pytest.raises(RuntimeError, match="no vLLM server of .* answered within rollout.weight_sync_timeout_s"):
            engine.generate([[5, 6]], 2)
    finally:
        engine.close()


def test_a_relay_worker_feeds_a_pipelined_run_from_two_servers(tmp_path, servers):
    """``cohort train`` with rollout.max_staleness=1 over two stand-in servers: the rollout worker (a relay: no
    model, the learner's layout) pushes every version to both, in the compute dtype (bf16 here)."""
    out = tmp_path / "run"
    cmd = [str(Path(sys.executable).parent / "cohort"), "train", "rollout.engine=vllm-server",
           f"rollout.vllm.servers=[{servers[0].url},{servers[1].url}]", "rollout.max_staleness=1",
           "run.max_steps=4", f"run.output_dir={out}", "run.target_reward=null", "run.progress=false",
           "run.plot=false", "run.tensorboard=false", "model.dtype=bfloat16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    held = [s.weights() for s in servers]
    # both hold the newest version (the relay pushed every one to both); sync_weights counts from 1
    assert held[0]["sha256"] == held[1]["sha256"] and held[0]["weight_version"] == held[1]["weight_version"]
    assert int(held[0]["weight_version"]) >= 3, held
