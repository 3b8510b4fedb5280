"""``grpo.tool.v1.ToolService`` over grpc.aio, hosting plain Python :class:`~cohort.tools.base.Tool` objects.

Thin transport: a batch's calls run concurrently on a thread pool, each converted in and out here.
The call's own failures come back in-band (``CALL_STATUS_OK`` with ``error_kind``: the model reads
them); :class:`~cohort.tools.base.ToolUnavailable` is ``CALL_STATUS_UNAVAILABLE`` and any other
exception ``CALL_STATUS_INTERNAL`` (both masked by the learner). A request with more calls than
``max_calls_per_request`` or with repeated ``call_id`` values is INVALID_ARGUMENT; draining is UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc

from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.tools.base import Tool, ToolOutput, ToolUnavailable, cut, parse_arguments

log = logging.getLogger("cohort.tools")

SERVICE_NAME = "grpo.tool.v1.ToolService"
MAX_CALLS_PER_REQUEST = 1024


def _duration(seconds: float):
    from google.protobuf.duration_pb2 import Duration

    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class ToolServicer(pb_grpc.ToolServiceServicer):
    def __init__(self, tools: Sequence[Tool], version: str, runtime=None, workers: int = 16) -> None:
        self.tools = {t.spec.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise ValueError("two tools share a name")
        self.version = version
        self.runtime = runtime
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool-rpc")

    async def ListTools(self, request: pb.ListToolsRequest, context) -> pb.ListToolsResponse:
        return pb.ListToolsResponse(
            tools=[pb.Tool(name=t.spec.name, description=t.spec.description,
                           parameters_json_schema=json.dumps(t.spec.parameters),
                           limits=pb.ToolLimits(max_wall_time=_duration(t.spec.max_wall_s),
                                                max_output_bytes=t.spec.max_output_bytes))
                   for t in self.tools.values()],
            server_version=self.version, max_calls_per_request=MAX_CALLS_PER_REQUEST)

    async def ExecuteTools(self, request: pb.ExecuteToolsRequest, context) -> pb.ExecuteToolsResponse:
        if self.runtime is not None and self.runtime.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "tool server is draining (shutting down)")
        if len(request.calls) > MAX_CALLS_PER_REQUEST:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{len(request.calls)} calls in one request; at most {MAX_CALLS_PER_REQUEST}")
        ids = [c.call_id for c in request.calls]
        if len(set(ids)) != len(ids):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "call_id values repeat within the request")
        loop = asyncio.get_running_loop()
        track = self.runtime.track() if self.runtime is not None else contextlib.nullcontext()
        with track:
            results = await asyncio.gather(*(loop.run_in_executor(self.pool, self._one, c) for c in request.calls))
        return pb.ExecuteToolsResponse(results=results)

    def _one(self, call: pb.ToolCall) -> pb.ToolResult:
        start = time.perf_counter()
        status, detail = pb.CALL_STATUS_OK, ""
        tool = self.tools.get(call.name)
        if tool is None:
            out = ToolOutput(f"unknown tool {call.name!r}; this server offers: {', '.join(self.tools)}", "unknown_tool")
        else:
            arguments = parse_arguments(tool.spec, call.arguments_json)
            if isinstance(arguments, ToolOutput):
                out = arguments
            else:
                try:
                    out = tool.run(arguments, call.session_id)
                except ToolUnavailable as exc:
                    status, detail, out = pb.CALL_STATUS_UNAVAILABLE, str(exc), ToolOutput("")
                except Exception as exc:  # a bug of the tool, not the call's fault: masked, logged
                    log.exception("tool %s failed", call.name)
                    status, detail, out = pb.CALL_STATUS_INTERNAL, f"{type(exc).__name__}: {exc}", ToolOutput("")
        limit = tool.spec.max_output_bytes if tool is not None else 4096
        text, was_cut = cut(out.output, limit)
        return pb.ToolResult(call_id=call.call_id, status=status, output=text, error_kind=out.error_kind,
                             truncated=out.truncated or was_cut, duration=_duration(time.perf_counter() - start),
                             detail=detail[:1000])


def add_to_server(tools: Sequence[Tool], version: str, runtime) -> None:
    """Register a :class:`ToolServicer` on ``runtime`` (a :class:`cohort.rpc.runtime.GrpcRuntime`)."""
    pb_grpc.add_ToolServiceServicer_to_server(ToolServicer(tools, version, runtime), runtime.server)


async def serve(tools: Sequence[Tool], version: str, options) -> None:
    """Serve ``tools`` (+ health, reflection) on ``options`` (:class:`cohort.rpc.runtime.RuntimeOptions`)
    until SIGTERM/SIGINT, then drain."""
    from cohort.rpc.runtime import GrpcRuntime

    runtime = GrpcRuntime(options)
    add_to_server(tools, version, runtime)
    await runtime.start(service_names=[SERVICE_NAME], health_names=[])
    await runtime.serve_until_signal()
