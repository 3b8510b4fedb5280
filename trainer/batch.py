"""The round's rows as the learner consumes them: a module of types only, so that whatever builds a batch
(``trainer.rounds``, ``trainer.collect``) never imports the learner (tests/test_import_layers.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["LogProbs", "PiOld", "UpdateBatch"]

LogProbs = Callable[[Int[Tensor, "B L"], Int[Tensor, "B L"], int], Float[Tensor, "B T"]]
"""(input_ids, attention_mask, completion_len) -> no-grad log-probs (B, T), 0 past each completion (the policy's,
the frozen reference's)."""

PiOld = Literal["given", "own", "decoupled"]
"""Where the clipped ratio's pi_old comes from (:attr:`UpdateBatch.pi_old`)."""


@dataclass
class UpdateBatch:
    """The rows that enter the loss (included rows only)."""

    input_ids: Int[Tensor, "B L"]
    attention_mask: Int[Tensor, "B L"]
    loss_mask: Bool[Tensor, "B T"]
    advantages: Float[Tensor, "B T"]  # per token (outcome advantages broadcast over T)
    old_logprobs: Float[Tensor, "B T"] | None  # None: on-policy single iteration (ratio = 1)
    ref_logprobs: Float[Tensor, "B T"] | None
    is_weights: Float[Tensor, "B T"] | None = None
    behaviour_logprobs: Float[Tensor, "B T"] | None = None
    """The asynchronous pipeline's behaviour policy (the weights that sampled the rows), with ``old_logprobs``
    None: the first pass's own log-probs are then the proximal policy, both pi_old of the clipped ratio and the
    numerator of the importance weight pi_prox / pi_behaviour (``rollout.is_correction``) that the pass computes
    itself (AReaL's decoupled objective, without a separate no-grad forward)."""

    @property
    def pi_old(self) -> PiOld:
        """The three pi_old modes, named rather than read off which fields are ``None``:

        - ``"given"``: ``old_logprobs`` (a later iteration's: the first pass's log-probs; or the pipeline's behaviour
          log-probs with ``rollout.is_correction`` off);
        - ``"own"``: none given, no behaviour log-probs: the pass's own detached log-probs (on-policy, ratio 1);
        - ``"decoupled"``: none given, behaviour log-probs given: the pass's own log-probs are the proximal policy,
          and the pass computes the importance weight pi_prox / pi_behaviour itself.
        """
        if self.old_logprobs is not None:
            return "given"
        return "own" if self.behaviour_logprobs is None else "decoupled"

    def to(self, device: torch.device) -> UpdateBatch:
        """Every tensor on ``device`` (the policy's: rows are gathered on the CPU); itself when they are there."""
        moved = {f.name: v.to(device) for f in dataclasses.fields(self) if isinstance(v := getattr(self, f.name), Tensor)}
        return dataclasses.replace(self, **moved)
