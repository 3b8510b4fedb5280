"""grpo.tool.v1 over real gRPC on loopback: the sandbox's `python` tool and the `calculator` server
(`cohort serve sandbox`, `cohort serve calculator` in subprocesses), through the learner's client.

Each failure lands on the right side of the contract: a call's own fault (code that raises or loops,
bad JSON, arguments off the schema, an unknown tool) is an OK result the model reads; a server that is
gone is an infrastructure failure (``ok=False``: the rollout is masked)."""

from __future__ import annotations

import json

import grpc
import pytest

from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
from cohort.proto.grpo.tool.v1 import tool_service_pb2_grpc as pb_grpc
from cohort.rpc.launch import ServiceProcess, health_status
from cohort.tools.calculator import CalculatorError, evaluate
from cohort.tools.client import Call, ToolClient, ToolError


@pytest.fixture(scope="module")
def sandbox():
    with ServiceProcess(["sandbox"], env={"COHORT_SANDBOX_POOL_SIZE": "2"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def calculator():
    with ServiceProcess(["calculator"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(sandbox, calculator):
    c = ToolClient([[sandbox.endpoint], [calculator.endpoint]], timeout_s=30)
    c.handshake()
    yield c
    c.close()


def python(code: str) -> Call:
    return Call("python", json.dumps({"code": code}))


def test_health_reflection_and_the_listed_tools(sandbox, calculator) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    for server, tool in ((sandbox, "python"), (calculator, "calculator")):
        assert health_status(server.endpoint, "grpo.tool.v1.ToolService") == "SERVING"
        with grpc.insecure_channel(server.endpoint) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            assert "grpo.tool.v1.ToolService" in {s.name for r in responses for s in r.list_services_response.service}
            listed = pb_grpc.ToolServiceStub(channel).ListTools(pb.ListToolsRequest(), timeout=10)
        [spec] = listed.tools
        assert spec.name == tool and spec.description and listed.max_calls_per_request > 0
        schema = json.loads(spec.parameters_json_schema)
        assert schema["type"] == "object" and schema["required"]
        assert spec.limits.max_wall_time.ToNanoseconds() > 0 and spec.limits.max_output_bytes > 0


def test_one_batch_across_two_servers_in_order(client) -> None:
    calls = [Call("calculator", json.dumps({"expression": "347 * 829"})), python("print(347 * 829)"),
             python("import sys; print('partial'); sys.exit(3)"), Call("calculator", json.dumps({"expression": "1/0"})),
             python("print(sum(range(10)))")]
    results = client.execute(calls)
    assert [r.ok for r in results] == [True] * 5
    assert results[0].output == "287663" and results[1].output == "287663\n"
    assert results[2].error_kind == "runtime_error" and "partial" in results[2].output
    assert results[3].error_kind == "bad_expression" and "division by zero" in results[3].output
    assert results[4].output == "45\n" and results[4].error_kind == ""


@pytest.mark.parametrize("call, kind, says", [
    (python("1/0"), "runtime_error", "ZeroDivisionError"),
    (python("x = bytearray(1 << 33)"), "memory_limit", "memory"),
    (python("print('y' * 10**6)"), "output_limit", "output limit"),
    (Call("python", "{not json"), "bad_arguments", "not valid JSON"),
    (Call("python", json.dumps({"source": "print(1)"})), "bad_arguments", "'code' is a required property"),
    (Call("python", json.dumps({"code": 42})), "bad_arguments", "is not of type 'string'"),
    (Call("shell", json.dumps({"cmd": "ls"})), "unknown_tool", "available: calculator, python"),
    (Call("calculator", json.dumps({"expression": "__import__('os').system('id')"})), "bad_expression", "not allowed"),
    (Call("calculator", json.dumps({"expression": "9 ** 9 ** 9"})), "bad_expression", "digits"),
], ids=["raises", "memory", "flood", "bad-json", "missing-argument", "wrong-type", "unknown-tool", "calc-call",
        "calc-huge-power"])
def test_a_calls_own_fault_is_an_ok_result_the_model_reads(client, call, kind, says) -> None:
    [result] = client.execute([call])
    assert result.ok, result  # never masked: the policy wrote it
    assert result.error_kind == kind and says in result.output, result


def test_a_loop_is_stopped_at_the_tools_limit_and_still_scored(client) -> None:
    [result] = client.execute([python("while True: pass")])
    assert result.ok and result.error_kind == "time_limit"


def test_output_is_cut_to_the_advertised_limit(client) -> None:
    [result] = client.execute([python("print('z' * 20000)")])
    assert result.ok and result.truncated and len(result.output.encode()) <= 4096


def test_a_server_that_is_gone_is_an_infrastructure_failure() -> None:
    with ServiceProcess(["calculator"]) as proc:
        client = ToolClient([[proc.endpoint]], timeout_s=2)
        client.handshake()
        proc.kill()
        [result] = client.execute([Call("calculator", json.dumps({"expression": "1+1"}))])
    assert not result.ok and "UNAVAILABLE" in result.detail
    with pytest.raises(ToolError, match="did not answer ListTools"):
        ToolClient([[proc.endpoint]], timeout_s=1).handshake()


def test_repeated_call_ids_are_invalid_argument(calculator) -> None:
    call = pb.ToolCall(call_id="1", name="calculator", arguments_json='{"expression": "1"}')
    with grpc.insecure_channel(calculator.endpoint) as channel:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.ToolServiceStub(channel).ExecuteTools(pb.ExecuteToolsRequest(calls=[call, call]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("expression, value", [("2 + 3 * 4", 14), ("(2 + 3) * 4", 20), ("7 / 2", 3.5), ("7 // 2", 3),
                                               ("-2 ** 2", -4), ("2 ^ 10", 1024), ("10 % 4", 2), ("2 ** -1", 0.5),
                                               ("123456789 * 987654321", 121932631112635269)])
def test_calculator_values(expression, value) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression", ["x + 1", "print(1)", "[1, 2]", "1 if 1 else 2", "'a' * 3", "(" * 3000,
                                        "-" * 1500 + "1", "10 ** 5000", "1e308 * 10", "0 ** -1", "1 / 0", ""])
def test_calculator_refuses_what_is_not_bounded_arithmetic(expression) -> None:
    with pytest.raises(CalculatorError):
        evaluate(expression)
