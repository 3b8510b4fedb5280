"""Group advantages with hand-computed numbers, masking, and a loop-based reference formula."""

from __future__ import annotations

import math

import pytest
import torch

from cohort.trainer.advantages import group_advantages

EPS = 1e-4


def test_two_right_two_wrong_hand_computed():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    out = group_advantages(rewards, valid, "group", EPS)
    # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = 0.5773503
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert out.advantages.tolist()[0] == pytest.approx([a, -a, -a, a], abs=1e-6)
    assert out.included.all()


def test_zero_std_group_contributes_nothing():
    rewards = torch.tensor([[0.7, 0.7, 0.7], [1.0, 0.0, 0.0]])
    out = group_advantages(rewards, torch.ones(2, 3, dtype=torch.bool), "group", EPS)
    assert out.advantages[0].tolist() == [0.0, 0.0, 0.0]
    assert out.included[0].tolist() == [False, False, False]
    assert out.informative_groups.tolist() == [False, True]
    # second group: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert out.advantages[1].tolist() == pytest.approx([(2 / 3) / (s + EPS), -(1 / 3) / (s + EPS), -(1 / 3) / (s + EPS)], abs=1e-6)


def test_one_valid_rollout_contributes_nothing():
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    valid = torch.tensor([[True, False, False]])
    out = group_advantages(rewards, valid, "group", EPS)
    assert out.advantages.tolist() == [[0.0, 0.0, 0.0]]
    assert not out.included.any()


def test_masked_rollouts_do_not_enter_the_statistics():
    # the masked rollout has a huge (meaningless) reward: it must not move the mean or std
    rewards = torch.tensor([[1.0, 0.0, 1000.0, 1.0]])
    valid = torch.tensor([[True, True, False, True]])
    out = group_advantages(rewards, valid, "group", EPS)
    # valid: [1, 0, 1], mean 2/3, unbiased std sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3)
    s = math.sqrt(1 / 3)
    expected = [(1 / 3) / (s + EPS), -(2 / 3) / (s + EPS), 0.0, (1 / 3) / (s + EPS)]
    assert out.advantages[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert out.included.tolist() == [[True, True, False, True]]
    # identical to the group without the masked rollout
    alone = group_advantages(torch.tensor([[1.0, 0.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool), "group", EPS)
    assert out.advantages[0, [0, 1, 3]].tolist() == pytest.approx(alone.advantages[0].tolist(), abs=1e-7)


def test_scale_none_and_batch():
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.0]])
    valid = torch.ones(2, 2, dtype=torch.bool)
    none = group_advantages(rewards, valid, "none", EPS)
    assert none.advantages.flatten().tolist() == pytest.approx([0.5, -0.5, 0.25, -0.25], abs=1e-7)
    batch = group_advantages(rewards, valid, "batch", EPS)
    std = torch.tensor([1.0, 0.0, 0.5, 0.0]).std().item()  # unbiased std of the whole round
    assert batch.advantages.flatten().tolist() == pytest.approx(
        [0.5 / (std + EPS), -0.5 / (std + EPS), 0.25 / (std + EPS), -0.25 / (std + EPS)], abs=1e-6)


def reference_advantages(rewards, valid, eps):
    """The seeds' formula, one group at a time with Python lists."""
    out = []
    for r_row, v_row in zip(rewards.tolist(), valid.tolist()):
        vals = [r for r, v in zip(r_row, v_row) if v]
        if len(vals) < 2 or max(vals) == min(vals):
            out.append([0.0] * len(r_row))
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((x - mean) ** 2 for x in vals) / (len(vals) - 1))
        out.append([(r - mean) / (std + eps) if v else 0.0 for r, v in zip(r_row, v_row)])
    return out


def test_equals_reference_formula_on_random_rounds():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        rewards = torch.randint(0, 3, (6, 8), generator=gen).float() / 2
        valid = torch.rand(6, 8, generator=gen) > 0.2
        got = group_advantages(rewards, valid, "group", EPS).advantages
        want = torch.tensor(reference_advantages(rewards, valid, EPS))
        assert torch.allclose(got, want, atol=1e-6)


def test_shapes_are_checked_at_run_time():
    """tests/conftest.py turns jaxtyping's checks on: rewards (P, G) with validity (P, G+1) is refused."""
    with pytest.raises(TypeError, match="valid"):
        group_advantages(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))
