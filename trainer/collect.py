"""The lock-step source's round (``rounds.lockstep``): chunked generation, remote scoring, dynamic resampling,
per-row tensors.

:func:`collect_round` returns a :class:`~cohort.trainer.rounds.round.Round`: this rank's rows, their scores,
and, aligned with them row for row, every tensor the update needs per row: reference log-probs (beta > 0),
and for an engine that reports its own sampling log-probs (vLLM) the old policy's log-probs and the
importance-sampling weights (``trainer.is_correction``), a pure function of each row's (old, rollout)
log-probs computed once on the final rows.

1. **Overlap.** A call's prompts are generated in ``rollout.generation_chunks`` chunks and each chunk
   goes to the verifiers as soon as it exists, so chunk k is scored while chunk k+1 is generated; the
   call's reference and old-policy forwards run while its last chunks are scored. The learner waits
   on the verifiers only at the end of :func:`_generate` (timed as ``verify_wait``).
2. **Dynamic sampling (DAPO)**, single process only (the config refuses it with ``parallel``): the groups a
   round keeps are ``rounds.dynamic``'s choice (the pipeline's too); each refill is one more generation call.
"""

from __future__ import annotations

from cohort.trainer.distributed import Comm
from cohort.trainer.is_correction import rollout_correction
from cohort.trainer.metrics import StepTimer
from cohort.trainer.rollout import concat_batches
from cohort.trainer.rounds.dynamic import DynamicSampling, informative
from cohort.trainer.rounds.round import Round, Sources
from cohort.trainer.scoring import merge_scores


def collect_round(src: Sources, comm: Comm, timer: StepTimer) -> Round:
    """Sample G completions for this rank's share of the next P prompts, score them, resample groups
    without signal (``grpo.dynamic_sampling``), and attach every per-row tensor (module docstring)."""
    cfg = src.cfg
    rnd = new = _generate(src, comm.shard(src.sampler.next()), timer)
    pick = DynamicSampling(len(new.scores.valid), cfg.grpo.max_resample_rounds if cfg.grpo.dynamic_sampling else 0)
    while (keep := pick.close(informative(new.scores, cfg.grpo.scale_rewards))) is not None:
        before = len(rnd.scores.valid) - len(new.scores.valid)  # groups kept from the calls before: all stay
        new = _generate(src, src.sampler.next(pick.size), timer)
        rnd = Round.concat([rnd.select([*range(before), *(before + k for k in keep)]), new], src.pad_id)
    rnd.is_weights, rnd.is_metrics = rollout_correction(rnd.old_logprobs, rnd.batch.rollout_logprobs,
                                                        rnd.batch.loss_mask, cfg.rollout.is_correction,
                                                        cfg.rollout.is_cap)
    rnd.resampled = pick.resampled
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
        futures.append(src.scorer.submit([src.examples[i] for i in chunk], part.texts, part.truncated.tolist(), c,
                                         tools=part.tools))
        parts.append(part)
    batch = concat_batches(parts, src.pad_id)
    input_ids, attention_mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
    with timer("logprobs"):
        ref = None if src.ref_logprobs is None else src.ref_logprobs(input_ids, attention_mask, t)  # (b, T)
        old = None if batch.rollout_logprobs is None else src.policy_logprobs(input_ids, attention_mask, t)  # (b, T)
    with timer("verify_wait"):
        # tool failures masked by the scorer, before dynamic sampling reads them: the loss and the informative-group
        # test see the same scores (a group whose spread came from a masked tool failure is not informative)
        scores = merge_scores([f.result() for f in futures])
    return Round(batch, scores, ref, old)
