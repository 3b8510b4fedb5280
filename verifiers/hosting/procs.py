"""Scoring processes: GIL-bound verifiers on every core a server has (``cohort serve --scoring-procs N``).

A pure-Python verifier (one that declares ``max_concurrency = 1``, like ``format`` and ``arith``) cannot
use more than one core inside one process, whatever the thread count. With ``--scoring-procs N`` the
host (:class:`~cohort.verifiers.hosting.host.VerifierHost`) hands each batch whose groups are all for such
verifiers to :class:`ScoringProcesses`, which splits it into at most N chunks and scores them in N worker
processes of a :class:`~cohort.verifiers.hosting.workers.WorkerPool`.

What travels is domain objects, both ways: each worker gets its chunk of validated ``GroupRequest`` objects
(pickled by the pipe) and answers with their ``GroupResult`` objects, as the threaded path would return
them. The servicer never sees this: it converts the message, calls the host and converts back, whichever
path scored the batch.

Each worker runs a :class:`~cohort.verifiers.hosting.host.VerifierHost` of its own (in-band VERIFIER_ERROR
for a verifier bug, result matching), so replies are identical to the threaded path's; a chunk's domain
error (:class:`~cohort.verifiers.base.InvalidRequest`, e.g. a bad option a verifier refuses) is sent back
and raised by the host, the first in request order. A worker is a killable process, which gives the server
hard timeouts: a chunk still running when the call's deadline passes (or after ``max_rollout_timeout_s``
per group when the call has none) is killed with its process and comes back VERIFIER_TIMEOUT; a worker
that dies comes back VERIFIER_ERROR. Either way the worker is replaced and the other chunks are
unaffected. Workers are spawned, never forked: the gRPC runtime has threads by the time the server starts.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from cohort.verifiers.base import GroupRequest, GroupResult, InvalidRequest, RolloutResult, RolloutStatus, Verifier, VerifyContext
from cohort.verifiers.hosting.host import ServerLimits, VerifierHost
from cohort.verifiers.hosting.workers import WorkerPool

Chunk = tuple[Sequence[GroupRequest], float | None]
"""A worker's task: its validated groups and the call's deadline (``time.monotonic()``, or None)."""


def gil_bound(verifier: Verifier) -> bool:
    """Whether threads cannot speed this verifier up (it says so with ``max_concurrency = 1``)."""
    return verifier.max_concurrency == 1


# ---- inside a worker process ------------------------------------------------------------------


def _setup(names: list[str], limits: ServerLimits):
    """Load the verifiers once; the handler scores :data:`Chunk` tasks."""
    from cohort.verifiers import registry

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server process owns shutdown (drain on SIGTERM/SIGINT)
    host = VerifierHost(registry.load_many(names), replace(limits, workers=1, scoring_procs=0))

    def score_chunk(task: Chunk) -> list[GroupResult] | InvalidRequest:
        groups, deadline = task
        try:
            return host.score_now(groups, VerifyContext(deadline=deadline))
        except InvalidRequest as exc:  # sent back, raised by the server's host
            return exc

    return score_chunk


# ---- in the server process --------------------------------------------------------------------


class ScoringProcesses:
    """N scoring processes for the GIL-bound verifiers of one server (:class:`~.host.Processes`)."""

    def __init__(self, verifiers: Mapping[str, Verifier], limits: ServerLimits, n: int, start_timeout_s: float = 120.0) -> None:
        self.names = sorted(name for name, v in verifiers.items() if gil_bound(v))
        self.limits = limits
        self._pool = WorkerPool(_setup, (self.names, limits), n, start_method="spawn", name="cohort-scoring")
        self._pool.start(ready_timeout_s=start_timeout_s)

    @property
    def pids(self) -> list[int]:
        return self._pool.pids()

    @property
    def restarts(self) -> int:
        return self._pool.restarts

    def handles(self, verifier_names: Sequence[str]) -> bool:
        """True when every group of a batch is for a GIL-bound verifier (anything else takes the thread path)."""
        return bool(self.names) and all(name in self.names for name in verifier_names)

    async def score(self, groups: Sequence[GroupRequest], deadline: float | None) -> list[GroupResult]:
        """Score validated groups in the processes, results in request order. Raises InvalidRequest."""
        n = min(self._pool.size, len(groups))
        size = -(-len(groups) // n)
        chunks = [groups[start : start + size] for start in range(0, len(groups), size)]
        replies = await asyncio.gather(*(self._run_chunk(chunk, deadline) for chunk in chunks))
        errors = [r for r in replies if isinstance(r, InvalidRequest)]
        if errors:
            raise errors[0]
        return [result for reply in replies for result in reply]

    async def _run_chunk(self, groups: Sequence[GroupRequest], deadline: float | None) -> list[GroupResult] | InvalidRequest:
        budget = deadline if deadline is not None else time.monotonic() + self.limits.max_rollout_timeout_s * len(groups)
        outcome = await self._pool.run_async((groups, deadline), budget)
        if outcome.kind == "ok":
            return outcome.value
        if outcome.kind == "timeout":
            return _unusable(groups, RolloutStatus.VERIFIER_TIMEOUT, "scoring process killed: the group ran past the call deadline")
        return _unusable(groups, RolloutStatus.VERIFIER_ERROR, "scoring process died while scoring this group")

    def close(self) -> None:
        self._pool.close()


def _unusable(groups: Sequence[GroupRequest], status: RolloutStatus, detail: str) -> list[GroupResult]:
    return [GroupResult(g.group_id, g.verifier, "", tuple(RolloutResult.unusable(r.index, status, detail) for r in g.rollouts))
            for g in groups]
