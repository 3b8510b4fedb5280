"""SandboxService over real gRPC on loopback (`cohort serve sandbox` in a subprocess)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def server():
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["sandbox"], env={"COHORT_SANDBOX_POOL_SIZE": "2"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.endpoint) as channel:
        yield pb_grpc.SandboxServiceStub(channel)


def seconds(s: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


def test_health_overall_and_service(server) -> None:
    from cohort.rpc.launch import health_status

    assert health_status(server.endpoint, "") == "SERVING"
    assert health_status(server.endpoint, "grpo.sandbox.v1.SandboxService") == "SERVING"


def test_reflection_lists_the_service(server) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(server.endpoint) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in responses for s in r.list_services_response.service}
    assert "grpo.sandbox.v1.SandboxService" in names


def test_execute_code_statuses(stub) -> None:
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(language="python", code="print(input()[::-1])", stdin=b"abc\n"))
    assert (r.status, r.exit_code, r.stdout) == (pb.EXECUTION_STATUS_EXITED, 0, b"cba\n")
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code="import sys; sys.exit(3)"))
    assert (r.status, r.exit_code) == (pb.EXECUTION_STATUS_EXITED, 3)
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code="while True: pass", limits=pb.Limits(wall_time=seconds(0.5))))
    assert r.status == pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED and r.wall_time.ToNanoseconds() < 5e9
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code="x = bytearray(1 << 33)", limits=pb.Limits(memory_bytes=64 << 20)))
    assert r.status == pb.EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code="print('x' * 100000)", limits=pb.Limits(output_bytes=1000)))
    assert r.status == pb.EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED and r.stdout_truncated and len(r.stdout) == 1000


def test_limits_are_clamped_by_server_maxima(stub) -> None:
    huge = pb.Limits(wall_time=seconds(10_000), output_bytes=1 << 40, memory_bytes=1 << 50)
    code = "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])"
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code=code, limits=huge))
    assert r.status == pb.EXECUTION_STATUS_EXITED
    assert int(r.stdout) == 2 << 30  # policy.MAX_LIMITS.memory_bytes


def test_run_tests_asserts_and_function(stub) -> None:
    req = pb.RunTestsRequest(code="def sq(x):\n    return x * x", per_test_timeout=seconds(5),
                             asserts=pb.AssertTests(asserts=["assert sq(3) == 9", "assert sq(2) == 5"]))
    r = stub.RunTests(req)
    assert [o.passed for o in r.outcomes] == [True, False]
    assert r.outcomes[1].cause == pb.TEST_CAUSE_ASSERTION
    req = pb.RunTestsRequest(code="def sq(x):\n    return x * x",
                             function=pb.FunctionTest(test_code="def check(c):\n    assert c(4) == 16", entry_point="sq"))
    assert [o.passed for o in stub.RunTests(req).outcomes] == [True]
    r = stub.RunTests(pb.RunTestsRequest(code="def sq(x) return", asserts=pb.AssertTests(asserts=["assert sq(1) == 1"])))
    assert "SyntaxError" in r.load_error and r.load_cause == pb.TEST_CAUSE_RUNTIME_ERROR and not r.outcomes[0].passed


@pytest.mark.parametrize("request_", [
    pb.RunTestsRequest(code="x = 1"),  # no tests
    pb.RunTestsRequest(code="x = 1", asserts=pb.AssertTests()),  # empty asserts
    pb.RunTestsRequest(code="x = 1", function=pb.FunctionTest(test_code="def check(c): pass")),  # no entry point
    pb.RunTestsRequest(code="x = 1", language="rust", asserts=pb.AssertTests(asserts=["assert 1"])),
    pb.RunTestsRequest(code="x = 1", asserts=pb.AssertTests(asserts=["assert 1"], setup_code="raise ValueError")),
], ids=["no-tests", "empty-asserts", "no-entry-point", "language", "broken-setup"])
def test_bad_run_tests_requests_are_invalid_argument(stub, request_) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.RunTests(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_execute_requests_are_invalid_argument(stub) -> None:
    for req in (pb.ExecuteCodeRequest(language="cobol", code="x"),
                pb.ExecuteCodeRequest(code="x", files=[pb.File(path="../escape", content=b"b")]),
                pb.ExecuteCodeRequest(code="x", files=[pb.File(path="/etc/passwd", content=b"b")])):
        with pytest.raises(grpc.RpcError) as err:
            stub.ExecuteCode(req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_code_verifier_over_grpc(server) -> None:
    from cohort.verifiers.base import CodeTests, GroupRequest, IoCase, Reference, Rollout, VerifyContext
    from cohort.verifiers.code import CodeVerifier

    v = CodeVerifier(sandbox_endpoints=[server.endpoint])  # as the registry builds it, from its options
    tests = CodeTests("asserts", asserts=("assert inc(1) == 2", "assert inc(5) == 6"))
    group = GroupRequest("code", (Rollout(0, "def inc(x): return x + 1"), Rollout(1, "def inc(x): return 2")),
                         Reference(code_tests=tests))
    assert [r.reward for r in v.verify_group(group, VerifyContext())] == [1.0, 0.5]
    io = CodeTests("io", io_cases=(IoCase("4\n", "16"),))
    group = GroupRequest("code", (Rollout(0, "print(int(input()) ** 2)"),), Reference(code_tests=io))
    assert [r.reward for r in v.verify_group(group, VerifyContext())] == [1.0]


def test_execute_code_with_files(stub) -> None:
    req = pb.ExecuteCodeRequest(code="print(open('data/in.txt').read().upper())",
                                files=[pb.File(path="data/in.txt", content=b"hello")])
    r = stub.ExecuteCode(req)
    assert (r.status, r.stdout) == (pb.EXECUTION_STATUS_EXITED, b"HELLO\n")
    r = stub.ExecuteCode(pb.ExecuteCodeRequest(code="import os; print(os.listdir('.'))"))
    assert r.stdout == b"[]\n"  # wiped after the previous run


def test_sigterm_drains(server) -> None:
    """Last in the module: SIGTERM makes the server exit cleanly."""
    server.terminate()
    assert server.proc.wait(timeout=30) == 0


def test_serve_function_with_host_and_port(tmp_path) -> None:
    """``sandbox.server.serve(host, port, **opts)`` as other entry points call it; SIGTERM stops it."""
    import signal
    import subprocess
    import sys
    import time

    from cohort.rpc.launch import health_status

    port_file = tmp_path / "port"
    script = ("import asyncio, pathlib\nfrom cohort.sandbox.server import serve\n"
              f"asyncio.run(serve('127.0.0.1', 0, port_file=pathlib.Path({str(port_file)!r}), pool_size=1))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        endpoint = f"127.0.0.1:{int(port_file.read_text())}"
        assert health_status(endpoint, "grpo.sandbox.v1.SandboxService") == "SERVING"
        with grpc.insecure_channel(endpoint) as channel:
            r = pb_grpc.SandboxServiceStub(channel).ExecuteCode(pb.ExecuteCodeRequest(code="print(2 + 2)"))
        assert r.stdout == b"4\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
