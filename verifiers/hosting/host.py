"""Hosting verifiers, transport-free: request validation, the bounded queue, and scoring.

:class:`VerifierHost` validates groups against the server's :class:`ServerLimits`, admits them into the
bounded queue and runs ``Verifier.verify_group`` on plain dataclasses: in a thread pool, in the calling
thread, or, for the GIL-bound verifiers of a server started with ``--scoring-procs``, in its scoring
processes (:mod:`cohort.verifiers.hosting.procs`, which get the same domain objects). It knows nothing of
gRPC: a request it refuses raises a domain error, :class:`~cohort.verifiers.base.InvalidRequest` (the
request can never be scored) or :class:`QueueFull` (retry later), which the server's interceptor maps to
status codes (:data:`cohort.verifiers.hosting.server.ERRORS`). Each scoring process runs a host of its own
for its chunk, so the replies are the same either way.

A verifier that raises or returns the wrong rollouts yields in-band VERIFIER_ERROR for the affected
rollouts: a bug in a verifier is never a reward of 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from cohort.verifiers.base import (
    CANDIDATE_LIMIT,
    GroupRequest,
    GroupResult,
    InvalidRequest,
    RolloutResult,
    RolloutStatus,
    Verdict,
    Verifier,
    VerifyContext,
    checked_steps)
from cohort.verifiers.hosting.metrics import ServerMetrics, count_results

log = logging.getLogger("cohort.verifiers.hosting.host")


class QueueFull(Exception):
    """More groups than ``max_queued_groups`` would be waiting (maps to RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class ServerLimits:
    max_groups_per_batch: int = 4096
    max_rollouts_per_group: int = 1024
    max_completion_chars: int = 1_000_000
    max_queued_groups: int = 16384
    max_rollout_timeout_s: float = 60.0
    workers: int = 16
    """Threads running ``verify_group``; a batch is split into at most this many chunks."""
    scoring_procs: int = 0
    """Worker processes for GIL-bound verifiers (``max_concurrency = 1``); 0 scores them in threads."""


class Processes(Protocol):
    """Scoring processes behind a host (:class:`cohort.verifiers.hosting.procs.ScoringProcesses`)."""

    def handles(self, verifier_names: Sequence[str]) -> bool: ...

    async def score(self, groups: Sequence[GroupRequest], deadline: float | None) -> list[GroupResult]: ...

    def close(self) -> None: ...


class VerifierHost:
    """Validates requests, admits them into the bounded queue and runs verifiers; knows nothing of gRPC."""

    def __init__(self, verifiers: dict[str, Verifier], limits: ServerLimits, metrics: ServerMetrics | None = None,
                 procs: Processes | None = None) -> None:
        """``procs``: the scoring processes that take every batch whose groups are all theirs (closed with the host)."""
        not_verifiers = [name for name, v in verifiers.items() if not isinstance(v, Verifier)]
        if not_verifiers:  # e.g. no max_concurrency / ready / close: cohort.verifiers.base.VerifierBase has them
            raise TypeError(f"not a Verifier (subclass cohort.verifiers.base.VerifierBase): {not_verifiers}")
        self.verifiers = verifiers
        self.limits = limits
        self.metrics = metrics
        self.procs = procs
        self.executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="verify")
        self.queued = 0

    def validate(self, group: GroupRequest) -> None:
        lim = self.limits
        verifier = self.verifiers.get(group.verifier)
        if verifier is None:
            served = ", ".join(sorted(self.verifiers))
            raise InvalidRequest(f"unknown verifier {group.verifier!r}; served here: {served}")
        if not group.rollouts:
            raise InvalidRequest(f"group {group.group_id!r} has no rollouts")
        if len(group.rollouts) > lim.max_rollouts_per_group:
            raise InvalidRequest(f"group {group.group_id!r} has {len(group.rollouts)} rollouts; the limit is {lim.max_rollouts_per_group}")
        # Checked in bulk (every rollout of every batch passes here); only a group that fails is walked,
        # to name its first problem in rollout order. A completion over max_completion_chars is not the
        # request's problem but that rollout's: it is scored 0 and flagged (_score_one), the group kept.
        indexes = [r.index for r in group.rollouts]
        if len(set(indexes)) != len(indexes):
            seen: set[int] = set()
            for r in group.rollouts:
                if r.index in seen:
                    raise InvalidRequest(f"group {group.group_id!r}: duplicate rollout index {r.index}")
                seen.add(r.index)
        kinds = tuple(verifier.reference_kinds)
        if kinds and group.reference.kind not in kinds:
            raise InvalidRequest(f"group {group.group_id!r}: verifier {group.verifier!r} needs "
                                 f"reference.{' or reference.'.join(kinds)}, got {group.reference.kind}")

    def admit(self, n_groups: int) -> None:
        if n_groups > self.limits.max_groups_per_batch:
            raise InvalidRequest(f"{n_groups} groups in one call; the limit is {self.limits.max_groups_per_batch}")
        if self.queued + n_groups > self.limits.max_queued_groups:
            raise QueueFull(f"queue full ({self.queued} groups queued, limit {self.limits.max_queued_groups}); retry with backoff")

    def _oversize(self, group: GroupRequest) -> dict[int, RolloutResult]:
        """The rollouts whose completion is over ``max_completion_chars``, each scored 0 and flagged
        ``candidate_limit``: the policy wrote it, so it is scored (never masked) and its group is kept."""
        limit = self.limits.max_completion_chars
        if max(len(r.completion) for r in group.rollouts) <= limit:
            return {}
        return {r.index: RolloutResult.ok(r.index, 0.0, Verdict.INCORRECT, detail=f"completion of {len(r.completion)} "
                                          f"characters; the server scores at most {limit}: not scored",
                                          flags=(CANDIDATE_LIMIT,))
                for r in group.rollouts if len(r.completion) > limit}

    def _clamp(self, group: GroupRequest) -> GroupRequest:
        t = group.rollout_timeout_s
        if t is not None and t > self.limits.max_rollout_timeout_s:
            return replace(group, rollout_timeout_s=self.limits.max_rollout_timeout_s)
        return group

    def _score_one(self, group: GroupRequest, ctx: VerifyContext) -> GroupResult:
        verifier = self.verifiers[group.verifier]
        start = time.perf_counter()
        oversize = self._oversize(group)
        scored = replace(group, rollouts=tuple(r for r in group.rollouts if r.index not in oversize)) if oversize else group
        if not scored.rollouts:
            results = []
        elif ctx.expired():
            results = [RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_TIMEOUT, "call deadline passed before scoring") for r in scored.rollouts]
        else:
            try:
                results = list(verifier.verify_group(self._clamp(scored), ctx))
            except InvalidRequest:
                raise
            except Exception as exc:  # a verifier bug: in-band VERIFIER_ERROR, logged, never reward 0
                log.exception("verifier %s failed on group %r", group.verifier, group.group_id)
                results = [RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR, f"verifier raised {exc!r}") for r in scored.rollouts]
        results = _match_results(group, [*results, *oversize.values()])
        if any(r.steps for r in results):
            results = checked_steps(group, results, "verifier")
        result = GroupResult(group.group_id, group.verifier, verifier.version, tuple(results), time.perf_counter() - start)
        if self.metrics is not None:
            self.metrics.observe_counts(count_results([result]))
        return result

    def score_now(self, groups: Sequence[GroupRequest], ctx: VerifyContext) -> list[GroupResult]:
        """Score validated groups in this thread, one after the other."""
        return [self._score_one(g, ctx) for g in groups]

    @contextlib.contextmanager
    def admitted(self, n_groups: int) -> Iterator[None]:
        """Hold ``n_groups`` places in the bounded queue (QueueFull when it is full)."""
        self.admit(n_groups)
        self.queued += n_groups
        if self.metrics is not None:
            self.metrics.queue_depth.set(self.queued)
        try:
            yield
        finally:
            self.queued -= n_groups
            if self.metrics is not None:
                self.metrics.queue_depth.set(self.queued)

    async def score(self, groups: Sequence[GroupRequest], ctx: VerifyContext) -> list[GroupResult]:
        """Score groups concurrently (in the scoring processes when they take them all, else in at most
        ``workers`` chunks on threads); results in request order."""
        if not groups:
            raise InvalidRequest("no groups to score (BatchVerifyGroupsRequest.requests is empty)")
        for g in groups:
            self.validate(g)
        in_flight = self.metrics.track_in_flight() if self.metrics is not None else contextlib.nullcontext()
        with self.admitted(len(groups)), in_flight:
            if self.procs is not None and self.procs.handles([g.verifier for g in groups]):
                results = await self.procs.score(groups, ctx.deadline)
                if self.metrics is not None:
                    self.metrics.observe_counts(count_results(results))
                return results
            loop = asyncio.get_running_loop()
            # Verifiers bound by the GIL (pure Python, no waiting) say so with `max_concurrency = 1`:
            # splitting their work over threads only adds contention.
            caps = [self.verifiers[g.verifier].max_concurrency or self.limits.workers for g in groups]
            n_chunks = max(1, min(len(groups), self.limits.workers, max(caps)))
            size = -(-len(groups) // n_chunks)
            chunks = [groups[i : i + size] for i in range(0, len(groups), size)]
            futures = [loop.run_in_executor(self.executor, self.score_now, chunk, ctx) for chunk in chunks]
            done = await asyncio.gather(*futures)
            return [r for chunk in done for r in chunk]

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.procs is not None:
            self.procs.close()
        for verifier in self.verifiers.values():
            verifier.close()


def _match_results(group: GroupRequest, results: list[RolloutResult]) -> list[RolloutResult]:
    """One result per rollout, in rollout order; anything missing or unknown becomes VERIFIER_ERROR."""
    if [r.index for r in results] == [r.index for r in group.rollouts]:
        matched = results
    else:
        by_index: dict[int, RolloutResult] = {}
        for r in results:
            by_index.setdefault(r.index, r)
        matched = [
            by_index.get(ro.index) or RolloutResult.unusable(ro.index, RolloutStatus.VERIFIER_ERROR, "verifier returned no result for this rollout")
            for ro in group.rollouts
        ]
    return matched
