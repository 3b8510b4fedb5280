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
   Under torch.distributed each rank holds whole groups, so only ``batch`` looks past them: its
   mean and std come from counts and sums reduced over the ranks (``reduce``, two passes).

Process supervision (DeepSeekMath 4.1.3), :func:`step_advantages`: output i of a group has steps
j = 1..K_i with rewards r_i^j, the last of step j's tokens being end(i, j). Over all steps of the
group's valid outputs, r~_i^j = (r_i^j - mean(R)) / (std(R) + eps), and token t of output i gets

    A_{i,t} = sum of r~_i^j over the steps j with end(i, j) >= t

(tokens after an output's last step get 0). The same decisions hold, with steps in place of rollouts:
invalid rollouts bring no steps; a group with fewer than two steps or all step rewards equal carries
no process signal (0); ``scale_rewards`` is shared (``batch``: the std of every step of the round).
:func:`token_advantages` adds the two forms per token: ``A_t = A_outcome + process_weight * A_process_t``;
a row enters the loss when its group carries either signal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

ScaleRewards = Literal["group", "batch", "none"]
Reduce = Callable[[Tensor], Tensor]
"""A sum over ranks (``Comm.sum``) of a rank's totals; None in one process."""


class Advantages(NamedTuple):
    advantages: Float[Tensor, "P G"]  # 0 where not included
    included: Bool[Tensor, "P G"]  # valid and in a group with signal: the rows that enter the loss
    informative_groups: Bool[Tensor, "P"]  # >= 2 valid rollouts and non-zero variance


def normalised(values: Float[Tensor, "P N"], mask: Bool[Tensor, "P N"], scale_rewards: ScaleRewards = "group",
               eps: float = 1e-4, reduce: Reduce | None = None) -> tuple[Float[Tensor, "P N"], Bool[Tensor, "P"]]:
    """The one normalisation of both forms: each row's masked entries centred on the row's mean and scaled
    (``group``: by the row's unbiased std + eps; ``batch``: by the unbiased std of every masked entry of the
    round, every rank's with ``reduce``; ``none``: not); 0 where not masked or where the row carries no
    signal. Rows are a group's rollouts (outcome) or all steps of a group's valid rollouts (process). Also
    returns which rows carry signal: at least two masked entries, not all equal (an exact test, not a
    variance threshold). Float64 inside."""
    values = values.double()
    zeros = torch.zeros_like(values)
    n = mask.sum(dim=1, keepdim=True)  # (P, 1)
    mean = torch.where(mask, values, zeros).sum(dim=1, keepdim=True) / n.clamp(min=1)  # (P, 1)
    centred = torch.where(mask, values - mean, zeros)  # (P, N) entries outside the mask never touch the maths
    var = centred.pow(2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)  # (P, 1) unbiased
    big = torch.finfo(values.dtype).max
    spread = torch.where(mask, values, -big).amax(dim=1) - torch.where(mask, values, big).amin(dim=1)  # (P,)
    informative = (n.squeeze(1) >= 2) & (spread > 0)  # (P,)
    if scale_rewards == "group":
        scaled = centred / (var.sqrt() + eps)
    elif scale_rewards == "batch":
        scaled = centred / (batch_std(values[mask], reduce) + eps)
    elif scale_rewards == "none":
        scaled = centred
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, not {scale_rewards!r}")
    return torch.where(mask & informative[:, None], scaled, zeros), informative


def batch_std(every: Float[Tensor, "n"], reduce: Reduce | None = None) -> Tensor:
    """The unbiased std of ``every`` (this rank's entries; with ``reduce``, of every rank's together),
    0 for fewer than two: the global count and sum first, then the sum of squared deviations."""
    reduce = reduce or (lambda x: x)
    n, total = reduce(torch.stack([every.new_tensor(every.numel()), every.sum()]))  # (2,) global count, sum
    squares = reduce((every - total / n.clamp(min=1)).pow(2).sum())
    return (squares / (n - 1)).sqrt() if n > 1 else torch.zeros((), dtype=every.dtype)


def group_advantages(
    rewards: Float[Tensor, "P G"],
    valid: Bool[Tensor, "P G"],
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
    reduce: Reduce | None = None,
) -> Advantages:
    adv, informative = normalised(rewards, valid, scale_rewards, eps, reduce)  # (P, G), (P,)
    included = valid & informative[:, None]  # (P, G)
    return Advantages(adv.float(), included, informative)


class ProcessAdvantages(NamedTuple):
    advantages: Float[Tensor, "P G T"]  # 0 where not included and after each output's last step
    informative_groups: Bool[Tensor, "P"]  # >= 2 steps among valid outputs, not all equal


def step_advantages(
    step_rewards: Float[Tensor, "P G S"],
    step_ends: Int[Tensor, "P G S"],
    step_mask: Bool[Tensor, "P G S"],
    valid: Bool[Tensor, "P G"],
    completion_len: int,
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
    reduce: Reduce | None = None,
) -> ProcessAdvantages:
    """Per-token advantages from step rewards (see the module docstring).

    ``step_ends``: the token index (0-based, < T = ``completion_len``) of each step's last token;
    ``step_mask``: which of the S slots are real steps (rows pad with False).
    """
    p, g, s = step_rewards.shape
    steps = step_mask & valid[:, :, None]  # (P, G, S) invalid outputs contribute no steps
    flat, informative = normalised(step_rewards.reshape(p, g * s), steps.reshape(p, g * s), scale_rewards, eps,
                                   reduce)
    normalised_steps = flat.view(p, g, s)  # (P, G, S) 0 outside the steps and for groups without signal
    # each step's reward lands on its last token; a reverse cumulative sum gives every token the sum
    # over the steps that end at or after it
    at_end = torch.zeros(p, g, completion_len, dtype=normalised_steps.dtype)  # (P, G, T)
    at_end.scatter_add_(2, step_ends.clamp(0, completion_len - 1).long(), normalised_steps)
    per_token = at_end.flip(2).cumsum(2).flip(2)  # (P, G, T)
    return ProcessAdvantages(per_token.float(), informative)


class TokenAdvantages(NamedTuple):
    advantages: Float[Tensor, "P G T"]  # outcome (broadcast over T) + process_weight * process
    included: Bool[Tensor, "P G"]  # valid and in a group with outcome or process signal


def token_advantages(outcome: Advantages, process: ProcessAdvantages | None, valid: Bool[Tensor, "P G"],
                     completion_len: int, process_weight: float = 1.0) -> TokenAdvantages:
    """The loss's per-token advantages: the outcome advantage on every token, plus the weighted process one."""
    tokens = outcome.advantages[:, :, None].expand(-1, -1, completion_len)  # (P, G, T)
    if process is None:
        return TokenAdvantages(tokens, outcome.included)
    included = valid & (outcome.informative_groups | process.informative_groups)[:, None]  # (P, G)
    tokens = tokens + process_weight * process.advantages  # (P, G, T)
    return TokenAdvantages(torch.where(included[:, :, None], tokens, torch.zeros_like(tokens)), included)
