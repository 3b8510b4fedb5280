"""The learner's blocking ``grpo.tool.v1`` client: one batch of calls out, one result per call back.

Each configured tool server (one or more replicas of the same tools) is asked what it offers at start
(:meth:`ToolClient.handshake`: a missing server fails fast, naming it); a batch's calls then go to the
server of each tool's name, all servers at once. A server's calls are spread over its replicas by session:
the calls of one rollout (one ``session_id``) go to the same replica while it is up, so a replica may keep
per-rollout state, and one ``ExecuteTools`` per replica carries that replica's share. A replica that fails
fails over through the one retry policy (:func:`cohort.rpc.retry.call_with_failover`). A call to a tool nobody
offers is the model's fault (an OK result with ``error_kind = "unknown_tool"``); a server that stays
unavailable past its deadline makes its calls infrastructure failures (``CallResult.ok = False``:
their rollouts are masked, never scored). :meth:`ToolClient.end_sessions` tells the servers that rollouts
ended, so a stateful tool frees their sessions (the `python` tool's interpreters) at once.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.rpc.retry import (Exhausted, Failover, RequestRejected, RetryPolicy, call_with_failover, run_blocking,
                              short_error)
from cohort.rpc.tls import channel
from cohort.tools.base import CallResult

END_TIMEOUT_S = 10.0
log = logging.getLogger("cohort.tools")


@dataclass(frozen=True)
class Call:
    name: str
    arguments_json: str
    session_id: str = ""


class ToolError(RuntimeError):
    """A configured tool server cannot be used at all (start-up)."""


class _Server:
    def __init__(self, endpoints: Sequence[str], timeout_s: float, policy: RetryPolicy) -> None:
        self.endpoints = list(endpoints)
        self.stubs = [pb_grpc.ToolServiceStub(channel(e)) for e in self.endpoints]
        self.failover = Failover(len(self.stubs), policy)
        self.timeout_s = timeout_s
        self.tools: dict[str, pb.Tool] = {}
        self.version = ""
        self.max_calls = 0

    def replica(self, session_id: str, index: int) -> int:
        """The replica a call goes to first: fixed by its session (by its place in the batch when it has none)."""
        key = zlib.crc32(session_id.encode()) if session_id else index
        return key % len(self.endpoints)

    def call(self, method: str, request, start: int | None = None):
        deadline = time.monotonic() + self.timeout_s

        async def invoke(endpoint: int, timeout: float):  # blocking: never suspends (run_blocking)
            return getattr(self.stubs[endpoint], method)(request, timeout=timeout, wait_for_ready=False)

        async def sleep(seconds: float) -> None:
            time.sleep(seconds)

        return run_blocking(call_with_failover(self.failover, deadline, invoke, sleep, start))

    def describe(self) -> str:
        return (f"tools {', '.join(self.tools)}: {', '.join(self.endpoints)} ({self.version or 'unknown version'})")


class ToolClient:
    def __init__(self, servers: Sequence[Sequence[str]], timeout_s: float = 60.0,
                 policy: RetryPolicy | None = None) -> None:
        """``servers``: the endpoints of each tool server (its replicas)."""
        if not servers:
            raise ValueError("no tool server given")
        self.servers = [_Server(eps, timeout_s, policy or RetryPolicy()) for eps in servers]
        self.by_tool: dict[str, _Server] = {}
        self._pool = ThreadPoolExecutor(max_workers=sum(len(s.endpoints) for s in self.servers),
                                        thread_name_prefix="tool-client")  # every replica at once

    def handshake(self) -> dict[str, pb.Tool]:
        """Ask every server what it offers; raises :class:`ToolError` naming a server that cannot answer
        or a tool offered twice."""
        for server in self.servers:
            try:
                listed = server.call("ListTools", pb.ListToolsRequest())
            except (Exhausted, RequestRejected) as exc:
                raise ToolError(f"tool server {', '.join(server.endpoints)} did not answer ListTools: {exc}") from None
            server.tools = {t.name: t for t in listed.tools}
            server.version, server.max_calls = listed.server_version, listed.max_calls_per_request
            for name in server.tools:
                if name in self.by_tool:
                    raise ToolError(f"tool {name!r} is offered by two configured servers: "
                                    f"{', '.join(self.by_tool[name].endpoints)} and {', '.join(server.endpoints)}")
                self.by_tool[name] = server
        return {name: s.tools[name] for name, s in self.by_tool.items()}

    def describe(self) -> list[str]:
        return [s.describe() for s in self.servers]

    def execute(self, calls: Sequence[Call]) -> list[CallResult]:
        """One result per call, in order (blocking)."""
        results: list[CallResult | None] = [None] * len(calls)
        groups: dict[tuple[int, int], list[int]] = {}  # (server, replica) -> the calls it gets
        for i, c in enumerate(calls):
            server = self.by_tool.get(c.name)
            if server is None:
                offered = ", ".join(sorted(self.by_tool)) or "none"
                results[i] = CallResult(True, f"unknown tool {c.name!r}; available: {offered}", "unknown_tool")
            else:
                groups.setdefault((self.servers.index(server), server.replica(c.session_id, i)), []).append(i)
        jobs = [(k, replica, chunk) for (k, replica), rows in groups.items()
                for chunk in _chunks(rows, self.servers[k].max_calls or len(rows))]
        sent = self._pool.map(lambda job: self._send(self.servers[job[0]], [calls[i] for i in job[2]], job[1]), jobs)
        for rows, out in zip((rows for _, _, rows in jobs), sent):
            for i, r in zip(rows, out):
                results[i] = r
        return results  # type: ignore[return-value]

    def _send(self, server: _Server, calls: list[Call], replica: int) -> list[CallResult]:
        request = pb.ExecuteToolsRequest(calls=[pb.ToolCall(call_id=str(i), name=c.name, arguments_json=c.arguments_json,
                                                            session_id=c.session_id) for i, c in enumerate(calls)])
        start = time.perf_counter()
        try:
            response = server.call("ExecuteTools", request, start=replica)
        except (Exhausted, RequestRejected) as exc:
            last = f" (last: {exc.errors[-1][1]})" if isinstance(exc, Exhausted) and exc.errors else ""
            detail = f"tool server {', '.join(server.endpoints)}: {exc}{last}"
            return [CallResult(False, seconds=time.perf_counter() - start, detail=detail) for _ in calls]
        by_id = {r.call_id: r for r in response.results}
        out = []
        for i in range(len(calls)):
            r = by_id.get(str(i))
            if r is None:
                out.append(CallResult(False, detail="the tool server sent no result for this call"))
                continue
            out.append(CallResult(r.status == pb.CALL_STATUS_OK, r.output, r.error_kind, r.truncated,
                                  r.duration.ToNanoseconds() / 1e9, r.detail
                                  or ("" if r.status == pb.CALL_STATUS_OK else pb.CallStatus.Name(r.status))))
        return out

    def end_sessions(self, session_ids: Sequence[str]) -> int:
        """Tell the servers these sessions ended (their rollouts did), so a stateful tool frees their state
        now rather than at its idle bound; how many held state. Best effort: a replica that does not answer
        (or predates ``EndSessions``) ends them by itself later."""
        ended = 0
        for server in self.servers:
            by_replica: dict[int, list[str]] = {}
            for sid in dict.fromkeys(s for s in session_ids if s):
                by_replica.setdefault(server.replica(sid, 0), []).append(sid)
            for replica, ids in by_replica.items():
                try:
                    ended += server.stubs[replica].EndSessions(pb.EndSessionsRequest(session_ids=ids),
                                                               timeout=min(server.timeout_s, END_TIMEOUT_S)).ended
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                        log.warning("tool server %s did not end %d sessions: %s", server.endpoints[replica],
                                    len(ids), short_error(exc))
        return ended

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _chunks(rows: list[int], size: int) -> list[list[int]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


__all__ = ["Call", "ToolClient", "ToolError"]
