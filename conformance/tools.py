"""The conformance rules of a ``grpo.tool.v1`` tool server, over the wire (any language).

``cohort conformance-tools HOST:PORT`` runs them in order and prints the same pass/fail table as the
verifier kit. What they hold a server to (``proto/grpo/tool/v1/tool_service.proto``, docs/tools.md):

- ``health``, ``reflection``: the standard health service says SERVING for ``grpo.tool.v1.ToolService``,
  and server reflection lists it;
- ``list_tools``: at least one tool; names ``[a-z][a-z0-9_]*`` and unique; each parameter schema is a
  valid JSON Schema of an object; limits are set;
- ``order_and_ids``: a batch gets one result per call, in the request's order, each echoing its call_id;
- ``bad_json_is_the_calls_fault``, ``unknown_tool_is_the_calls_fault``: a malformed arguments text and an
  unknown tool name are OK results (``bad_arguments``, ``unknown_tool``): the model's fault, never an
  infrastructure status that would mask the rollout;
- ``output_within_limit``: no output longer than the tool's advertised ``max_output_bytes``;
- ``empty_batch``: no calls, no results; ``repeated_ids``: INVALID_ARGUMENT.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import grpc
import jsonschema

from cohort.conformance.runner import CheckResult
from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.rpc import health

SERVICE_NAME = "grpo.tool.v1.ToolService"
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Broken(Exception):
    """The rule does not hold (the message says how)."""


class Kit:
    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = pb_grpc.ToolServiceStub(self.channel)
        self.tools: list[pb.Tool] = []

    def execute(self, calls: list[pb.ToolCall]) -> list[pb.ToolResult]:
        return list(self.stub.ExecuteTools(pb.ExecuteToolsRequest(calls=calls), timeout=self.timeout_s).results)

    def health(self) -> str:
        for name in ("", SERVICE_NAME):
            status = health.health_status(self.endpoint, name, timeout_s=self.timeout_s)
            if status != "SERVING":
                raise Broken(f"health of {name or 'the server'!r} is {status}")
        return "SERVING"

    def reflection(self) -> str:
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                              timeout=self.timeout_s)
        names = {s.name for r in responses for s in r.list_services_response.service}
        if SERVICE_NAME not in names:
            raise Broken(f"reflection lists {sorted(names)}, not {SERVICE_NAME}")
        return "lists " + SERVICE_NAME

    def list_tools(self) -> str:
        self.tools = list(self.stub.ListTools(pb.ListToolsRequest(), timeout=self.timeout_s).tools)
        if not self.tools:
            raise Broken("ListTools returned no tool")
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise Broken(f"tool names repeat: {names}")
        for t in self.tools:
            if not NAME.match(t.name):
                raise Broken(f"tool name {t.name!r} is not [a-z][a-z0-9_]*")
            try:
                schema = json.loads(t.parameters_json_schema)
                jsonschema.Draft202012Validator.check_schema(schema)
            except (json.JSONDecodeError, jsonschema.SchemaError) as exc:
                raise Broken(f"tool {t.name!r}: parameters_json_schema is not a JSON Schema: {exc}") from None
            if schema.get("type") != "object":
                raise Broken(f"tool {t.name!r}: the arguments schema must describe an object")
            if t.limits.max_wall_time.ToNanoseconds() <= 0 or t.limits.max_output_bytes <= 0:
                raise Broken(f"tool {t.name!r}: limits max_wall_time and max_output_bytes must be set")
        return ", ".join(names)

    def _each_tool(self, arguments_json: str) -> list[pb.ToolCall]:
        return [pb.ToolCall(call_id=f"c{9 - i}", name=t.name, arguments_json=arguments_json, session_id="kit")
                for i, t in enumerate(self.tools[:9])]

    def order_and_ids(self) -> str:
        calls = self._each_tool("{}") + self._each_tool("[]")
        for i, c in enumerate(calls):
            c.call_id = f"id-{len(calls) - i}"  # not sorted by id: order is the request's
        results = self.execute(calls)
        if [r.call_id for r in results] != [c.call_id for c in calls]:
            raise Broken(f"call ids {[r.call_id for r in results]} for a request of {[c.call_id for c in calls]}")
        return f"{len(results)} results in order"

    def bad_json_is_the_calls_fault(self) -> str:
        for call, r in zip(calls := self._each_tool("{not json"), self.execute(calls)):
            if r.status != pb.CALL_STATUS_OK or r.error_kind != "bad_arguments":
                raise Broken(f"tool {call.name!r}: malformed arguments gave {pb.CallStatus.Name(r.status)} "
                             f"error_kind={r.error_kind!r} (want CALL_STATUS_OK, bad_arguments)")
        return "CALL_STATUS_OK, bad_arguments"

    def unknown_tool_is_the_calls_fault(self) -> str:
        [r] = self.execute([pb.ToolCall(call_id="x", name="no_such_tool_cohort_kit", arguments_json="{}")])
        if r.status != pb.CALL_STATUS_OK or r.error_kind != "unknown_tool":
            raise Broken(f"an unknown tool gave {pb.CallStatus.Name(r.status)} error_kind={r.error_kind!r} "
                         "(want CALL_STATUS_OK, unknown_tool)")
        return "CALL_STATUS_OK, unknown_tool"

    def output_within_limit(self) -> str:
        limits = {t.name: t.limits.max_output_bytes for t in self.tools}
        calls = self._each_tool("{}")
        for call, r in zip(calls, self.execute(calls)):
            if len(r.output.encode()) > limits[call.name]:
                raise Broken(f"tool {call.name!r}: {len(r.output.encode())} bytes of output, "
                             f"advertised at most {limits[call.name]}")
        return "within the advertised limits"

    def empty_batch(self) -> str:
        if self.execute([]):
            raise Broken("results for a request without calls")
        return "no calls, no results"

    def repeated_ids(self) -> str:
        call = pb.ToolCall(call_id="same", name=self.tools[0].name, arguments_json="{}")
        try:
            self.execute([call, call])
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                return "INVALID_ARGUMENT"
            raise Broken(f"repeated call ids gave {exc.code().name}, not INVALID_ARGUMENT") from None
        raise Broken("repeated call ids were answered (want INVALID_ARGUMENT)")


RULES: tuple[str, ...] = ("health", "reflection", "list_tools", "order_and_ids", "bad_json_is_the_calls_fault",
                          "unknown_tool_is_the_calls_fault", "output_within_limit", "empty_batch", "repeated_ids")


def run_tool_kit(endpoint: str, timeout_s: float = 15.0) -> list[CheckResult]:
    """Every rule, in order; a rule after a failed ``list_tools`` is skipped."""
    kit = Kit(endpoint, timeout_s)
    results = []
    try:
        for name in RULES:
            check: Callable[[], str] = getattr(kit, name)
            start = time.perf_counter()
            if name not in ("health", "reflection", "list_tools") and not kit.tools:
                results.append(CheckResult(name, "", "skip", "no tools listed", 0.0))
                continue
            try:
                results.append(CheckResult(name, "", "pass", check(), time.perf_counter() - start))
            except Broken as exc:
                results.append(CheckResult(name, "", "fail", str(exc), time.perf_counter() - start))
            except grpc.RpcError as exc:
                results.append(CheckResult(name, "", "fail", f"{exc.code().name}: {exc.details()}",
                                           time.perf_counter() - start))
    finally:
        kit.channel.close()
    return results
