"""Truncated importance weights (trainer.is_correction) against hand-computed values; no vllm needed."""

import math

import pytest
import torch

from cohort.trainer.is_correction import mismatch_metrics, rollout_correction, truncated_is_weights
from cohort.trainer.loss import LossConfig, LossInputs, Normaliser, policy_loss

# 2 sequences x 3 tokens; the second has one padding position.
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
ROLL = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, -0.5, 0.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_token_level_weights_are_capped_ratios():
    w = truncated_is_weights(OLD, ROLL, MASK, "token", cap=1.5)
    # deltas: [0.5, -1.0, 0.0], [0.0, -2.5, pad]
    expected = torch.tensor([[min(math.exp(0.5), 1.5), math.exp(-1.0), 1.0],
                             [1.0, math.exp(-2.5), 1.0]])
    torch.testing.assert_close(w, expected)
    assert w[0, 0] == pytest.approx(1.5)  # exp(0.5) = 1.6487 capped


def test_token_level_uncapped_below_cap():
    w = truncated_is_weights(OLD, ROLL, MASK, "token", cap=10.0)
    assert w[0, 0] == pytest.approx(math.exp(0.5))


def test_sequence_level_uses_sum_of_log_ratios():
    w = truncated_is_weights(OLD, ROLL, MASK, "sequence", cap=3.0)
    # row 0: 0.5 - 1.0 + 0 = -0.5; row 1: 0 - 2.5 (padding ignored) = -2.5
    expected = torch.tensor([[math.exp(-0.5)] * 3, [math.exp(-2.5), math.exp(-2.5), 1.0]])
    torch.testing.assert_close(w, expected)


def test_sequence_level_cap_never_overflows():
    old = torch.zeros(1, 400)
    roll = torch.full((1, 400), -5.0)  # sum of log ratios = 2000: exp would overflow
    w = truncated_is_weights(old, roll, torch.ones(1, 400, dtype=torch.bool), "sequence", cap=2.0)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w, torch.full((1, 400), 2.0))


def test_equal_logprobs_give_unit_weights():
    for level in ("token", "sequence"):
        w = truncated_is_weights(OLD, OLD, MASK, level, cap=2.0)
        torch.testing.assert_close(w, torch.ones_like(OLD))


def test_bad_level_and_cap_are_errors():
    with pytest.raises((ValueError, TypeError), match="level"):  # TypeError: the run-time type check (conftest)
        truncated_is_weights(OLD, ROLL, MASK, "tokens", cap=2.0)
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(OLD, ROLL, MASK, "token", cap=0.0)


def test_mismatch_metrics_by_hand():
    w = truncated_is_weights(OLD, ROLL, MASK, "token", cap=1.5)
    m = mismatch_metrics(OLD, ROLL, MASK, w, cap=1.5)
    # |deltas| over 5 masked tokens: 0.5, 1.0, 0.0, 0.0, 2.5
    assert m["rollout/logp_abs_diff_mean"] == pytest.approx(4.0 / 5)
    assert m["rollout/logp_abs_diff_max"] == pytest.approx(2.5)
    assert m["rollout/is_weight_mean"] == pytest.approx((1.5 + math.exp(-1) + 1 + 1 + math.exp(-2.5)) / 5)
    assert m["rollout/is_capped_frac"] == pytest.approx(1 / 5)
    assert mismatch_metrics(OLD, ROLL, torch.zeros_like(MASK)) == {}


def test_weights_scale_the_policy_gradient_in_the_loss():
    """On-policy (ratio 1), grpo aggregation: d loss / d logp_t = -A_i * w_t / (|seq_i| * rows)."""
    logprobs = OLD.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0])
    w = truncated_is_weights(OLD, ROLL, MASK, "token", cap=1.5)
    out = policy_loss(LossInputs(logprobs, OLD, adv[:, None].expand_as(w), MASK, is_weights=w), LossConfig(), Normaliser("grpo", 2.0))
    out.loss.backward()
    lengths = MASK.sum(1, keepdim=True).float()
    expected = -(adv[:, None] * w) / lengths / 2.0 * MASK
    torch.testing.assert_close(logprobs.grad, expected)


def test_rollout_correction_off_or_without_engine_logprobs():
    assert rollout_correction(OLD, None, MASK, "token", 3.0) == (None, {})
    w, m = rollout_correction(OLD, ROLL, MASK, "none", 3.0)
    assert w is None and m["rollout/logp_abs_diff_mean"] == pytest.approx(0.8) and "rollout/is_weight_mean" not in m
    w, m = rollout_correction(OLD, ROLL, MASK, "sequence", 3.0)
    torch.testing.assert_close(w, truncated_is_weights(OLD, ROLL, MASK, "sequence", 3.0))


@pytest.mark.parametrize("iterations", [1, 2])
def test_the_first_pass_is_the_proximal_policy_of_the_decoupled_objective(iterations):
    """The asynchronous pipeline hands the learner the behaviour log-probs and no pi_old: its first pass's own
    log-probs are the proximal policy. The update equals one given pi_old = a no-grad forward of the same
    policy and the truncated weights pi_old / pi_behaviour computed outside, and reports the same metrics."""
    import dataclasses

    from cohort.trainer.config import load_config
    from cohort.trainer.learner import Learner, UpdateBatch
    from cohort.trainer.models import build_policy

    cfg = load_config(None, ["model.tiny={hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, "
                             "num_attention_heads: 2}", "grpo.prompts_per_step=2", "grpo.num_generations=2",
                             "grpo.beta=0", "rollout.is_cap=1.5", "optim.micro_batch_size=2"])
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 19, (4, 7), generator=g)
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[0, 2] = False
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2])[:, None].expand(-1, 3)
    behaviour = -torch.rand(4, 3, generator=g) * 3  # an older policy's log-probs of the same tokens
    models = []
    for inside in (True, False):
        policy, _ = build_policy(cfg.model)
        learner = Learner(policy, cfg)
        batch = UpdateBatch(ids, torch.ones_like(ids), mask, adv, None, None)
        if inside:
            batch = dataclasses.replace(batch, behaviour_logprobs=behaviour)
        else:
            prox = learner.logprobs(ids, torch.ones_like(ids), 3)
            weights, _ = rollout_correction(prox, behaviour, mask, "token", 1.5)
            batch = dataclasses.replace(batch, old_logprobs=prox, is_weights=weights)
        stats = learner.update(batch, iterations)
        models.append((policy, stats))
    (a, inside), (b, outside) = models
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6), (pa - pb).abs().max()
    assert inside["rollout/is_weight_mean"] != 1.0 and "rollout/is_capped_frac" in inside
    assert abs(inside["loss/policy"] - outside["loss/policy"]) < 1e-5
