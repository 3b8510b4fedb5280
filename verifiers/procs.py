"""Scoring processes: GIL-bound verifiers on every core a server has (``cohort serve --scoring-procs N``).

A pure-Python verifier (one that declares ``max_concurrency = 1``, like ``format`` and ``arith``) cannot
use more than one core inside one process, whatever the thread count. With ``--scoring-procs N`` the
server splits each batch of such groups into at most N chunks and scores them in N worker processes.

What travels is bytes, both ways: each worker gets the request exactly as it came off the wire plus
the range of groups that is its chunk, and answers with a serialized ``BatchVerifyGroupsResponse``.
Protobuf concatenates repeated fields on the wire, so the chunks' replies joined in order *are* the
reply to the whole batch, sent as they are: the server process never decodes a rollout nor encodes
a result.

Each worker runs the same :class:`~verifiers.server.Scorer` (validation, in-band VERIFIER_ERROR for a
verifier bug, result matching) as the threaded path, so replies are identical. A worker is a killable
process, which gives the server hard timeouts: a chunk still running when the call's deadline passes
(or after ``max_rollout_timeout_s`` per group when the call has none) is killed with its process and
comes back VERIFIER_TIMEOUT; a worker that dies comes back VERIFIER_ERROR. Either way the worker is
replaced and the other chunks are unaffected. Workers are spawned, never forked: the gRPC runtime
has threads by the time the server starts.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import grpc
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

from cohort.verifiers import convert
from cohort.verifiers.base import GroupResult, RolloutResult, RolloutStatus, Verifier, VerifyContext

log = logging.getLogger("cohort.verifiers.procs")

Tally = list[tuple[str, str, str, int]]
"""(verifier, status, verdict, count) rows, for the server's metrics."""


def gil_bound(verifier: Verifier) -> bool:
    """Whether threads cannot speed this verifier up (it says so with ``max_concurrency = 1``)."""
    return getattr(verifier, "max_concurrency", None) == 1


@dataclass(frozen=True)
class ChunkError:
    """A request error found by a worker (INVALID_ARGUMENT for a duplicate index, ...)."""

    code: str
    message: str


# ---- inside a worker process ------------------------------------------------------------------

_scorer = None


def _worker_main(conn, names: list[str], limits) -> None:
    """Load the verifiers once, then answer chunks until the pipe closes."""
    from cohort.verifiers import registry
    from cohort.verifiers.server import Scorer

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server process owns shutdown (drain on SIGTERM/SIGINT)
    global _scorer
    _scorer = Scorer(registry.load_many(names), replace(limits, workers=1))
    conn.send("ready")
    while True:
        try:
            deadline, payload, start, stop = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(_score_payload(payload, start, stop, deadline))


def _score_payload(payload: bytes, start: int, stop: int, deadline: float | None) -> tuple[bytes, Tally] | ChunkError:
    """Score groups ``start:stop`` of a serialized ``BatchVerifyGroupsRequest``."""
    from cohort.verifiers.server import RequestError

    request = pb.BatchVerifyGroupsRequest.FromString(payload)
    try:
        groups = [convert.group_from_pb(r) for r in request.requests[start:stop]]
        for g in groups:
            _scorer.validate(g)
        results = _scorer.score_now(groups, VerifyContext(deadline=deadline))
    except RequestError as exc:
        return ChunkError(exc.code.name, str(exc))
    except convert.MalformedMessage as exc:
        return ChunkError("INVALID_ARGUMENT", str(exc))
    tally = Counter((r.verifier, x.status, x.verdict) for r in results for x in r.results)  # .value only per key: it is slow
    reply = convert.batch_result_to_pb(results, request.result_layout == pb.RESULT_LAYOUT_COLUMNS, first_group=start)
    return reply.SerializeToString(), [(name, status.value, verdict.value, n) for (name, status, verdict), n in tally.items()]


# ---- in the server process --------------------------------------------------------------------


