"""Scoring processes: GIL-bound verifiers on every core a server has (``cohort serve --scoring-procs N``).

A pure-Python verifier (one that declares ``max_concurrency = 1``, like ``format`` and ``arith``) cannot
use more than one core inside one process, whatever the thread count. With ``--scoring-procs N`` the
server splits each batch of such groups into at most N chunks and scores them in N worker processes
of a :class:`~verifiers.hosting.workers.WorkerPool`.

What travels is bytes, both ways. Each worker gets the request's wire bytes and the range of groups
that is its chunk, decodes that range into ``GroupRequest`` objects itself (:mod:`verifiers.convert`,
the converter the threaded path uses) and answers with its chunk's serialized
``BatchVerifyGroupsResponse`` and the rollout counts for the server's metrics. Protobuf concatenates
repeated fields on the wire, so the chunks' replies joined in order are the reply to the batch: the
server process neither builds a domain object for a rollout nor pickles one, and the conversion work
of a batch is spread over the processes instead of the single server process (at 512 groups of 8
those conversions and pickles took most of the server's time per call). Scoring itself sees only
domain objects, as on the threaded path.

Each worker runs the same :class:`~verifiers.hosting.host.VerifierHost` (validation, in-band VERIFIER_ERROR for
a verifier bug, result matching) as the threaded path, so replies are identical; a chunk's domain
error (:class:`~verifiers.base.InvalidRequest`, a malformed message) is sent back and raised by the
server, the first in request order. A worker is a killable process, which gives the server hard
timeouts: a chunk still running when the call's deadline passes (or after ``max_rollout_timeout_s``
per group when the call has none) is killed with its process and comes back VERIFIER_TIMEOUT; a
worker that dies comes back VERIFIER_ERROR. Either way the worker is replaced and the other chunks
are unaffected. Workers are spawned, never forked: the gRPC runtime has threads by the time the
server starts.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from cohort.verifiers import convert
from cohort.verifiers.base import GroupResult, InvalidRequest, RolloutResult, RolloutStatus, Verifier, VerifyContext
from cohort.verifiers.hosting.host import ServerLimits, VerifierHost
from cohort.verifiers.hosting.metrics import Counts, count_results
from cohort.verifiers.hosting.workers import WorkerPool

Chunk = tuple[bytes, int, int, float | None]
"""A worker's task: a serialized ``BatchVerifyGroupsRequest``, the range ``start:stop`` of its groups
to score, and the call's deadline (``time.monotonic()``, or None)."""

Reply = tuple[bytes, Counts]
"""A chunk's serialized ``BatchVerifyGroupsResponse`` and its rollout counts."""


def gil_bound(verifier: Verifier) -> bool:
    """Whether threads cannot speed this verifier up (it says so with ``max_concurrency = 1``)."""
    return verifier.max_concurrency == 1


# ---- inside a worker process ------------------------------------------------------------------


def _setup(names: Mapping[str, Any], limits: ServerLimits):
    """Load the verifiers once, each with the options the server's copy was made with; the handler scores
    :data:`Chunk` tasks."""
    from cohort.verifiers import registry

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server process owns shutdown (drain on SIGTERM/SIGINT)
    host = VerifierHost(registry.load_many(names), replace(limits, workers=1))

    def score_chunk(task: Chunk) -> Reply | InvalidRequest | convert.MalformedMessage:
        payload, start, stop, deadline = task
        try:
            groups = convert.groups_from_bytes(payload, start, stop)
            for g in groups:
                host.validate(g)
            results = host.score_now(groups, VerifyContext(deadline=deadline))
        except (InvalidRequest, convert.MalformedMessage) as exc:  # sent back, raised by the server
            return exc
        return convert.batch_result_to_bytes(results), count_results(results)

    return score_chunk


# ---- in the server process --------------------------------------------------------------------


class ScoringProcesses:
    """N scoring processes for the GIL-bound verifiers of one server."""

    def __init__(self, verifiers: Mapping[str, Verifier], limits: ServerLimits, n: int, start_timeout_s: float = 120.0) -> None:
        self.names = sorted(name for name, v in verifiers.items() if gil_bound(v))
        self.limits = limits
        options = {name: verifiers[name].options for name in self.names}
        self._pool = WorkerPool(_setup, (options, limits), n, start_method="spawn", name="cohort-scoring")
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

    async def score(self, payload: bytes, n_groups: int, deadline: float | None) -> Reply:
        """Score the ``n_groups`` groups of a serialized ``BatchVerifyGroupsRequest`` in the processes: the
        serialized reply (groups in request order) and its counts. Raises InvalidRequest / MalformedMessage."""
        n = min(self._pool.size, n_groups)
        size = -(-n_groups // n)
        bounds = [(start, min(start + size, n_groups)) for start in range(0, n_groups, size)]
        replies = await asyncio.gather(*(self._run_chunk((payload, start, stop, deadline)) for start, stop in bounds))
        errors = [r for r in replies if isinstance(r, Exception)]
        if errors:
            raise errors[0]
        return b"".join(data for data, _ in replies), [row for _, counts in replies for row in counts]

    async def _run_chunk(self, chunk: Chunk) -> Reply | InvalidRequest | convert.MalformedMessage:
        _, start, stop, deadline = chunk
        budget = deadline if deadline is not None else time.monotonic() + self.limits.max_rollout_timeout_s * (stop - start)
        outcome = await self._pool.run_async(chunk, budget)
        if outcome.kind == "ok":
            return outcome.value
        if outcome.kind == "timeout":
            return _unusable(chunk, RolloutStatus.VERIFIER_TIMEOUT, "scoring process killed: the group ran past the call deadline")
        return _unusable(chunk, RolloutStatus.VERIFIER_ERROR, "scoring process died while scoring this group")

    def close(self) -> None:
        self._pool.close()


def _unusable(chunk: Chunk, status: RolloutStatus, detail: str) -> Reply:
    payload, start, stop, _ = chunk
    results = [GroupResult(g.group_id, g.verifier, "", tuple(RolloutResult.unusable(r.index, status, detail) for r in g.rollouts))
               for g in convert.groups_from_bytes(payload, start, stop)]
    return convert.batch_result_to_bytes(results), count_results(results)
