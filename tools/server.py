"""``grpo.tool.v1.ToolService`` over grpc.aio, hosting plain Python :class:`~cohort.tools.base.Tool` objects.

Thin transport: a batch's calls run concurrently on a thread pool, each converted in and out here.
The call's own failures come back in-band (``CALL_STATUS_OK`` with ``error_kind``: the model reads
them); :class:`~cohort.tools.base.ToolUnavailable` is ``CALL_STATUS_UNAVAILABLE`` and any other
exception ``CALL_STATUS_INTERNAL`` (both masked by the learner). A request with more calls than
``max_calls_per_request`` or with repeated ``call_id`` values raises :class:`BadToolRequest`, which the
server's interceptor (:mod:`cohort.rpc.status`, :data:`ERRORS`) answers INVALID_ARGUMENT; it answers UNAVAILABLE
while the server drains.

Every call has its own time budget (:class:`CallContext`): it must end by the request's deadline less a
margin (:func:`reply_margin`, so the reply reaches the client before it gives up) and within
``call_budget_s`` of its arrival. A tool's calls wait for one of its ``capacity`` places (its sandbox
slots) in a :class:`~cohort.rpc.gate.FairGate` keyed by session: the least-served session goes first, and
one session holds at most half the places while others wait. A call that gets no place while :data:`MIN_RUN_S` of its budget
is left is an OK result with ``error_kind = "busy"`` (the model reads it and may call again); a call that
gets one runs with what is left of its budget (``CallContext.deadline``). So one slow call never costs the
others their results: the reply always comes back, with every call that could run. When the client gives
up (its RPC is cancelled), its waiting calls leave the queue and its running ones are cancelled
(:meth:`CallContext.on_cancel`: the ``python`` tool kills its program).
"""

from __future__ import annotations

import asyncio
import json
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc

from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.rpc.gate import FairGate
from cohort.tools.base import Tool, ToolOutput, ToolUnavailable, cut, parse_arguments

log = logging.getLogger("cohort.tools")

SERVICE_NAME = "grpo.tool.v1.ToolService"
MAX_CALLS_PER_REQUEST = 1024
MAX_SESSIONS_PER_END = 1 << 16
CALL_BUDGET_S = 60.0
"""Longest one call may take on the server, waiting for a place plus running, whatever the client's deadline."""
MIN_RUN_S = 0.25
"""A call is started only while at least this much of its budget is left; else it is "busy"."""
BUSY = "busy"


class BadToolRequest(ValueError):
    """A request that can never be served as it is (too many calls, repeated ``call_id`` values)."""


ERRORS = {BadToolRequest: grpc.StatusCode.INVALID_ARGUMENT}
"""The tool service's domain errors and their status codes (:mod:`cohort.rpc.status` applies them)."""


def reply_margin(time_left_s: float) -> float:
    """How long before the client's deadline the reply is sent: 5 % of the time it gave, 0.2 to 2 s."""
    return min(2.0, max(0.2, 0.05 * time_left_s))


class CallContext:
    """One call's budget and cancellation, seen by the tool that runs it (:func:`current_call`)."""

    def __init__(self, session_id: str, deadline: float) -> None:
        self.session_id = session_id
        self.deadline = deadline
        """``time.monotonic()`` by which the call must have ended."""
        self._lock = threading.Lock()
        self._hooks: list = []
        self.cancelled = False

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def on_cancel(self, fn) -> None:
        """Call ``fn()`` when the call is cancelled (at once if it already was); from any thread."""
        with self._lock:
            if not self.cancelled:
                self._hooks.append(fn)
                return
        fn()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled, hooks, self._hooks = True, self._hooks, []
        for fn in hooks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a hook that fails must not stop the others
                log.exception("a cancel hook failed")


_CURRENT = threading.local()


def current_call() -> CallContext | None:
    """The call this thread is running for the tool server (None outside one: a tool used directly)."""
    return getattr(_CURRENT, "call", None)


