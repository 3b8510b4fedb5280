"""Each group is its own sandbox tenant, end to end: the code verifier names the group in ``cohort-tenant``,
the sandbox server caps one tenant at half of each slot pool and gates its RPC threads. Real
``cohort serve sandbox`` processes on loopback, real programs."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.code import CodeVerifier, GrpcBackend
from cohort.verifiers.code.verifier import group_tenant

ADD = CodeTests("asserts", asserts=("assert add(1, 2) == 3", "assert add(2, 2) == 4"))
SIMPLE = ("```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return 0\n```")
SLEEPER = "```python\nimport time\ntime.sleep(60)\n```"
HOSTILE_BUDGET_S = "3"


def group(gid: str, completions, per_test_s: str = "5") -> GroupRequest:
    return GroupRequest("code", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(code_tests=ADD),
                        group_id=gid, options={"per_test_timeout_s": per_test_s})


def test_group_tenants_are_distinct_and_metadata_safe():
    a, b = group_tenant(group("g0", SIMPLE)), group_tenant(group("g0", SIMPLE))
    assert a != b and a.startswith("group:g0#") and b.startswith("group:g0#")  # two callers' "g0" are two tenants
    odd = group_tenant(group("step 1/é\n", SIMPLE))
    assert odd.isascii() and " " not in odd and "\n" not in odd


def test_a_hostile_group_does_not_delay_or_change_another_groups_verdicts():
    """8 programs that sleep to their deadline, on a 4-slot sandbox: the other group's two programs keep
    their verdicts and are graded about as fast as alone (without tenants they would wait for the sleepers)."""
    with ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"], env={"COHORT_SANDBOX_POOL_SIZE": "4"}) as sb:
        verifier = CodeVerifier(backend=GrpcBackend(sb.endpoint, tls=None), max_parallel=16)

        def graded(g: GroupRequest) -> tuple[list, float]:
            t0 = time.monotonic()
            results = verifier.verify_group(g, VerifyContext())
            return [(r.status, r.verdict, r.reward) for r in results], time.monotonic() - t0

        alone, took_alone = graded(group("simple-alone", SIMPLE))
        assert alone == [(RolloutStatus.OK, Verdict.CORRECT, 1.0), (RolloutStatus.OK, Verdict.INCORRECT, 0.0)]

        hostile: dict = {}
        hostile_group = group("hostile", [SLEEPER] * 8, HOSTILE_BUDGET_S)
        neighbour = threading.Thread(target=lambda: hostile.update(out=graded(hostile_group)))
        neighbour.start()
        time.sleep(1.0)  # the sleepers hold every slot their tenant may
        beside, took_beside = graded(group("simple", SIMPLE))
        neighbour.join(60)
        assert beside == alone
        assert took_beside < took_alone + 1.5, (took_beside, took_alone)  # not queued behind a 3 s sleeper
        results, took_hostile = hostile["out"]
        assert all(r[:2] == (RolloutStatus.OK, Verdict.RESOURCE_LIMIT_EXCEEDED) for r in results), results
        assert took_hostile > 2 * float(HOSTILE_BUDGET_S)  # capped at 2 of the 4 slots: the 8 ran in >= 2 waves


def test_one_tenant_holds_a_bounded_share_of_the_rpc_threads():
    """With one thread per tenant: a tenant's calls run one at a time (the rest wait without holding a
    thread), calls past the queue are refused at once with RESOURCE_EXHAUSTED, and another tenant's
    print(1) is answered at once."""
    env = {"COHORT_SANDBOX_POOL_SIZE": "4", "COHORT_SANDBOX_MAX_CALLS_PER_TENANT": "1"}
    with ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"], env=env) as sb:
        with grpc.insecure_channel(sb.endpoint) as channel:
            stub = pb_grpc.SandboxServiceStub(channel)
            sleeper = pb.ExecuteCodeRequest(language="python", code="import time\ntime.sleep(60)\n")
            sleeper.limits.wall_time.FromSeconds(1)
            started = time.monotonic()
            calls = [stub.ExecuteCode.future(sleeper, timeout=60, metadata=[("cohort-tenant", "hostile")])
                     for _ in range(6)]  # 1 running + 4 waiting are admitted; the sixth is refused
            time.sleep(0.5)
            t0 = time.monotonic()
            r = stub.ExecuteCode(pb.ExecuteCodeRequest(language="python", code="print(1)\n"), timeout=10,
                                 metadata=[("cohort-tenant", "simple")])
            took = time.monotonic() - t0
            assert (r.status, r.stdout) == (pb.EXECUTION_STATUS_EXITED, b"1\n") and took < 1.0, took
            refused, done = [], []
            for f in calls:
                try:
                    done.append((f.result().status, time.monotonic() - started))
                except grpc.RpcError as exc:
                    refused.append((exc.code(), exc.details()))
            assert len(refused) == 1 and refused[0][0] is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
            assert "running or queued" in refused[0][1]
            assert [s for s, _ in done] == [pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED] * 5
            assert max(t for _, t in done) > 4.5  # five 1 s programs, one at a time


@pytest.mark.parametrize("tenant", ["", "group:g#1"])
def test_the_local_backend_counts_slots_against_the_tenant(tenant):
    """In-process backend: the same tenant cap (half of a 2-slot pool = 1) applies when a tenant is named."""
    from cohort.sandbox import policy
    from cohort.sandbox.pool import Sandbox, SandboxOptions
    from cohort.verifiers.code import LocalBackend

    with Sandbox(SandboxOptions(pool_size=2)) as sandbox:
        backend = LocalBackend(sandbox=sandbox)
        limits = policy.Limits(wall_s=2.0, cpu_s=2.0, memory_bytes=0, output_bytes=0, max_processes=0, disk_bytes=0)
        t0 = time.monotonic()
        threads = [threading.Thread(target=backend.execute, args=("import time\ntime.sleep(5)\n", b"", limits),
                                    kwargs={"tenant": tenant}) for _ in range(2)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        took = time.monotonic() - t0
    if tenant:
        assert took > 3.9, took  # one slot at a time: two 2 s programs in a row
    else:
        assert took < 3.5, took  # both slots at once


def test_the_sandbox_client_fails_over_from_a_frozen_replica_within_one_attempt():
    """The same policy as the verifier client: a SIGSTOPped sandbox replica costs one attempt (the call's
    budget: the program's wall limit plus the margin, here shortened to 2 s), then the healthy one answers."""
    import os
    import signal

    from cohort.sandbox import policy

    env = {"COHORT_SANDBOX_POOL_SIZE": "2"}
    with ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"], env=env) as healthy:
        frozen = ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"], env=env).start()
        try:
            backend = GrpcBackend([frozen.endpoint, healthy.endpoint], tls=None)
            backend.MARGIN_S = 2.0
            limits = policy.Limits(wall_s=1.0, cpu_s=1.0, memory_bytes=0, output_bytes=0, max_processes=0, disk_bytes=0)
            assert backend.execute("print(1)", b"", limits).stdout == b"1\n"  # both channels connected
            assert backend.execute("print(2)", b"", limits).stdout == b"2\n"
            os.killpg(frozen.proc.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            first = backend.execute("print(3)", b"", limits, tenant="group:g#1")  # the rotation starts at the frozen one
            took_first = time.monotonic() - t0
            t1 = time.monotonic()
            second = [backend.execute(f"print({k})", b"", limits, tenant="group:g#1") for k in (4, 5)]  # 5: rotation at the frozen one again
            took_second = time.monotonic() - t1
        finally:
            os.killpg(frozen.proc.pid, signal.SIGCONT)
            frozen.kill()
            frozen.stop()
    assert [first.stdout, *(r.stdout for r in second)] == [b"3\n", b"4\n", b"5\n"]
    assert 2.5 < took_first < 6.0, took_first  # one attempt of 3 s (1 s wall + 2 s margin), then the healthy replica
    assert took_second < 3.0, took_second  # the frozen replica went to the back of the rotation
