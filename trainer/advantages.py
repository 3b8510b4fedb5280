"""Group-relative advantages, a pure function of the (P, G) rewards and their validity.

    A_i = (r_i - mean(r)) / (std(r) + eps)      over the valid rollouts of one prompt's group

Decisions (numbered, as the loss and the seeds state them):

1. Only valid rollouts (verifier status OK) enter the group mean and std; an invalid rollout gets
   A = 0 and is excluded from the loss (it is not a reward of 0).
2. std is the unbiased (n - 1) standard deviation, as TRL computes it; eps = 1e-4 by default (TRL).
3. A group with fewer than two valid rollouts, or whose valid rewards are all equal (zero variance),
   carries no signal: all its rollouts are excluded from the loss (``included`` is False), so
   they add neither policy-gradient nor KL terms and do not count in the loss normaliser.
   This differs from TRL, which keeps zero-variance groups in the batch with A = 0.
4. ``scale_rewards``: ``group`` divides by the group's std (GRPO); ``batch`` by the std of all
   valid rewards of the round (TRL's ``batch``, robust to near-constant groups); ``none`` keeps
   the centred rewards (Dr. GRPO: std scaling biases towards too-easy / too-hard prompts).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from jaxtyping import Bool, Float
from torch import Tensor

ScaleRewards = Literal["group", "batch", "none"]


class Advantages(NamedTuple):
    advantages: Float[Tensor, "P G"]  # 0 where not included
    included: Bool[Tensor, "P G"]  # valid and in a group with signal: the rows that enter the loss
    informative_groups: Bool[Tensor, "P"]  # >= 2 valid rollouts and non-zero variance


def group_advantages(
    rewards: Float[Tensor, "P G"],
    valid: Bool[Tensor, "P G"],
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
) -> Advantages:
    rewards = rewards.double()
    zeros = torch.zeros_like(rewards)
    r = torch.where(valid, rewards, zeros)  # (P, G) invalid entries never touch the maths
    n = valid.sum(dim=1, keepdim=True)  # (P, 1)
    mean = r.sum(dim=1, keepdim=True) / n.clamp(min=1)  # (P, 1)
    centred = torch.where(valid, rewards - mean, zeros)  # (P, G)
    var = centred.pow(2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)  # (P, 1) unbiased
    big = torch.finfo(rewards.dtype).max
    spread = (torch.where(valid, rewards, -big).amax(dim=1) - torch.where(valid, rewards, big).amin(dim=1))  # (P,)
    informative = (n.squeeze(1) >= 2) & (spread > 0)  # (P,) exact zero-variance test
    if scale_rewards == "group":
        adv = centred / (var.sqrt() + eps)
    elif scale_rewards == "batch":
        flat = rewards[valid]
        batch_std = flat.std() if flat.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
        adv = centred / (batch_std + eps)
    elif scale_rewards == "none":
        adv = centred
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, not {scale_rewards!r}")
    included = valid & informative[:, None]  # (P, G)
    adv = torch.where(included, adv, zeros)
    return Advantages(adv.float(), included, informative)
