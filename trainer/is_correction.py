"""Truncated importance sampling for the train/inference mismatch, pure functions over tensors.

An engine with its own kernels (vLLM) samples from pi_rollout, which differs slightly from the
trainer's forward pi_old even with identical weights (other kernels, other precision). The
policy-gradient term is then reweighted by the truncated ratio (TIS, as TRL's
``vllm_importance_sampling_correction``)::

    token level:     w_t = min(exp(logp_old_t - logp_rollout_t), cap)                      (B, T)
    sequence level:  w_i = min(exp(sum_t m_t (logp_old_t - logp_rollout_t)), cap)          (B,) -> (B, T)

Masked (padding) positions get weight 1 (the loss mask removes them anyway). The ratio is capped in
log space before ``exp`` so a long sequence can never overflow. Only the upper side is truncated:
weights below 1 are kept (down-weighting tokens the trainer finds less likely is the correction).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from jaxtyping import Bool, Float
from torch import Tensor

ISLevel = Literal["none", "token", "sequence"]


def log_ratio(old_logprobs: Float[Tensor, "B T"], rollout_logprobs: Float[Tensor, "B T"],
              mask: Bool[Tensor, "B T"]) -> Float[Tensor, "B T"]:
    """logp_old - logp_rollout at completion tokens, 0 elsewhere."""
    return torch.where(mask.bool(), old_logprobs - rollout_logprobs, torch.zeros_like(old_logprobs))


def truncated_is_weights(old_logprobs: Float[Tensor, "B T"], rollout_logprobs: Float[Tensor, "B T"],
                         mask: Bool[Tensor, "B T"], level: ISLevel, cap: float) -> Float[Tensor, "B T"]:
    """The capped importance weight pi_old / pi_rollout per token (see the module docstring)."""
    if cap <= 0:
        raise ValueError(f"importance-sampling cap must be > 0, got {cap}")
    mask = mask.bool()
    delta = log_ratio(old_logprobs.float(), rollout_logprobs.float(), mask)  # (B, T)
    if level == "token":
        w = torch.exp(delta.clamp(max=math.log(cap)))  # (B, T)
    elif level == "sequence":
        seq = delta.sum(dim=1, keepdim=True)  # (B, 1)
        w = torch.exp(seq.clamp(max=math.log(cap))).expand_as(delta)  # (B, T)
    else:
        raise ValueError(f"unknown importance-sampling level {level!r} (token, sequence)")
    return torch.where(mask, w, torch.ones_like(w))


def mismatch_metrics(old_logprobs: Float[Tensor, "B T"], rollout_logprobs: Float[Tensor, "B T"],
                     mask: Bool[Tensor, "B T"], weights: Float[Tensor, "B T"] | None = None,
                     cap: float | None = None) -> dict[str, float]:
    """Mean and max |logp_train - logp_rollout| over completion tokens, and the weights' summary."""
    mask = mask.bool()
    n = int(mask.sum())
    if n == 0:
        return {}
    diff = log_ratio(old_logprobs.float(), rollout_logprobs.float(), mask).abs()[mask]  # (n,)
    out = {"rollout/logp_abs_diff_mean": float(diff.mean()), "rollout/logp_abs_diff_max": float(diff.max())}
    if weights is not None:
        w = weights[mask]
        out["rollout/is_weight_mean"] = float(w.mean())
        if cap is not None:
            out["rollout/is_capped_frac"] = float((w >= cap * (1 - 1e-6)).float().mean())
    return out


def rollout_correction(old_logprobs: Float[Tensor, "B T"] | None, rollout_logprobs: Float[Tensor, "B T"] | None,
                       mask: Bool[Tensor, "B T"], level: ISLevel, cap: float
                       ) -> tuple[Float[Tensor, "B T"] | None, dict[str, float]]:
    """The loop's one call: weights for the loss (None when off or not applicable) and mismatch metrics."""
    if old_logprobs is None or rollout_logprobs is None:
        return None, {}
    weights = None if level == "none" else truncated_is_weights(old_logprobs, rollout_logprobs, mask, level, cap)
    return weights, mismatch_metrics(old_logprobs, rollout_logprobs, mask, weights, cap)