class _Worker:
    def __init__(self, ctx, names: list[str], limits) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, names, limits), name="cohort-scoring", daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s) or self.conn.recv() != "ready":
            raise RuntimeError(f"scoring process {self.proc.pid} did not start within {timeout_s}s")
        self.ready = True

    async def call(self, payload: bytes, start: int, stop: int, deadline: float | None):
        """One round trip; EOFError / OSError when the process died."""
        if not self.ready:  # a replacement: it says "ready" once its verifiers are loaded
            if await self._receive() != "ready":
                raise RuntimeError(f"scoring process {self.proc.pid} sent something other than 'ready'")
            self.ready = True
        self.conn.send((deadline, payload, start, stop))  # the process is waiting in recv(): it drains the pipe
        return await self._receive()

    async def _receive(self):
        """The next message, read by the event loop once the pipe is readable (no thread hand-off)."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        fd = self.conn.fileno()

        def readable() -> None:
            loop.remove_reader(fd)
            if not done.done():
                try:
                    done.set_result(self.conn.recv())
                except BaseException as exc:  # EOFError when the process died
                    done.set_exception(exc)

        loop.add_reader(fd, readable)
        try:
            return await done
        finally:
            loop.remove_reader(fd)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class ScoringProcesses:
    """N scoring processes for the GIL-bound verifiers of one server."""

    def __init__(self, verifiers: Mapping[str, Verifier], limits, n: int, start_timeout_s: float = 120.0) -> None:
        self.names = sorted(name for name, v in verifiers.items() if gil_bound(v))
        self.limits = limits
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(self._ctx, self.names, limits) for _ in range(n)]
        for w in self._workers:
            w.wait_ready(start_timeout_s)
        self._idle: asyncio.Queue[_Worker] | None = None
        self.restarts = 0

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def handles(self, verifier_names: Sequence[str]) -> bool:
        """True when every group of a batch is for a GIL-bound verifier (anything else takes the thread path)."""
        return bool(self.names) and all(name in self.names for name in verifier_names)

    async def score(self, payload: bytes, requests: Sequence[pb.VerifyGroupRequest], deadline: float | None,
                    columns: bool = False) -> tuple[bytes, Tally]:
        """Score a batch: its wire bytes and their parse; the serialized reply (columns: in ``ResultColumns``,
        as the request asked) and its tally. Raises RequestError."""
        if self._idle is None:  # created lazily: it belongs to the server's event loop
            self._idle = asyncio.Queue()
            for w in self._workers:
                self._idle.put_nowait(w)
        n = min(len(self._workers), len(requests))
        size = -(-len(requests) // n)
        bounds = [(i, min(i + size, len(requests))) for i in range(0, len(requests), size)]
        replies = await asyncio.gather(*(self._run_chunk(payload, requests, a, b, deadline, columns) for a, b in bounds))
        errors = [r for r in replies if isinstance(r, ChunkError)]
        if errors:
            from cohort.verifiers.server import RequestError

            raise RequestError(grpc.StatusCode[errors[0].code], errors[0].message)
        return b"".join(data for data, _ in replies), [row for _, tally in replies for row in tally]

    async def _run_chunk(self, payload: bytes, requests: Sequence[pb.VerifyGroupRequest], start: int, stop: int,
                         deadline: float | None, columns: bool):
        chunk = requests[start:stop]
        budget = deadline if deadline is not None else time.monotonic() + self.limits.max_rollout_timeout_s * len(chunk)
        worker = await self._idle.get()
        try:
            reply = await asyncio.wait_for(worker.call(payload, start, stop, deadline), timeout=max(0.0, budget - time.monotonic()))
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._replace(worker, "ran past its deadline" if isinstance(exc, TimeoutError) else "had its call cancelled")
            if isinstance(exc, asyncio.CancelledError):
                raise
            return _unusable(chunk, RolloutStatus.VERIFIER_TIMEOUT, "scoring process killed: the group ran past the call deadline", columns, start)
        except (EOFError, OSError, RuntimeError) as exc:  # died while scoring, or a replacement that never started
            self._replace(worker, f"died ({exc!r})")
            return _unusable(chunk, RolloutStatus.VERIFIER_ERROR, "scoring process died while scoring this group", columns, start)
        self._idle.put_nowait(worker)
        return reply

    def _replace(self, worker: _Worker, why: str) -> None:
        log.warning("scoring process %d %s: killing and replacing it", worker.proc.pid, why)
        worker.kill()
        fresh = _Worker(self._ctx, self.names, self.limits)
        self._workers[self._workers.index(worker)] = fresh
        self.restarts += 1
        self._idle.put_nowait(fresh)  # serves once it has loaded the verifiers (its first call waits for that)

    def close(self) -> None:
        for w in self._workers:
            w.kill()


def _unusable(chunk: Sequence[pb.VerifyGroupRequest], status: RolloutStatus, detail: str, columns: bool,
              first_group: int) -> tuple[bytes, Tally]:
    results = [
        GroupResult(r.group_id, r.verifier, "", tuple(RolloutResult.unusable(x.index, status, detail) for x in r.rollouts))
        for r in chunk
    ]
    reply = convert.batch_result_to_pb(results, columns, first_group)
    tally = Counter((r.verifier, status.value, "unspecified") for r in chunk for _ in r.rollouts)
    return reply.SerializeToString(), [(*key, n) for key, n in tally.items()]
