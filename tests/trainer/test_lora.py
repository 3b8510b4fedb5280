"""LoRA through peft (``model.lora``): only the adapters train, checkpoints hold them alone and resume exactly, the
frozen base (adapters off) is the reference without a copy, and final/ is a plain merged model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from cohort.rpc.launch import ServiceProcess
from cohort.trainer import checkpoint, metrics
from cohort.trainer.reference import reference_logprobs
from cohort.trainer.config import load_config
from cohort.trainer.forward import token_logprobs
from cohort.trainer.learner import Learner, UpdateBatch
from cohort.trainer.models import build_policy, frozen_reference
from cohort.trainer.train import train
from cohort.trainer.wire import flat_parameters



def small_config(out, endpoint: str, *extra: str):
    """A one-layer tiny model on a small arithmetic task, scored by the arith server at ``endpoint``."""
    verifier = f'[{{name: arith, weight: 1.0, endpoints: ["{endpoint}"], options: {{require_eos: "1"}}}}]'
    return load_config(None, ["model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, "
                              "num_attention_heads: 2}", "data.arithmetic={num_prompts: 40, max_operand: 4}",
                              f"scoring.verifiers={verifier}", "grpo.prompts_per_step=4", "grpo.num_generations=4",
                              "rollout.max_completion_length=3", "run.torch_threads=1", "run.progress=false",
                              f"run.output_dir={out}", *extra])


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


LORA = ("model.lora={rank: 4, alpha: 8}", "optim.learning_rate=0.01")


def test_only_adapters_are_trained_and_pushed():
    cfg = load_config(None, ["model.lora.rank=4"])
    policy, _ = build_policy(cfg.model)
    trained = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    n_trained = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    assert n_trained < sum(p.numel() for p in policy.parameters()) / 5
    assert flat_parameters(policy).numel() == n_trained  # the weight push carries the adapters alone
    learner = Learner(policy, cfg)
    assert sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"]) == n_trained


def test_the_reference_is_the_base_with_adapters_off():
    cfg = load_config(None, ["model.lora.rank=4", "grpo.beta=0.04", "optim.learning_rate=0.05"])
    policy, tok = build_policy(cfg.model)
    base, _ = build_policy(load_config(None, ["grpo.beta=0.04"]).model)  # the same init, no adapters
    assert frozen_reference(policy, cfg.model) is policy  # no copy of the weights
    ref = reference_logprobs(frozen_reference(policy, cfg.model), cfg)
    ids = torch.randint(4, len(tok), (4, 10))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = token_logprobs(base, ids, mask, 5)[0]
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])[:, None].expand(4, 5).contiguous()
    Learner(policy, cfg).update(UpdateBatch(ids, mask, torch.ones(4, 5, dtype=torch.bool), adv, None, want), 1)
    with torch.no_grad():
        moved = token_logprobs(policy, ids, mask, 5)[0]
    assert not torch.allclose(moved, want)  # the adapters moved the policy
    torch.testing.assert_close(ref(ids, mask, 5), want, rtol=0, atol=1e-6)  # the reference did not move


def test_lora_resume_is_exact_and_final_is_a_merged_plain_model(tmp_path, arith):
    eps = {"arith": [arith.endpoint]}
    straight = train(small_config(tmp_path / "a", arith.endpoint, "run.max_steps=4", "grpo.beta=0.04", *LORA), eps)
    first = train(small_config(tmp_path / "b", arith.endpoint, "run.max_steps=2", "grpo.beta=0.04", *LORA), eps)
    resumed = train(small_config(tmp_path / "b", arith.endpoint, "run.max_steps=4", "grpo.beta=0.04", *LORA), eps)
    assert [r["step"] for r in resumed] == [3, 4]
    assert [metrics.deterministic(r) for r in straight] == [metrics.deterministic(r) for r in first + resumed]
    cfg = small_config(tmp_path / "b", arith.endpoint, *LORA)
    policy, _ = build_policy(cfg.model)
    init = {n: p.detach().clone() for n, p in policy.named_parameters()}
    checkpoint.load(tmp_path / "b" / "checkpoints" / "step_000004", policy, Learner(policy, cfg).optimizer)
    changed = {n for n, p in policy.named_parameters() if not torch.equal(p, init[n])}
    assert changed and all("lora_" in n for n in changed)  # adapters restored; the base is the config's own
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "a" / "final")  # loads as a plain model: merged
    assert not any("lora" in n for n, _ in final.named_parameters())
    assert not (tmp_path / "a" / "final" / "adapter_config.json").exists()
