"""Config validation and overrides; the embedded task and the prompt order are deterministic."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from cohort.trainer.config import ArithmeticTask, load_config
from cohort.trainer.data import PromptSampler, arithmetic_task
from cohort.verifiers.records import read_tasks


def test_embedded_default_is_valid_and_its_reward_max_is_one():
    cfg = load_config(None)
    assert cfg.model.tiny is not None and cfg.data.arithmetic is not None
    assert {v.name for v in cfg.scoring.verifiers} == {"math", "arith"}
    assert sum(v.weight for v in cfg.scoring.verifiers) == pytest.approx(1.0)
    assert cfg.run.target_reward == 0.9


def test_overrides_are_typed_and_validated():
    cfg = load_config(None, ["grpo.beta=0.04", "grpo.loss_type=dr_grpo", "optim.micro_batch_size=64"])
    assert cfg.grpo.beta == 0.04 and cfg.grpo.loss_type == "dr_grpo"
    with pytest.raises(ValidationError, match="loss_type"):
        load_config(None, ["grpo.loss_type=ppo"])
    with pytest.raises(ValidationError, match="micro_batch_size"):
        load_config(None, ["optim.micro_batch_size=100"])  # does not divide P*G = 256
    with pytest.raises(ValidationError, match="Extra inputs"):
        load_config(None, ["grpo.betta=0.1"])
    with pytest.raises(ValidationError, match="exactly one"):
        load_config(None, ["model.tiny=null"])  # none of path, name, tiny (model.path=/x replaces tiny)
    with pytest.raises(ValueError, match="section.field=value"):
        load_config(None, ["grpo.beta"])


def test_the_pipeline_takes_transformers_vllm_or_vllm_server_workers_that_load_every_version():
    cfg = load_config(None, ["rollout.max_staleness=1", "rollout.engine=vllm"])  # vLLM's engine core under each worker
    assert cfg.rollout.engine == "vllm" and cfg.rollout.workers == 1
    with pytest.raises(ValidationError, match="sync_every must be 1"):
        load_config(None, ["rollout.max_staleness=1", "rollout.sync_every=2"])
    with pytest.raises(ValidationError, match="sync_method must be auto or reload_from_folder"):
        load_config(None, ["rollout.max_staleness=1", "rollout.engine=vllm", "rollout.vllm.sync_method=reload_weights"])
    with pytest.raises(ValidationError, match="transformers, vllm or vllm-server"):
        load_config(None, ["rollout.max_staleness=1", "rollout.engine=llama"])
    # DDP/FSDP2 learners each run a pipeline of their own (tests/trainer/test_pipeline.py runs them)
    assert load_config(None, ["rollout.max_staleness=1", "distributed.parallel=ddp"]).distributed.parallel == "ddp"


def test_arithmetic_task_is_deterministic():
    a = arithmetic_task(ArithmeticTask(num_prompts=50, seed=3))
    b = arithmetic_task(ArithmeticTask(num_prompts=50, seed=3))
    assert a == b and len(a) == 50
    for ex in a:
        x, y = ex.prompt[:-1].split("+")
        assert int(ex.answer) == int(x) + int(y) and 0 <= int(x) <= 4


def test_sampler_follows_trl_permutation_and_resumes_by_position():
    s = PromptSampler(256, 8, seed=0)
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(0)).tolist()
    assert s.next() == perm[:8] and s.next() == perm[8:16]
    t = PromptSampler(256, 8, seed=0)
    t.position = s.position
    assert t.next() == s.next()
    small = PromptSampler(3, 2, seed=0)
    drawn = small.next() + small.next() + small.next()
    assert sorted(drawn[:3]) == [0, 1, 2]  # one full epoch before repeating


def test_jsonl_errors_name_the_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "1+1=", "answer": 2}\n{"prompt": "x"}\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2"):
        read_tasks(p, format="jsonl")


def test_attempt_timeout_reaches_the_client_policy():
    """scoring.attempt_timeout_s is the retry policy's per-attempt timeout; unset keeps the split default."""
    from cohort.verifiers.client import VerifierClient

    assert load_config(None, []).scoring.attempt_timeout_s is None
    cfg = load_config(None, ["scoring.attempt_timeout_s=12.5"])
    assert cfg.scoring.attempt_timeout_s == 12.5
    client = VerifierClient({"arith": ["127.0.0.1:1"]}, timeout_s=cfg.scoring.timeout_s,
                            attempt_timeout_s=cfg.scoring.attempt_timeout_s)
    assert client.policy.attempt_timeout_s == 12.5
    with pytest.raises((ValidationError, ValueError)):
        load_config(None, ["scoring.attempt_timeout_s=0"])