def _duration(seconds: float):
    from google.protobuf.duration_pb2 import Duration

    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class ToolServicer(pb_grpc.ToolServiceServicer):
    def __init__(self, tools: Sequence[Tool], version: str, workers: int = 16,
                 call_budget_s: float = CALL_BUDGET_S) -> None:
        self.tools = {t.spec.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise ValueError("two tools share a name")
        self.version = version
        self.call_budget_s = call_budget_s
        # a tool's places: its own `capacity` (the python tool: its sandbox slots), else the threads
        self.gates = {name: _gate(getattr(t, "capacity", 0) or workers) for name, t in self.tools.items()}
        self.pool = ThreadPoolExecutor(max_workers=max(workers, sum(g.capacity for g in self.gates.values())),
                                       thread_name_prefix="tool-rpc")
        self._requests = itertools.count()

    async def ListTools(self, request: pb.ListToolsRequest, context) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(
            tools=[pb.Tool(name=t.spec.name, description=t.spec.description,
                           parameters_json_schema=json.dumps(t.spec.parameters),
                           limits=pb.ToolLimits(max_wall_time=_duration(t.spec.max_wall_s),
                                                max_output_bytes=t.spec.max_output_bytes),
                           stateful=bool(getattr(t, "stateful", False)))
                   for t in self.tools.values()],
            server_version=self.version, max_calls_per_request=MAX_CALLS_PER_REQUEST)

    async def ExecuteTools(self, request: pb.ExecuteToolsRequest, context) -> pb.ExecuteToolsResponse:
        if len(request.calls) > MAX_CALLS_PER_REQUEST:
            raise BadToolRequest(f"{len(request.calls)} calls in one request; at most {MAX_CALLS_PER_REQUEST}")
        ids = [c.call_id for c in request.calls]
        if len(set(ids)) != len(ids):
            raise BadToolRequest("call_id values repeat within the request")
        now = time.monotonic()
        left = context.time_remaining()
        deadline = now + self.call_budget_s
        if left is not None:
            deadline = min(deadline, now + left - reply_margin(left))
        anonymous = f"\0request {next(self._requests)}"  # calls without a session: one session per request
        tasks = [asyncio.ensure_future(self._call(c, c.session_id or anonymous, deadline)) for c in request.calls]
        try:
            if tasks:  # every call ends by `deadline` by construction; waiting past it is only a backstop
                await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()) + MIN_RUN_S)
        finally:
            for t in tasks:
                t.cancel()  # a call still waiting or running (or the whole RPC cancelled): stop it
        return pb.ExecuteToolsResponse(results=[_outcome(c, t) for c, t in zip(request.calls, tasks)])

    async def EndSessions(self, request: pb.EndSessionsRequest, context) -> pb.EndSessionsResponse:
        """Each stateful tool (one with ``end_sessions(ids) -> int``) frees these sessions' state."""
        if len(request.session_ids) > MAX_SESSIONS_PER_END:
            raise BadToolRequest(f"{len(request.session_ids)} sessions in one request; at most {MAX_SESSIONS_PER_END}")
        loop = asyncio.get_running_loop()
        ids = list(dict.fromkeys(request.session_ids))
        ended = 0
        for tool in self.tools.values():
            end = getattr(tool, "end_sessions", None)
            if end is not None and ids:
                ended += await loop.run_in_executor(self.pool, end, ids)
        return pb.EndSessionsResponse(ended=ended)

    async def _call(self, call: pb.ToolCall, session: str, deadline: float) -> pb.ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:  # answered at once: the model's mistake needs no place
            return self._result(call, tool, ToolOutput(
                f"unknown tool {call.name!r}; this server offers: {', '.join(self.tools)}", "unknown_tool"), 0.0)
        gate = self.gates[call.name]
        start = time.monotonic()
        if not await gate.acquire(session, timeout=deadline - MIN_RUN_S - start):
            waited = time.monotonic() - start
            return self._result(call, tool, ToolOutput(
                f"the tool server was busy: no free place for this call in {waited:.1f} s; call again", BUSY), waited)
        ctx = CallContext(call.session_id, deadline)
        loop = asyncio.get_running_loop()
        began = time.monotonic()
        job = self.pool.submit(self._one, call, tool, ctx)
        # the place is the thread's: given back when the work ends, even if the client gave up first
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(gate.release, session, time.monotonic() - began))
        try:
            return await asyncio.shield(asyncio.wrap_future(job))
        except asyncio.CancelledError:
            ctx.cancel()
            raise

    def _one(self, call: pb.ToolCall, tool: Tool, ctx: CallContext) -> pb.ToolResult:
        start = time.perf_counter()
        status, detail = pb.CALL_STATUS_OK, ""
        arguments = parse_arguments(tool.spec, call.arguments_json)
        if isinstance(arguments, ToolOutput):
            out = arguments
        else:
            _CURRENT.call = ctx
            try:
                out = tool.run(arguments, call.session_id)
            except ToolUnavailable as exc:
                status, detail, out = pb.CALL_STATUS_UNAVAILABLE, str(exc), ToolOutput("")
            except Exception as exc:  # a bug of the tool, not the call's fault: masked, logged
                log.exception("tool %s failed", call.name)
                status, detail, out = pb.CALL_STATUS_INTERNAL, f"{type(exc).__name__}: {exc}", ToolOutput("")
            finally:
                _CURRENT.call = None
        return self._result(call, tool, out, time.perf_counter() - start, status, detail)

    @staticmethod
    def _result(call: pb.ToolCall, tool: Tool | None, out: ToolOutput, seconds: float,
                status: int = pb.CALL_STATUS_OK, detail: str = "") -> pb.ToolResult:
        limit = tool.spec.max_output_bytes if tool is not None else 4096
        text, was_cut = cut(out.output, limit)
        return pb.ToolResult(call_id=call.call_id, status=status, output=text, error_kind=out.error_kind,
                             truncated=out.truncated or was_cut, duration=_duration(seconds), detail=detail[:1000])


