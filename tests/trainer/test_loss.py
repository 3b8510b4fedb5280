"""The clipped objective, k3 KL and every aggregation, with hand-computed numbers and a loop reference."""

from __future__ import annotations

import math

import pytest
import torch

from cohort.trainer.loss import LossConfig, LossInputs, Normaliser, clipped_objective, k3_kl, normaliser, policy_loss


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.1, 2.0, 2.2),  # inside the clip: rho * A
        (0.9, -2.0, -1.8),  # inside, negative advantage
        (1.5, 1.0, 1.2),  # above 1+eps, A > 0: clipped to 1.2 * A
        (1.5, -1.0, -1.5),  # above 1+eps, A < 0: min keeps the unclipped (more pessimistic) term
        (0.5, 1.0, 0.5),  # below 1-eps, A > 0: unclipped is smaller
        (0.5, -1.0, -0.8),  # below 1-eps, A < 0: clipped to 0.8 * A
    ],
)
def test_clipped_objective_hand_computed(ratio, adv, expected):
    got = clipped_objective(torch.tensor([[ratio]]), torch.tensor([[adv]]), 0.2, 0.2)
    assert got.item() == pytest.approx(expected, abs=1e-6)


def test_clip_higher_is_asymmetric():
    got = clipped_objective(torch.tensor([[1.3, 1.3]]), torch.tensor([[1.0, 1.0]]), 0.2, 0.28)
    assert got.tolist()[0] == pytest.approx([1.28, 1.28], abs=1e-6)


def test_k3_kl_hand_computed():
    cur = torch.tensor([[math.log(0.5), math.log(0.2), math.log(0.3)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.2), math.log(0.6)]])
    got = k3_kl(cur, ref)
    # exp(d) - d - 1 with d = ref - cur = log(0.5), 0, log(2)
    expected = [0.5 - math.log(0.5) - 1, 0.0, 2 - math.log(2) - 1]
    assert got.tolist()[0] == pytest.approx(expected, abs=1e-6)
    assert (got >= 0).all()


def two_by_three():
    """2 sequences x 3 tokens; the second sequence has 2 completion tokens."""
    logprobs = torch.log(torch.tensor([[0.5, 0.6, 0.3], [0.4, 0.9, 0.1]]))
    old = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.5, 0.9, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.6, 0.3], [0.4, 0.45, 0.1]]))
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3])  # (B, T): one advantage per sequence, on each token
    return logprobs, old, ref, mask, adv


def per_token_by_hand(beta):
    # ratios: [1, 1.5, 1], [0.8, 1, -]; objective min(rho A, clip A):
    #   row 0 (A=+1): 1, min(1.5, 1.2)=1.2, 1      row 1 (A=-1): min(-0.8, -0.8)=-0.8, -1
    pg = [[1.0, 1.2, 1.0], [-0.8, -1.0, 0.0]]
    # k3 with d = ref - cur: row 0: log(0.5), 0, 0; row 1: 0, log(0.5)
    k = 0.5 - math.log(0.5) - 1
    kl = [[k, 0.0, 0.0], [0.0, k, 0.0]]
    return [[-pg[i][j] + beta * kl[i][j] for j in range(3)] for i in range(2)]


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_each_aggregation_hand_computed(beta):
    logprobs, old, ref, mask, adv = two_by_three()
    tok = per_token_by_hand(beta)
    row0, row1 = sum(tok[0]), tok[1][0] + tok[1][1]
    expected = {
        "grpo": (row0 / 3 + row1 / 2) / 2,
        "bnpo": (row0 + row1) / 5,
        "dapo": (row0 + row1) / 5,
        "dr_grpo": (row0 + row1) / (2 * 4),  # max_completion_length = 4
    }
    for loss_type, want in expected.items():
        cfg = LossConfig(0.2, 0.2, beta)
        den = normaliser(mask, loss_type, 4)
        out = policy_loss(LossInputs(logprobs, old, adv, mask, ref), cfg, den)
        assert out.loss.item() == pytest.approx(want, abs=1e-6), loss_type
    out = policy_loss(LossInputs(logprobs, old, adv, mask, ref), LossConfig(beta=beta), Normaliser("grpo", 2.0))
    assert out.clipped_tokens.item() == 1.0  # only (row 0, token 1): rho 1.5 > 1.2 with A > 0
    assert out.tokens.item() == 5.0


