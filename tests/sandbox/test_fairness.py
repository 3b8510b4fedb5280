"""A fair sandbox pool: one tenant whose programs all burn CPU, fork busy children, fill memory or sleep to
their deadline does not push another tenant's simple programs past their deadline or change their
verdicts, in process (``bench/sandbox_fairness.py``) and through ``cohort serve sandbox`` (the
``cohort-tenant`` call metadata); and each slot is its own CPU cgroup where the machine allows it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess
from cohort.sandbox import cgroup, policy
from cohort.sandbox.executor import Slot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sandbox_fairness  # noqa: E402

DEADLINE_S = 2.0


def test_simple_programs_keep_verdicts_and_deadline_next_to_a_hostile_tenant() -> None:
    report = sandbox_fairness.fairness(runs=8, pool_size=4, deadline_s=DEADLINE_S, labels=("neighbour_with",),
                                       budget_s=30)
    r = report["neighbour_with"]
    assert r["hostile_runs"] > 0 and not r["hostile_stopped_by_budget"]  # the neighbour was there throughout
    assert r["verdicts_differ"] == 0, r
    assert r["deadline_misses"] == 0 and r["max_s"] < DEADLINE_S, r


def test_server_caps_a_tenant_at_half_the_pool() -> None:
    """8 sleepers of one tenant on a 4-slot server: another tenant's print(1) is answered at once, not after them."""
    env = {"COHORT_SANDBOX_POOL_SIZE": "4"}
    with ServiceProcess(["sandbox"], extra_args=["--log-level", "WARNING"], env=env) as svc:
        with grpc.insecure_channel(svc.endpoint) as channel:
            stub = pb_grpc.SandboxServiceStub(channel)
            sleeper = pb.ExecuteCodeRequest(language="python", code="import time\ntime.sleep(60)\n")
            sleeper.limits.wall_time.FromSeconds(4)
            futures = [stub.ExecuteCode.future(sleeper, timeout=60, metadata=[("cohort-tenant", "hostile")])
                       for _ in range(8)]
            time.sleep(1.0)  # the sleepers hold every slot they may
            started = time.monotonic()
            r = stub.ExecuteCode(pb.ExecuteCodeRequest(language="python", code="print(1)\n"), timeout=10,
                                 metadata=[("cohort-tenant", "simple")])
            took = time.monotonic() - started
            assert r.stdout == b"1\n" and r.status == pb.EXECUTION_STATUS_EXITED
            assert took < 1.5, took  # not queued behind a 4 s sleeper
            for f in futures:
                assert f.result().status == pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED


def test_slot_is_its_own_cpu_cgroup_with_a_quota() -> None:
    version = cgroup.cpu_controls(1.0)
    if version is None:
        pytest.skip("this machine does not let the service create CPU cgroups")
    slot = Slot(policy.SandboxConfig(slot_cpu_quota=0.5))
    try:
        cpu_dirs = [d for d in slot.cgroup.dirs if (d / ("cpu.shares" if version == "v1" else "cpu.weight")).exists()]
        assert len(cpu_dirs) == 1
        d = cpu_dirs[0]
        if version == "v1":
            assert (d / "cpu.cfs_quota_us").read_text().strip() == "50000"
        else:
            assert (d / "cpu.max").read_text().split()[0] == "50000"
        assert (d / "cgroup.procs").read_text().split()  # the fork server runs inside it from the start
        assert slot.run({"mode": "exec", "code": "print(1)"}, policy.Limits()).stdout == b"1\n"
    finally:
        slot.kill()
    assert not d.exists()  # removed with the slot
