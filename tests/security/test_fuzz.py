"""Malformed bytes: random and mutated protobuf payloads to every method of every service.

Real servers on loopback (``cohort serve format math arith`` and ``cohort serve sandbox``), raw
bytes on the wire (``channel.unary_unary`` etc. without serializers, so nothing is checked on the
client side), a fixed seed and a bounded number of calls. Every call must end with a status code:
the reply, or a gRPC error other than UNKNOWN (a handler that raised something it did not map). A
unary request that does not parse is INVALID_ARGUMENT (``cohort.rpc.status.StatusInterceptor``);
only the streaming reflection request is left to gRPC, whose parse failure is UNKNOWN. Afterwards the
server is alive, SERVING, and still gives the right answer.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as sb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb

from cohort.rpc.launch import ServiceProcess, health_status

SEED = 20260101
CALLS_PER_METHOD = 96  # a third random bytes, a third mutations, a third mutations that still parse
IN_FLIGHT = 8
DEADLINE_S = 2.0
BUDGET_S = 25.0  # a ceiling per server; the calls normally take a few seconds


def _math_group() -> pb.VerifyGroupRequest:
    req = pb.VerifyGroupRequest(verifier="math", group_id="g", reference=pb.Reference(answer="4"))
    req.rollouts.add(index=0, completion="<answer>4</answer>")
    req.rollouts.add(index=1, completion="\\boxed{5}")
    return req


def _sandbox_limits() -> sb.Limits:
    return sb.Limits(wall_time=Duration(seconds=1), cpu_time=Duration(seconds=1))


VERIFIER_SEEDS = {
    "/grpo.verifier.v1.VerifierService/BatchVerifyGroups": pb.BatchVerifyGroupsRequest(
        requests=[_math_group(), pb.VerifyGroupRequest(verifier="format", group_id="f", rollouts=[pb.Rollout(index=3, completion="x")])]),
    "/grpo.verifier.v1.VerifierService/VerifyGroup": _math_group(),
    "/grpo.verifier.v1.VerifierService/ListVerifiers": pb.ListVerifiersRequest(),
}
SANDBOX_SEEDS = {
    "/grpo.sandbox.v1.SandboxService/ExecuteCode": sb.ExecuteCodeRequest(language="python", code="print(1)", limits=_sandbox_limits()),
    "/grpo.sandbox.v1.SandboxService/RunTests": sb.RunTestsRequest(
        language="python", code="def f(x):\n    return x", asserts=sb.AssertTests(asserts=["assert f(1) == 1"]),
        limits=_sandbox_limits()),
}
COMMON_SEEDS = {
    "/grpc.health.v1.Health/Check": health_pb2.HealthCheckRequest(service="math"),
    "/grpc.health.v1.Health/Watch": health_pb2.HealthCheckRequest(service=""),
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": reflection_pb2.ServerReflectionRequest(list_services=""),
}
STREAMING_REPLY = {"/grpc.health.v1.Health/Watch"}
BIDI = {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}



def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four edits: flip bits, overwrite, insert, delete, truncate, duplicate a slice, or a varint bomb."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 2:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:
            del buf[pos:pos + rng.randint(1, 8)]
        elif op == 4:
            del buf[rng.randrange(len(buf) + 1):]
        elif op == 5 and buf:
            end = min(len(buf), pos + rng.randint(1, 32))
            buf[pos:pos] = buf[pos:end] * rng.randint(2, 20)
        else:  # a length-delimited field claiming a huge length, or ten 0xff varint bytes
            buf[pos:pos] = rng.choice([b"\x0a\xff\xff\xff\xff\x0f", b"\xff" * 10, b"\x12\x80\x80\x80\x80\x80\x01"])
    return bytes(buf)


def _parses(message_type, data: bytes) -> bool:
    try:
        message_type.FromString(data)
    except Exception:
        return False
    return True


def payloads(seed_message, rng: random.Random) -> list[bytes]:
    """Random bytes, mutations of the valid request, and mutations that still parse (they reach the handler)."""
    valid = seed_message.SerializeToString()
    third = CALLS_PER_METHOD // 3
    out = [b"", b"\x00", b"\xff" * 64]
    out += [rng.randbytes(rng.choice([1, 2, 5, 17, 64, 300, 2000])) for _ in range(third)]
    out += [mutate(valid, rng) for _ in range(third)]
    parsing = []
    for _ in range(50 * third):
        if len(parsing) == third:
            break
        candidate = mutate(valid, rng)
        if candidate != valid and _parses(type(seed_message), candidate):
            parsing.append(candidate)
    return out + parsing


def _send(ch: grpc.Channel, method: str, payload: bytes) -> tuple[grpc.StatusCode, str]:
    """Send raw bytes; the status the call ended with, and its message."""
    try:
        if method in STREAMING_REPLY:
            for _ in ch.unary_stream(method)(payload, timeout=0.3):
                pass
        elif method in BIDI:
            for _ in ch.stream_stream(method)(iter([payload]), timeout=DEADLINE_S):
                pass
        else:
            ch.unary_unary(method)(payload, timeout=DEADLINE_S)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def fuzz(endpoint: str, seeds: dict[str, object]) -> dict[str, list[tuple[grpc.StatusCode, str]]]:
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(SEED)
    started = time.monotonic()
    codes: dict[str, list[tuple[grpc.StatusCode, str]]] = {}
    with grpc.insecure_channel(endpoint) as ch, ThreadPoolExecutor(IN_FLIGHT) as pool:
        for method, seed in seeds.items():
            batch = payloads(seed, rng)
            codes[method] = list(pool.map(lambda p, m=method: _send(ch, m, p), batch))
            assert time.monotonic() - started < BUDGET_S, f"fuzzing took over {BUDGET_S}s (at {method})"
    return codes


def check_codes(codes: dict[str, list[tuple[grpc.StatusCode, str]]]) -> dict[str, Counter]:
    """Per method, how many calls ended with each code; fails on UNKNOWN that gRPC's parser did not give."""
    for method, outcomes in codes.items():
        assert len(outcomes) >= 2 * (CALLS_PER_METHOD // 3), method  # parsing mutants may run short
        unknown = [d for c, d in outcomes if c is grpc.StatusCode.UNKNOWN]
        if method in BIDI:
            unknown = [d for d in unknown if "DecodeError" not in d and "Error parsing" not in d]
        assert not unknown, f"{method}: a handler raised on malformed input: {unknown[:3]}"
        unparsed = [c for c, d in outcomes if "does not parse" in d]
        assert all(c is grpc.StatusCode.INVALID_ARGUMENT for c in unparsed), method
    return {m: Counter(c for c, _ in outcomes) for m, outcomes in codes.items()}


def test_verifier_server_survives_malformed_bytes():
    with ServiceProcess(["format", "math", "arith"], extra_args=["--log-level", "ERROR"]) as server:
        codes = check_codes(fuzz(server.endpoint, {**VERIFIER_SEEDS, **COMMON_SEEDS}))
        # the requests that parse but are wrong are refused as INVALID_ARGUMENT by our own checks
        for method in VERIFIER_SEEDS:  # refused as malformed, and (mutants that parse) scored
            assert codes[method][grpc.StatusCode.INVALID_ARGUMENT] > 0 and codes[method][grpc.StatusCode.OK] > 0, codes[method]
        assert server.proc.poll() is None
        for name in ("", "format", "math", "arith"):
            assert health_status(server.endpoint, name) == "SERVING"
        with grpc.insecure_channel(server.endpoint) as ch:
            reply = ch.unary_unary("/grpo.verifier.v1.VerifierService/VerifyGroup", response_deserializer=pb.VerifyGroupResponse.FromString)(
                _math_group().SerializeToString(), timeout=30)
        assert [pb.Verdict.Name(r.verdict) for r in reply.results] == ["VERDICT_CORRECT", "VERDICT_INCORRECT"]


def test_sandbox_server_survives_malformed_bytes():
    with ServiceProcess(["sandbox"], extra_args=["--log-level", "ERROR"], env={"COHORT_SANDBOX_POOL_SIZE": "2"}) as server:
        codes = check_codes(fuzz(server.endpoint, {**SANDBOX_SEEDS, **COMMON_SEEDS}))
        for method in SANDBOX_SEEDS:  # random bytes rarely parse: most calls are refused as malformed
            assert codes[method][grpc.StatusCode.INVALID_ARGUMENT] >= CALLS_PER_METHOD // 3, codes[method]
            assert codes[method][grpc.StatusCode.OK] > 0, codes[method]  # mutants that parse were run
        assert server.proc.poll() is None
        assert health_status(server.endpoint) == "SERVING"
        with grpc.insecure_channel(server.endpoint) as ch:
            reply = ch.unary_unary("/grpo.sandbox.v1.SandboxService/ExecuteCode", response_deserializer=sb.ExecuteCodeResponse.FromString)(
                SANDBOX_SEEDS["/grpo.sandbox.v1.SandboxService/ExecuteCode"].SerializeToString(), timeout=30)
        assert reply.stdout == b"1\n"


@pytest.mark.parametrize("n", [200])
def test_mutations_are_reproducible_and_varied(n):
    """The fuzzer itself: a fixed seed gives the same payloads, and they differ from the valid request."""
    seed = VERIFIER_SEEDS["/grpo.verifier.v1.VerifierService/BatchVerifyGroups"]
    a = [mutate(seed.SerializeToString(), random.Random(SEED + i)) for i in range(n)]
    b = [mutate(seed.SerializeToString(), random.Random(SEED + i)) for i in range(n)]
    assert a == b
    assert len(set(a)) > n * 0.9 and seed.SerializeToString() not in a