def _gate(capacity: int) -> FairGate:
    """A tool's places: one session holds at most half of them (at least one) while other sessions wait;
    alone, it may use them all."""
    return FairGate(per_key=max(1, capacity // 2), capacity=capacity, spill=True)


def _outcome(call: pb.ToolCall, task: asyncio.Future) -> pb.ToolResult:
    """A call's result; one still running past the request's deadline broke its budget, one whose scheduling
    failed is a bug (both infrastructure: masked, the other calls' results kept)."""
    if task.cancelled():
        return pb.ToolResult(call_id=call.call_id, status=pb.CALL_STATUS_UNAVAILABLE,
                             detail="the call did not end within its budget (the request's deadline)")
    if task.exception() is not None:
        log.error("tool call %s failed: %r", call.name, task.exception())
        return pb.ToolResult(call_id=call.call_id, status=pb.CALL_STATUS_INTERNAL,
                             detail=f"{type(task.exception()).__name__}: {task.exception()}"[:1000])
    return task.result()


def add_to_server(tools: Sequence[Tool], version: str, runtime) -> None:
    """Register a :class:`ToolServicer` on ``runtime`` (a :class:`cohort.rpc.runtime.GrpcRuntime`)."""
    register(ToolServicer(tools, version), runtime)


def register(servicer: ToolServicer, runtime) -> None:
    """Register ``servicer`` on ``runtime`` with the generated function and the tool service's :data:`ERRORS`."""
    runtime.add_service(SERVICE_NAME, pb_grpc.add_ToolServiceServicer_to_server, servicer, errors=ERRORS)


async def serve(tools: Sequence[Tool], version: str, options) -> None:
    """Serve ``tools`` (+ health, reflection) on ``options`` (:class:`cohort.rpc.runtime.RuntimeOptions`)
    until SIGTERM/SIGINT, then drain."""
    from cohort.rpc.runtime import GrpcRuntime

    runtime = GrpcRuntime(options)
    add_to_server(tools, version, runtime)
    await runtime.start(service_names=[SERVICE_NAME], health_names=[])
    await runtime.serve_until_signal()
