"""The asynchronous pipeline with a vLLM rollout worker (needs vllm; pytest -m vllm).

`cohort train rollout.engine=vllm rollout.max_staleness=1`: the learner spawns one rollout worker, which runs
vLLM's engine core in a process of its own; every weight version reaches it by torch.distributed (gloo)
and goes into vLLM through vLLM's own checkpoint loader. The embedded task at learning rate 3e-3, as
test_train.py, so a rise within 12 steps shows that the new weights reached the sampler. The run's output is
captured through pipes, which an engine core left running would hold open: the test would time out (it did,
before the worker shut its engine core down on leaving).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STEPS = 12


def test_a_vllm_rollout_worker_feeds_the_asynchronous_pipeline(tmp_path: Path):
    out = tmp_path / "run"
    cohort = Path(sys.executable).parent / "cohort"
    cmd = [str(cohort), "train", "model.tiny.num_attention_heads=2", "rollout.engine=vllm", "rollout.max_staleness=1",
           "optim.learning_rate=0.003", f"run.max_steps={STEPS}", f"run.output_dir={out}", "run.target_reward=null",
           "run.progress=false", "run.plot=false", "run.tensorboard=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["async/weight_version"] for r in records] == [float(s) for s in range(1, STEPS + 1)]
    assert max(r["async/staleness_max"] for r in records) == 1.0  # asynchronous, and within the bound
    # version 0 is the learner's own start: vLLM's behaviour log-probs are the learner's (float32 on CPU)
    assert records[0]["async/staleness_max"] == 0.0 and records[0]["rollout/logp_abs_diff_mean"] < 1e-4, records[0]
    rewards = [r["reward/mean"] for r in records]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-4:]) / 4
    assert last > first + 0.04, rewards  # the worker samples from the new weights (vLLM left at version 0 stays flat)
    assert (out / "final" / "model.safetensors").exists()
