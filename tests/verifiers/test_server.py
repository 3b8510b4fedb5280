"""The verifier server over real gRPC on loopback, served from a subprocess (the test is the client)."""

from __future__ import annotations

import socket
import time
import urllib.request

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import health_status

GOOD = "<think>add</think><answer>4</answer>"


def group(verifier="format", completions=(GOOD, "4"), group_id="g", indexes=None, **kw) -> pb.VerifyGroupRequest:
    indexes = indexes if indexes is not None else range(len(completions))
    rollouts = [pb.Rollout(index=i, completion=c) for i, c in zip(indexes, completions)]
    return pb.VerifyGroupRequest(group_id=group_id, verifier=verifier, rollouts=rollouts, **kw)


@pytest.fixture()
def stub(format_server):
    with grpc.insecure_channel(format_server.endpoint, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        yield pb_grpc.VerifierServiceStub(ch)


def assert_still_healthy(endpoint: str, stub) -> None:
    assert health_status(endpoint) == "SERVING"
    resp = stub.VerifyGroup(group(group_id="after"), timeout=10)
    assert [r.reward for r in resp.results] == [1.0, 0.0]
    assert [r.status for r in resp.results] == [pb.ROLLOUT_STATUS_OK] * 2


def test_verify_group_scores_and_echoes(stub):
    resp = stub.VerifyGroup(group(completions=[GOOD, "no tags", "<answer>1</answer><answer>2</answer>"], indexes=[7, 3, 5]), timeout=10)
    assert resp.group_id == "g" and resp.verifier == "format" and resp.verifier_version == "1.0.0"
    assert [r.index for r in resp.results] == [7, 3, 5]
    assert [r.verdict for r in resp.results] == [pb.VERDICT_CORRECT, pb.VERDICT_NO_ANSWER, pb.VERDICT_INCORRECT]
    assert resp.results[0].reward_components == {"think": 1.0, "answer": 1.0, "clean": 1.0}
    assert "multiple_answers" in resp.results[2].flags
    assert resp.verify_duration.ToNanoseconds() > 0  # format times the group, not each rollout


def test_batch_keeps_request_order(stub):
    reqs = [group(group_id=f"g{i}", completions=[GOOD if i % 2 else "x"] * 3) for i in range(40)]
    resp = stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=reqs), timeout=10)
    assert [r.group_id for r in resp.responses] == [f"g{i}" for i in range(40)]
    assert [r.results[0].reward for r in resp.responses] == [float(i % 2) for i in range(40)]


def test_list_verifiers_handshake(stub):
    resp = stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=5)
    assert [(v.name, v.version) for v in resp.verifiers] == [("format", "1.0.0")]
    assert resp.limits.max_groups_per_batch == 64
    assert resp.limits.max_message_bytes == 8 * 1024 * 1024
    assert resp.server_version.startswith("cohort-rl ")


def test_reflection_lists_services(format_server):
    with grpc.insecure_channel(format_server.endpoint) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {"grpo.verifier.v1.VerifierService", "grpc.health.v1.Health"} <= services
        desc = db.FindFileContainingSymbol("grpo.verifier.v1.VerifierService")
        assert desc.package == "grpo.verifier.v1"


def test_health_overall_and_per_verifier(format_server):
    assert health_status(format_server.endpoint) == "SERVING"
    assert health_status(format_server.endpoint, "format") == "SERVING"
    assert health_status(format_server.endpoint, "grpo.verifier.v1.VerifierService") == "SERVING"
    with pytest.raises(grpc.RpcError) as err:
        health_status(format_server.endpoint, "math")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


