"""The round's types: what a round is made from (:class:`Sources`) and what it is (:class:`Round`). Types only,
so that every round source, and whatever builds rows, uses them without importing the learner.

**Per-row tensors travel with their rows.** The log-probs of a generation call are computed for that call's
rows and carried through every ``select`` and ``concat`` with them, so after dynamic resampling a kept row
keeps its own values and a fresh row brings its own; no tensor is indexed with row numbers of another batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from cohort.trainer.batch import LogProbs, UpdateBatch
from cohort.trainer.config import TrainConfig
from cohort.trainer.data import PromptSampler
from cohort.trainer.rollout import RolloutBatch, concat_batches
from cohort.trainer.scoring import Scorer, Scores, merge_scores
from cohort.verifiers.records import Task

def pad_right(x: Tensor | None, width: int) -> Tensor | None:
    """Per-row tensors (b, T') right-padded with 0 to (b, width), like the completions they go with."""
    return None if x is None else torch.nn.functional.pad(x, (0, width - x.shape[1]))


@dataclass
class Round:
    """This rank's rows of one step (b = P/world * G, prompt-major: whole groups), their scores (p, G), and
    every tensor the update needs per row. The one row space of the loop: everything here is indexed by
    this rank's b rows (or its p groups); :meth:`update_batch` takes the rows that enter the loss."""

    batch: RolloutBatch
    scores: Scores  # (p, G)
    ref_logprobs: Float[Tensor, "b T"] | None = None  # beta > 0
    old_logprobs: Float[Tensor, "b T"] | None = None  # engines that report log-probs; else the first pass's
    is_weights: Float[Tensor, "b T"] | None = None  # the same engines, unless rollout.is_correction=none
    behaviour_logprobs: Float[Tensor, "b T"] | None = None  # the asynchronous pipeline's (see UpdateBatch)
    is_metrics: dict[str, float] = field(default_factory=dict)
    resampled: int = 0  # prompts drawn to replace groups without signal

    def select(self, groups: list[int]) -> Round:
        """These groups (indices into p) with their rows and every per-row tensor (before the IS weights)."""
        g = self.scores.rewards.shape[1]
        rows = [k * g + j for k in groups for j in range(g)]
        idx = torch.tensor(rows, dtype=torch.long)
        take = lambda x: None if x is None else x[idx]  # noqa: E731
        return Round(self.batch.select(rows), self.scores.select(groups), take(self.ref_logprobs),
                     take(self.old_logprobs))

    @staticmethod
    def concat(parts: list[Round], pad_id: int) -> Round:
        """Rounds of groups generated apart, as one (per-row tensors right-padded with 0 like the completions).
        A part without groups adds no row but its scores' run facts (latency, verifiers dropped)."""
        rows = [p for p in parts if p.batch.completion_ids.shape[0]] or parts[-1:]
        batch = concat_batches([p.batch for p in rows], pad_id)
        t = batch.completion_ids.shape[1]

        def joined(name: str) -> Tensor | None:
            values = [getattr(p, name) for p in rows]
            return None if any(v is None for v in values) else torch.cat([pad_right(v, t) for v in values])

        return Round(batch, merge_scores([p.scores for p in parts]), joined("ref_logprobs"), joined("old_logprobs"))

    def update_batch(self, rows: Int[Tensor, "n"], advantages: Float[Tensor, "b T"]) -> UpdateBatch:
        """The rows ``rows`` (indices into this rank's b) as the learner's batch."""
        b, t = self.batch, self.batch.completion_ids.shape[1]

        def take(x: Tensor | None) -> Tensor | None:
            return None if x is None else x[rows]

        return UpdateBatch(b.input_ids[rows], b.attention_mask[rows], b.loss_mask[rows],
                           advantages[rows, :t], take(self.old_logprobs), take(self.ref_logprobs),
                           take(self.is_weights), take(self.behaviour_logprobs))


@dataclass(frozen=True)
class Sources:
    """What a round is made from (fixed for the run)."""

    engine: Any  # the lock-step source's rollout engine (LockStep sets it); None for the pipeline's workers
    scorer: Scorer
    examples: list[Task]
    prompt_ids: list[list[int]]  # tokenised prompts, by example index
    sampler: PromptSampler
    cfg: TrainConfig
    pad_id: int
    ref_logprobs: LogProbs | None  # the frozen reference (None when beta = 0)
    policy_logprobs: LogProbs  # the current policy, no grad
    tokenizer: Any = None  # what the lock-step source builds its engine with
