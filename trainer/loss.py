"""The GRPO objective, pure functions over tensors (no trainer object, no side effects).

Per completion token t of sequence i, with rho = exp(logprobs - old_logprobs):

    objective_t = min(rho * A_it, clip(rho, 1 - epsilon, 1 + epsilon_high) * A_it) - beta * KL_t
    KL_t        = exp(ref - logprobs) - (ref - logprobs) - 1          (Schulman's k3 estimator)

The advantage A_it is per token, (B, T): outcome supervision gives every token of a sequence its
sequence's advantage (``advantages.token_advantages`` broadcasts it), process supervision adds a sum
over the steps that end at or after the token (``advantages.step_advantages``); the loss does not
tell them apart.

The loss is minus the aggregated objective. Deviations and choices, declared:

1. The KL term is the k3 estimator against a frozen copy of the initial policy; without bias
   correction (TRL's ``use_bias_correction_kl=False``). With beta = 0 no reference is needed.
2. Clipping may be asymmetric (``epsilon_high``, DAPO "clip-higher").
3. ``is_weights`` (optional, (B, T)): a truncated importance weight pi_old/pi_rollout for engines
   whose sampler differs from the trainer's forward (vLLM); it multiplies the policy-gradient term.
4. Aggregation (``loss_type``), documented because it changes the gradient and the length bias:
   - ``grpo``: mean over each sequence's tokens, then mean over sequences (the paper; short
     sequences weigh more per token, which favours short correct and long wrong answers).
   - ``bnpo``: sum over tokens / active tokens of the micro-batch (averaged over micro-batches).
   - ``dapo`` (token-level, DAPO): sum over tokens / active tokens of the whole batch: every token
     weighs the same whatever its sequence's length.
   - ``dr_grpo``: sum over tokens / (sequences * max_completion_length), a constant (Dr. GRPO).
   Each is one row of :data:`AGGREGATIONS` (the batch's denominator, the divisor inside a micro-batch).
   Only *included* rows count (valid rollouts of informative groups, see ``advantages``). The
   choice is made once per batch, by :func:`normaliser`, over the whole batch before the
   micro-batches run, so gradient accumulation (and several ranks summing their counts) gives the
   same gradient as one big batch; :meth:`Normaliser.weights` applies it to each micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

import torch
from jaxtyping import Bool, Float
from torch import Tensor

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]


@dataclass(frozen=True)
class LossConfig:
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0


@dataclass
class LossInputs:
    logprobs: Float[Tensor, "B T"]  # current policy, with grad
    old_logprobs: Float[Tensor, "B T"]  # policy that sampled (no grad)
    advantages: Float[Tensor, "B T"]  # per token (outcome advantages broadcast over T)
    loss_mask: Bool[Tensor, "B T"]  # completion tokens of included rows
    ref_logprobs: Float[Tensor, "B T"] | None = None  # needed when beta > 0
    is_weights: Float[Tensor, "B T"] | None = None  # optional rollout importance weights


@dataclass
class LossOutputs:
    loss: Float[Tensor, ""]  # this micro-batch's share of the batch loss (sum over micro-batches = loss)
    policy_loss: Float[Tensor, ""]  # same share, policy-gradient part only
    kl_sum: Float[Tensor, ""]  # sum of KL_t over masked tokens (for metrics)
    clipped_tokens: Float[Tensor, ""]  # tokens whose gradient the clip removed
    tokens: Float[Tensor, ""]  # masked tokens in this micro-batch


class Aggregation(NamedTuple):
    """One ``loss_type``: how its per-token terms add up to the batch loss (module docstring, point 4)."""

    over: Callable[[float, float, int], float]
    """The whole batch's denominator from its included (rows, tokens) and max_completion_length."""
    within: Callable[[Tensor], Tensor | float]
    """Each token's divisor inside its micro-batch, from the micro-batch's mask (b, T)."""
    mean_of_micro_batches: bool = False
    """Whether the batch loss is the mean of the micro-batches' (each normalised by itself)."""


AGGREGATIONS: dict[str, Aggregation] = {
    "grpo": Aggregation(lambda rows, tokens, length: rows, lambda mask: mask.sum(dim=1, keepdim=True).clamp(min=1.0)),
    "bnpo": Aggregation(lambda rows, tokens, length: 1.0, lambda mask: mask.sum().clamp(min=1.0), True),
    "dapo": Aggregation(lambda rows, tokens, length: tokens, lambda mask: 1.0),
    "dr_grpo": Aggregation(lambda rows, tokens, length: rows * length, lambda mask: 1.0),
}
"""The loss types, one row each: every rule of the aggregation is here (``normaliser`` and ``weights`` read it)."""
assert set(AGGREGATIONS) == set(get_args(LossType))


