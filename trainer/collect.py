"""One round of experience: chunked generation, remote scoring, dynamic resampling, per-row tensors.

:func:`collect_round` returns a :class:`Round`: this rank's rows, their scores, and, aligned with
them row for row, every tensor the update needs per row: reference log-probs (beta > 0), and for an
engine that reports its own sampling log-probs (vLLM) the old policy's log-probs and the
importance-sampling weights (``trainer.is_correction``).

1. **Per-row tensors travel with their rows.** The log-probs of a generation call are computed for
   that call's rows and carried through every ``select`` and ``concat`` with them (:class:`Round`),
   so after dynamic resampling a kept row keeps its own values and a fresh row brings its own; no
   tensor is indexed with row numbers of another batch. The IS weights and their metrics are a pure
   function of each row's (old, rollout) log-probs, computed once on the final rows.
2. **Overlap.** A call's prompts are generated in ``rollout.generation_chunks`` chunks and each chunk
   goes to the verifiers as soon as it exists, so chunk k is scored while chunk k+1 is generated; the
   call's reference and old-policy forwards run while its last chunks are scored. The learner waits
   on the verifiers only at the end of :func:`_generate` (timed as ``verify_wait``).
3. **Dynamic sampling (DAPO)**, single process only (the config refuses it with ``parallel``): groups
   without signal are replaced by groups of freshly drawn prompts, at most ``max_resample_rounds``
   times; the round then has P groups again, the last draw's flat ones included if rounds ran out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from cohort.trainer import forward
from cohort.trainer.advantages import group_advantages
from cohort.trainer.batch import UpdateBatch
from cohort.trainer.config import TrainConfig
from cohort.trainer.data import PromptSampler
from cohort.trainer.distributed import SINGLE, Comm
from cohort.trainer.is_correction import rollout_correction
from cohort.trainer.forward import batched_logprobs, micro_batch
from cohort.trainer.models import adapters_off
from cohort.trainer.precision import resolve
from cohort.trainer.metrics import StepTimer
from cohort.trainer.rollout import RolloutBatch, concat_batches
from cohort.trainer.tool_rollouts import mask_failures
from cohort.trainer.scoring import Scorer, Scores, merge_scores
from cohort.verifiers.records import Task

LogProbs = Callable[[Int[Tensor, "B L"], Int[Tensor, "B L"], int], Float[Tensor, "B T"]]
"""(input_ids, attention_mask, completion_len) -> no-grad log-probs (B, T), 0 past each completion."""


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

    engine: Any  # a trainer.rollout.RolloutEngine
    scorer: Scorer
    examples: list[Task]
    prompt_ids: list[list[int]]  # tokenised prompts, by example index
    sampler: PromptSampler
    cfg: TrainConfig
    pad_id: int
    ref_logprobs: LogProbs | None  # the frozen reference (None when beta = 0)
    policy_logprobs: LogProbs  # the current policy, no grad


def reference_logprobs(reference: torch.nn.Module | None, cfg: TrainConfig) -> LogProbs | None:
    """No-grad log-probs of the frozen reference: a plain local module on every rank (so the CPU fast
    path when it is a Llama), micro-batched like the policy; with LoRA the policy itself with its adapters
    switched off (``models.frozen_reference``: no copy)."""
    if reference is None:
        return None
    back_end = forward.choose(reference, SINGLE, precision=resolve(cfg.model.dtype, next(reference.parameters()).device))

    def logprobs(input_ids: Tensor, attention_mask: Tensor, completion_len: int) -> Tensor:
        mb = micro_batch(cfg.optim, input_ids.shape[1], input_ids.shape[0])
        with adapters_off(reference):
            return batched_logprobs(reference, input_ids, attention_mask, completion_len, cfg.rollout.temperature, mb,
                                    cfg.optim.micro_batch_cost_tokens, back_end)

    return logprobs


def collect_round(src: Sources, comm: Comm, timer: StepTimer) -> Round:
    """Sample G completions for this rank's share of the next P prompts, score them, resample groups
    without signal (``grpo.dynamic_sampling``), and attach every per-row tensor (module docstring)."""
    cfg = src.cfg
    rnd = _generate(src, comm.shard(src.sampler.next()), timer)
    resampled = 0
    for _ in range(cfg.grpo.max_resample_rounds if cfg.grpo.dynamic_sampling else 0):
        informative = group_advantages(rnd.scores.rewards, rnd.scores.valid, cfg.grpo.scale_rewards).informative_groups
        keep = informative.nonzero().squeeze(-1).tolist()
        if len(keep) >= cfg.grpo.prompts_per_step:
            break
        idx = src.sampler.next(cfg.grpo.prompts_per_step - len(keep))
        resampled += len(idx)
        extra = _generate(src, idx, timer)
        rnd = Round.concat([rnd.select(keep), extra], src.pad_id)
    rnd.is_weights, rnd.is_metrics = rollout_correction(rnd.old_logprobs, rnd.batch.rollout_logprobs,
                                                        rnd.batch.loss_mask, cfg.rollout.is_correction,
                                                        cfg.rollout.is_cap)
    rnd.resampled = resampled
    return rnd


def _generate(src: Sources, idx: list[int], timer: StepTimer) -> Round:
    """Generate ``idx``'s groups chunk by chunk, submitting each for scoring at once; then, while the
    verifiers work, the rows' reference and (engines that report log-probs) old-policy log-probs; then
    the learner's only wait on the verifiers (timed as ``verify_wait``)."""
    g, chunks = src.cfg.grpo.num_generations, src.cfg.rollout.generation_chunks
    size = -(-len(idx) // chunks)
    parts, futures = [], []
    for c in range(0, len(idx), size):
        chunk = idx[c : c + size]
        with timer("generate"):
            part = src.engine.generate([src.prompt_ids[i] for i in chunk], g)
        futures.append(src.scorer.submit([src.examples[i] for i in chunk], part.texts, part.truncated.tolist(), c))
        parts.append(part)
    batch = concat_batches(parts, src.pad_id)
    input_ids, attention_mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
    with timer("logprobs"):
        ref = None if src.ref_logprobs is None else src.ref_logprobs(input_ids, attention_mask, t)  # (b, T)
        old = None if batch.rollout_logprobs is None else src.policy_logprobs(input_ids, attention_mask, t)  # (b, T)
    with timer("verify_wait"):
        # masked here, before dynamic sampling reads them: the loss and the informative-group test see the
        # same scores (a group whose spread came from a masked tool failure is not informative)
        scores = mask_failures(merge_scores([f.result() for f in futures]), batch)
    return Round(batch, scores, ref, old)
