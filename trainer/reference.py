"""The frozen reference's log-probs (``grpo.beta > 0``), for the learner and for a rollout worker alike."""

from __future__ import annotations

import torch
from torch import Tensor

from cohort.trainer import forward
from cohort.trainer.batch import LogProbs
from cohort.trainer.config import TrainConfig
from cohort.trainer.distributed import SINGLE
from cohort.trainer.forward import batched_logprobs, micro_batch
from cohort.trainer.models import adapters_off
from cohort.trainer.precision import resolve


def reference_logprobs(reference: torch.nn.Module | None, cfg: TrainConfig) -> LogProbs | None:
    """No-grad log-probs of the frozen reference: a plain local module on every rank (so the CPU fast
    path when it is a Llama), micro-batched like the policy; with LoRA the policy itself with its adapters
    switched off (``models.frozen_reference``: no copy)."""
    if reference is None:
        return None
    precision = resolve(cfg.model.dtype, next(reference.parameters()).device)
    back_end = forward.choose(reference, SINGLE, precision=precision)

    def logprobs(input_ids: Tensor, attention_mask: Tensor, completion_len: int) -> Tensor:
        mb = micro_batch(cfg.optim, input_ids.shape[1], input_ids.shape[0])
        with adapters_off(reference):
            return batched_logprobs(reference, input_ids, attention_mask, completion_len, cfg.rollout.temperature, mb,
                                    cfg.optim.micro_batch_cost_tokens, back_end)

    return logprobs