BAD_REQUESTS = {
    "unknown verifier": (lambda: group(verifier="nope"), grpc.StatusCode.INVALID_ARGUMENT, "unknown verifier 'nope'"),
    "empty group": (lambda: group(completions=[]), grpc.StatusCode.INVALID_ARGUMENT, "no rollouts"),
    "duplicate index": (lambda: group(completions=["a", "b"], indexes=[1, 1]), grpc.StatusCode.INVALID_ARGUMENT, "duplicate rollout index 1"),
    "bad option": (lambda: group(options={"mode": "lenient"}), grpc.StatusCode.INVALID_ARGUMENT, "mode='lenient'"),
    "10 MB completion": (lambda: group(completions=["x" * 10_000_000]), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
    "too many rollouts": (lambda: group(completions=["a"] * 1025), grpc.StatusCode.INVALID_ARGUMENT, "the limit is 1024"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_request_gets_its_code_and_server_survives(format_server, stub, case):
    make, code, message = BAD_REQUESTS[case]
    with pytest.raises(grpc.RpcError) as err:
        stub.VerifyGroup(make(), timeout=10)
    assert err.value.code() == code
    assert message in err.value.details()
    assert_still_healthy(format_server.endpoint, stub)


def test_too_many_groups(format_server, stub):
    reqs = [group(group_id=str(i)) for i in range(65)]
    with pytest.raises(grpc.RpcError) as err:
        stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=reqs), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "65 groups in one call; the limit is 64" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_still_healthy(format_server.endpoint, stub)


def test_one_ms_deadline(format_server, stub):
    reqs = [group(group_id=str(i), completions=[GOOD * 50] * 8) for i in range(64)]
    with pytest.raises(grpc.RpcError) as err:
        stub.BatchVerifyGroups(pb.BatchVerifyGroupsRequest(requests=reqs), timeout=0.001)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert_still_healthy(format_server.endpoint, stub)


def test_garbage_bytes_on_the_port(format_server, stub):
    for payload in (b"\x00" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(range(256)) * 40):
        with socket.create_connection(("127.0.0.1", format_server.port), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(5)
            try:
                s.recv(4096)
            except (TimeoutError, ConnectionResetError):
                pass
    assert format_server.proc.poll() is None
    assert_still_healthy(format_server.endpoint, stub)


def test_a_batch_that_does_not_parse_is_invalid_argument(format_server, stub):
    """Well-formed gRPC, garbage protobuf: the server's interceptor answers INVALID_ARGUMENT (gRPC: UNKNOWN)."""
    with grpc.insecure_channel(format_server.endpoint) as ch:
        raw = ch.unary_unary("/grpo.verifier.v1.VerifierService/BatchVerifyGroups")  # bytes in, bytes out
        for payload in (b"\xff\xff\xff\xff", b"\x0a\x05ab"):  # a bad tag; a length running past the end
            with pytest.raises(grpc.RpcError) as err:
                raw(payload, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "does not parse" in err.value.details()
    assert_still_healthy(format_server.endpoint, stub)


def test_prometheus_metrics(format_server, stub):
    stub.VerifyGroup(group(group_id="m"), timeout=10)
    with pytest.raises(grpc.RpcError):
        stub.VerifyGroup(group(verifier="nope"), timeout=10)
    body = urllib.request.urlopen(f"http://127.0.0.1:{format_server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'cohort_verifier_requests_total{code="OK",method="VerifyGroup"}' in body
    assert 'cohort_verifier_requests_total{code="INVALID_ARGUMENT",method="VerifyGroup"}' in body
    assert 'cohort_verifier_rollouts_total{status="ok",verdict="correct",verifier="format"}' in body
    assert "cohort_verifier_request_seconds_bucket" in body
    assert "cohort_verifier_in_flight" in body and "cohort_verifier_queue_depth" in body


def test_queue_overflow_is_resource_exhausted(testplugin):
    """More concurrent groups than the queue admits: RESOURCE_EXHAUSTED, then the server recovers."""
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["sleepy"], extra_args=["--max-queued-groups", "4"]) as sp, grpc.insecure_channel(sp.endpoint) as ch:
        s = pb_grpc.VerifierServiceStub(ch)
        slow = [s.VerifyGroup.future(group("sleepy", ["ab"], group_id=str(i), options={"sleep_s": "1.0"}), timeout=20) for i in range(4)]
        time.sleep(0.3)
        with pytest.raises(grpc.RpcError) as err:
            s.VerifyGroup(group("sleepy", ["ab"], options={"sleep_s": "0"}), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queue full" in err.value.details()
        assert [f.result().results[0].reward for f in slow] == [0.0] * 4
        assert s.VerifyGroup(group("sleepy", ["abc"], options={"sleep_s": "0"}), timeout=10).results[0].reward == 1.0


def test_sigterm_drains(testplugin):
    """Health turns NOT_SERVING, new calls get UNAVAILABLE, the in-flight call completes."""
    from cohort.rpc.launch import ServiceProcess

    sp = ServiceProcess(["sleepy"]).start()
    try:
        with grpc.insecure_channel(sp.endpoint) as ch:
            s = pb_grpc.VerifierServiceStub(ch)
            in_flight = s.VerifyGroup.future(group("sleepy", ["abc", "ab"], options={"sleep_s": "1.5"}), timeout=20)
            time.sleep(0.3)
            assert health_status(sp.endpoint, "sleepy") == "SERVING"
            sp.terminate()
            time.sleep(0.3)
            assert health_status(sp.endpoint) == "NOT_SERVING"
            assert health_status(sp.endpoint, "sleepy") == "NOT_SERVING"
            with pytest.raises(grpc.RpcError) as err:
                s.VerifyGroup(group("sleepy", ["a"], options={"sleep_s": "0"}), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "draining" in err.value.details()
            resp = in_flight.result()
            assert [r.reward for r in resp.results] == [1.0, 0.0]
        assert sp.proc.wait(timeout=15) == 0
    finally:
        sp.stop()


@pytest.mark.parametrize("rollouts,message", [
    ([(0, "x" * 10), (1, "a"), (1, "b")], "duplicate rollout index 1"),  # a long completion is no request problem
    ([(0, "a"), (0, "b"), (1, "x" * 10)], "duplicate rollout index 0"),
    ([(3, "a"), (1, "b"), (3, "c"), (1, "d")], "duplicate rollout index 3"),
])
def test_validation_names_the_first_problem_in_rollout_order(rollouts, message):
    from cohort.verifiers.base import GroupRequest, InvalidRequest, Rollout
    from cohort.verifiers.format import FormatVerifier
    from cohort.verifiers.hosting.host import ServerLimits, VerifierHost
    from cohort.verifiers.hosting.server import ERRORS

    scorer = VerifierHost({"format": FormatVerifier()}, ServerLimits(max_completion_chars=5))
    try:
        with pytest.raises(InvalidRequest, match=message) as err:
            scorer.validate(GroupRequest("format", tuple(Rollout(i, c) for i, c in rollouts), group_id="g"))
        assert ERRORS[type(err.value)] is grpc.StatusCode.INVALID_ARGUMENT
        scorer.validate(GroupRequest("format", (Rollout(0, "fine"), Rollout(1, "ok")), group_id="g"))  # no error
    finally:
        scorer.close()
