"""One round of experience (``trainer.collect``) with dynamic sampling on, against a real arith server on
loopback: every per-row tensor of the final round (IS weights, old and reference log-probs) belongs to
its own row, for kept and for resampled groups alike."""

from __future__ import annotations

import math

import pytest
import torch

from cohort.rpc.launch import ServiceProcess
from cohort.trainer.collect import collect_round
from cohort.trainer.reference import reference_logprobs
from cohort.trainer.rounds.round import Sources
from cohort.trainer.config import load_config
from cohort.trainer.data import PromptSampler, encode_prompts, load_examples
from cohort.trainer.engines.hf import TransformersEngine
from cohort.trainer.is_correction import truncated_is_weights
from cohort.trainer.learner import Learner, batched_logprobs
from cohort.trainer.metrics import StepTimer
from cohort.trainer.models import build_policy, frozen_reference
from cohort.trainer.scoring import Scorer
from cohort.trainer.distributed import SINGLE

OFFSET = 0.05  # call k's sampler log-probs are the policy's + k * OFFSET: its IS weights are exp(-k * OFFSET)


class ReportingEngine(TransformersEngine):
    """The transformers engine reporting its own sampling log-probs, as vLLM does: the policy's log-probs of
    the sampled tokens (the module forward), shifted by ``k * OFFSET`` in the engine's k-th generate call,
    a stand-in for another kernel's rounding that makes every row's IS weight name the call that made it."""

    calls = 0

    def generate(self, prompts: list[list[int]], num_generations: int):
        batch = super().generate(prompts, num_generations)
        self.calls += 1
        t = batch.completion_ids.shape[1]
        own = batched_logprobs(self.policy, batch.input_ids, batch.attention_mask, t, self.cfg.temperature, len(batch))
        batch.rollout_logprobs = torch.where(batch.completion_mask.bool(), own + self.calls * OFFSET, 0.0)  # (B, T)
        return batch


@pytest.fixture(scope="module")
def arith():
    with ServiceProcess(["arith"]) as proc:
        yield proc


def test_resampled_rows_carry_their_own_is_weights_and_logprobs(arith):
    cfg = load_config(None, [
        "model.tiny={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2}",
        "data.arithmetic={num_prompts: 40, max_operand: 4}",
        f'scoring.verifiers=[{{name: arith, endpoints: ["{arith.endpoint}"], '
        'options: {correct_weight: "0.8", format_weight: "0.2", require_eos: "1"}}]',
        "grpo.prompts_per_step=4", "grpo.num_generations=4", "rollout.max_completion_length=3",
        "rollout.generation_chunks=2", "grpo.beta=0.04", "grpo.dynamic_sampling=true", "grpo.max_resample_rounds=3",
        "rollout.is_correction=token", "rollout.is_cap=10", "run.torch_threads=1"])
    torch.manual_seed(0)
    policy, tok = build_policy(cfg.model)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # a policy whose groups are sometimes flat, sometimes not
    reference = frozen_reference(policy, cfg.model)
    learner = Learner(policy, cfg)
    examples = load_examples(cfg.data)
    engine = ReportingEngine(cfg.rollout, policy, tok, seed=1)
    scorer = Scorer(cfg.scoring, {"arith": [arith.endpoint]})
    try:
        src = Sources(engine, scorer, examples, encode_prompts(examples, tok, cfg.data),
                      PromptSampler(len(examples), 4, 0), cfg, int(tok.pad_token_id),
                      reference_logprobs(reference, cfg), learner.logprobs)
        timer = StepTimer()
        rnd = collect_round(src, SINGLE, timer)
    finally:
        scorer.close()
    b, t = len(rnd.batch), rnd.batch.completion_ids.shape[1]
    mask = rnd.batch.completion_mask.bool()  # (B, T)
    assert b == 16 and rnd.scores.rewards.shape == (4, 4)
    assert rnd.resampled > 0 and engine.calls > 1  # groups were replaced
    # the call that made each row, read off its weights: kept rows of call 1 and fresh ones of later calls
    calls = [round(-math.log(float(rnd.is_weights[i][mask[i]].mean())) / OFFSET) for i in range(b)]
    assert 1 in calls and max(calls) > 1, calls
    for i, k in enumerate(calls):
        torch.testing.assert_close(rnd.is_weights[i][mask[i]], torch.full((int(mask[i].sum()),), math.exp(-k * OFFSET)),
                                   atol=1e-4, rtol=0)
    # and each row's tensors are what a fresh computation on the final rows gives
    ids, att = rnd.batch.input_ids, rnd.batch.attention_mask
    old = learner.logprobs(ids, att, t)
    torch.testing.assert_close(rnd.old_logprobs, old, atol=1e-5, rtol=0)
    torch.testing.assert_close(rnd.ref_logprobs, reference_logprobs(reference, cfg)(ids, att, t), atol=1e-5, rtol=0)
    expected = truncated_is_weights(old, rnd.batch.rollout_logprobs, mask, "token", 10.0)
    torch.testing.assert_close(rnd.is_weights, expected, atol=1e-5, rtol=0)
    assert rnd.is_metrics["rollout/is_weight_mean"] == pytest.approx(float(expected[mask].mean()), abs=1e-5)
    assert timer.seconds["generate"] > 0 and timer.seconds["verify_wait"] >= 0