@dataclass(frozen=True)
class Normaliser:
    """How one batch's per-token terms add up to its loss (``loss_type``), with the whole batch's count."""

    loss_type: LossType
    denominator: float = 1.0
    """``grpo``: included rows; ``dapo``: their tokens; ``dr_grpo``: rows * max_completion_length (all of
    the whole batch, every rank's); ``bnpo`` divides each micro-batch by its own tokens instead (1 here)."""

    def weights(self, loss_mask: Bool[Tensor, "b T"], micro_batches: int = 1) -> Float[Tensor, "b T"]:
        """Each token's weight in the batch loss, for one micro-batch (loss = sum(weights * per_token_loss))."""
        agg = AGGREGATIONS[self.loss_type]
        weights = loss_mask.float() / agg.within(loss_mask.float())  # (b, T)
        if agg.mean_of_micro_batches:
            weights = weights / micro_batches
        return weights / self.denominator


def normaliser(loss_mask: Bool[Tensor, "B T"], loss_type: LossType, max_completion_length: int,
               reduce: Callable[[Tensor], Tensor] | None = None) -> Normaliser:
    """The batch's :class:`Normaliser`, from the whole batch's mask (all micro-batches).

    ``reduce`` (torch.distributed: a sum over ranks) turns this rank's (rows, tokens) counts into the
    global batch's, so every rank divides by the same global count (never a per-rank mean).
    """
    counts = torch.stack([loss_mask.any(dim=1).sum(), loss_mask.sum()]).double()  # (2,) rows, tokens
    if reduce is not None:
        counts = reduce(counts)
    if loss_type not in AGGREGATIONS:
        raise ValueError(f"unknown loss_type {loss_type!r}")
    rows, tokens = float(counts[0]), float(counts[1])
    return Normaliser(loss_type, max(AGGREGATIONS[loss_type].over(rows, tokens, max_completion_length), 1.0))


def clipped_objective(ratio: Float[Tensor, "B T"], advantages: Float[Tensor, "B T"], epsilon: float,
                      epsilon_high: float) -> Float[Tensor, "B T"]:
    """min(rho A, clip(rho, 1 - eps, 1 + eps_high) A), per token."""
    clipped_ratio = ratio.clamp(1.0 - epsilon, 1.0 + epsilon_high)
    return torch.minimum(ratio * advantages, clipped_ratio * advantages)


def k3_kl(logprobs: Float[Tensor, "B T"], ref_logprobs: Float[Tensor, "B T"]) -> Float[Tensor, "B T"]:
    """exp(ref - cur) - (ref - cur) - 1 >= 0, an unbiased, low-variance estimate of KL(pi || ref)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def policy_loss(inputs: LossInputs, cfg: LossConfig, norm: Normaliser, micro_batches: int = 1) -> LossOutputs:
    adv = inputs.advantages  # (B, T)
    ratio = torch.exp(inputs.logprobs - inputs.old_logprobs)  # (B, T)
    pg = clipped_objective(ratio, adv, cfg.epsilon, cfg.epsilon_high)  # (B, T)
    if inputs.is_weights is not None:
        pg = pg * inputs.is_weights
    per_token = -pg  # (B, T)
    weights = norm.weights(inputs.loss_mask, micro_batches)  # (B, T)
    mask = inputs.loss_mask.float()
    kl_sum = torch.zeros((), dtype=per_token.dtype, device=per_token.device)
    if cfg.beta > 0:
        if inputs.ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs")
        kl = k3_kl(inputs.logprobs, inputs.ref_logprobs)  # (B, T)
        kl_sum = (kl.detach() * mask).sum()
        loss = ((per_token + cfg.beta * kl) * weights).sum()
    else:
        loss = (per_token * weights).sum()
    with torch.no_grad():
        low = (ratio < 1.0 - cfg.epsilon) & (adv < 0)
        high = (ratio > 1.0 + cfg.epsilon_high) & (adv > 0)
        clipped = ((low | high).float() * mask).sum()
        policy_part = (per_token * weights).sum()
    return LossOutputs(loss, policy_part, kl_sum, clipped, mask.sum())