def test_fully_masked_row_contributes_nothing():
    logprobs, old, ref, mask, adv = two_by_three()
    mask[1] = False
    cfg = LossConfig(beta=0.04)
    full = policy_loss(LossInputs(logprobs, old, adv, mask, ref), cfg, normaliser(mask, "grpo", 4))
    alone = policy_loss(LossInputs(logprobs[:1], old[:1], adv[:1], mask[:1], ref[:1]), cfg, Normaliser("grpo", 1.0))
    assert full.loss.item() == pytest.approx(alone.loss.item(), abs=1e-7)


def reference_loss(logprobs, old, ref, mask, adv, cfg: LossConfig, loss_type: str, max_completion_length: int):
    """The seeds' formula token by token: -[min(rho A, clip(rho) A) - beta k3], then the aggregation."""
    rows = []
    for i in range(logprobs.shape[0]):
        terms = []
        for t in range(logprobs.shape[1]):
            if not mask[i, t]:
                continue
            rho = math.exp(logprobs[i, t] - old[i, t])
            a = float(adv[i, t])
            obj = min(rho * a, min(max(rho, 1 - cfg.epsilon), 1 + cfg.epsilon_high) * a)
            d = float(ref[i, t] - logprobs[i, t])
            obj -= cfg.beta * (math.exp(d) - d - 1)
            terms.append(-obj)
        rows.append(terms)
    rows = [r for r in rows if r]
    if loss_type == "grpo":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if loss_type in ("bnpo", "dapo"):
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (len(rows) * max_completion_length)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_equals_reference_formula_on_random_batches(loss_type):
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        b, t = 6, 7
        logprobs = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 3
        old = logprobs + (torch.rand(b, t, generator=gen, dtype=torch.float64) - 0.5)
        ref = logprobs + (torch.rand(b, t, generator=gen, dtype=torch.float64) - 0.5)
        lengths = torch.randint(1, t + 1, (b,), generator=gen)
        mask = torch.arange(t)[None] < lengths[:, None]
        adv = torch.randn(b, t, generator=gen, dtype=torch.float64)  # per token (process supervision)
        cfg = LossConfig(0.2, 0.28, 0.04)
        got = policy_loss(LossInputs(logprobs, old, adv, mask, ref), cfg, normaliser(mask, loss_type, t))
        assert got.loss.item() == pytest.approx(reference_loss(logprobs, old, ref, mask, adv, cfg, loss_type, t), abs=1e-6)


def test_micro_batches_sum_to_the_full_batch_loss_and_gradient():
    gen = torch.Generator().manual_seed(2)
    b, t = 8, 5
    base = -torch.rand(b, t, generator=gen, dtype=torch.float64)
    old = base + 0.1 * torch.randn(b, t, generator=gen, dtype=torch.float64)
    mask = torch.arange(t)[None] < torch.randint(1, t + 1, (b,), generator=gen)[:, None]
    adv = torch.randn(b, t, generator=gen, dtype=torch.float64)
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        cfg = LossConfig()
        den = normaliser(mask, loss_type, t)
        full_lp = base.clone().requires_grad_(True)
        policy_loss(LossInputs(full_lp, old, adv, mask), cfg, den).loss.backward()
        split_lp = base.clone().requires_grad_(True)
        total = 0.0
        for s in (slice(0, 3), slice(3, 8)):
            out = policy_loss(LossInputs(split_lp[s], old[s], adv[s], mask[s]), cfg, den, micro_batches=2)
            out.loss.backward()
            total += out.loss.item()
        assert torch.allclose(full_lp.grad, split_lp.grad, atol=1e-12), loss_type


def test_gradient_is_zero_where_the_clip_is_active():
    lp = torch.log(torch.tensor([[0.6, 0.6]], dtype=torch.float64)).requires_grad_(True)
    old = torch.log(torch.tensor([[0.4, 0.59]], dtype=torch.float64))  # rho = 1.5 (clipped), ~1.017 (inside)
    out = policy_loss(LossInputs(lp, old, torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool)),
                      LossConfig(), Normaliser("dapo", 2.0))
    out.loss.backward()
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-(0.6 / 0.59) / 2, rel=1e-9)  # d(-rho A / 2)/d logp = -rho/2
