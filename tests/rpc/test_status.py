"""The one server interceptor (``cohort.rpc.status``), over real gRPC on loopback: a tool server in this
process, registered with ``GrpcRuntime.add_service``; what each outcome becomes on the wire and in ``observe``."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions
from cohort.tools import server as tool_server
from cohort.tools.base import ToolOutput, ToolSpec


class Echo:
    spec = ToolSpec("echo", "echo", {"type": "object"})

    def run(self, arguments, session_id):
        return ToolOutput(str(arguments))


class Buggy(tool_server.ToolServicer):
    async def EndSessions(self, request, context):
        raise RuntimeError("a bug, not a domain error")


def test_one_interceptor_maps_errors_drains_and_observes():
    seen: list[tuple[str, str]] = []

    async def main():
        runtime = GrpcRuntime(RuntimeOptions())
        runtime.add_service(tool_server.SERVICE_NAME, pb_grpc.add_ToolServiceServicer_to_server,
                            Buggy([Echo()], "t"), errors=tool_server.ERRORS,
                            observe=lambda method, code, seconds: seen.append((method, code)))
        port = await runtime.start(service_names=[tool_server.SERVICE_NAME], health_names=[])
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.ToolServiceStub(channel)
                codes = {}
                assert [t.name for t in (await stub.ListTools(pb.ListToolsRequest(), timeout=10)).tools] == ["echo"]
                twice = [pb.ToolCall(call_id="1", name="echo", arguments_json="{}")] * 2
                calls = {
                    "domain": stub.ExecuteTools(pb.ExecuteToolsRequest(calls=twice), timeout=10),
                    "garbage": channel.unary_unary("/grpo.tool.v1.ToolService/ExecuteTools")(b"\xff\xff\xff", timeout=10),
                    "bug": stub.EndSessions(pb.EndSessionsRequest(session_ids=["s"]), timeout=10),
                }
                for name, call in calls.items():
                    try:
                        await call
                    except grpc.aio.AioRpcError as err:
                        codes[name] = (err.code(), err.details())
                assert runtime.in_flight == 0
                runtime.draining = True
                try:
                    await stub.ListTools(pb.ListToolsRequest(), timeout=10)
                except grpc.aio.AioRpcError as err:
                    codes["draining"] = (err.code(), err.details())
                health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        finally:
            await runtime.server.stop(None)
        return codes, health.status

    codes, health = asyncio.run(main())
    assert codes["domain"] == (grpc.StatusCode.INVALID_ARGUMENT, "call_id values repeat within the request")
    assert codes["garbage"][0] is grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in codes["garbage"][1]
    assert codes["bug"][0] is grpc.StatusCode.UNKNOWN  # a bug is not dressed up as a domain error
    assert codes["draining"][0] is grpc.StatusCode.UNAVAILABLE and "draining" in codes["draining"][1]
    assert health == health_pb2.HealthCheckResponse.SERVING  # health is answered while draining (not a service's call)
    assert sorted(seen) == sorted([("ListTools", "OK"), ("ExecuteTools", "INVALID_ARGUMENT"),
                                   ("ExecuteTools", "INVALID_ARGUMENT"), ("EndSessions", "UNKNOWN"),
                                   ("ListTools", "UNAVAILABLE")])
