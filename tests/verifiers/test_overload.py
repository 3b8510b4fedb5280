"""Overload is shed: past ``--max-queued-groups`` a server answers RESOURCE_EXHAUSTED at once; the
client backs off, and every rollout ends with a verdict or a masked DEPENDENCY_UNAVAILABLE, never a
0 for an infrastructure reason. A real server (the test plugin's ``sleepy`` verifier) on loopback."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import GroupRequest, Rollout, RolloutStatus
from cohort.verifiers.client import VerifierClient, WeightedVerifier
from cohort.verifiers.records import Record, Task

QUEUE = 4


@pytest.fixture(scope="module")
def sleepy(testplugin):
    with ServiceProcess(["sleepy"], extra_args=["--max-queued-groups", str(QUEUE), "--log-level", "WARNING"]) as sp:
        yield sp


def fill_queue(endpoint: str, sleep_s: float) -> tuple[grpc.Channel, list[grpc.Future]]:
    """QUEUE groups that each hold their place for ``sleep_s``; returns once they are admitted."""
    ch = grpc.insecure_channel(endpoint)
    stub = pb_grpc.VerifierServiceStub(ch)
    req = lambda i: pb.VerifyGroupRequest(verifier="sleepy", group_id=f"hold{i}", options={"sleep_s": str(sleep_s)},  # noqa: E731
                                          rollouts=[pb.Rollout(index=0, completion="ab")])
    futures = [stub.VerifyGroup.future(req(i), timeout=30) for i in range(QUEUE)]
    time.sleep(0.3)
    return ch, futures


def one_group(gid: str) -> GroupRequest:
    return GroupRequest("sleepy", (Rollout(0, "abc"), Rollout(1, "ab")), group_id=gid, options={"sleep_s": "0"})


def test_full_queue_is_refused_at_once(sleepy):
    ch, held = fill_queue(sleepy.endpoint, 1.5)
    with ch:
        stub = pb_grpc.VerifierServiceStub(ch)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.VerifyGroup(pb.VerifyGroupRequest(verifier="sleepy", rollouts=[pb.Rollout(index=0, completion="a")]), timeout=10)
        refused_in = time.monotonic() - started
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "queue full" in err.value.details()
        assert refused_in < 0.5, f"refusal took {refused_in:.2f}s: it waited instead of shedding"
        assert [f.result().results[0].reward for f in held] == [0.0] * QUEUE  # admitted work still finishes


def test_client_backs_off_and_gets_the_verdict_once_the_queue_drains(sleepy):
    ch, held = fill_queue(sleepy.endpoint, 1.0)

    async def run():
        async with VerifierClient([WeightedVerifier("sleepy", 1.0, (sleepy.endpoint,))], timeout_s=20, retries=8,
                                  backoff_s=0.1) as client:
            started = time.monotonic()
            results = await client.verify_groups([one_group("late")])
            return results, client.stats, time.monotonic() - started

    with ch:
        [result], stats, took = asyncio.run(run())
        [f.result() for f in held]
    assert stats["retries"] >= 1  # it was refused at least once ...
    assert [(r.status, r.reward) for r in result.results] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]  # ... then judged
    assert took >= 0.5  # it waited for the queue (backoff), rather than giving up


def test_overload_that_outlasts_the_retries_is_masked_never_zero(sleepy):
    ch, held = fill_queue(sleepy.endpoint, 3.0)

    async def run():
        verifiers = [WeightedVerifier("sleepy", 1.0, (sleepy.endpoint,))]
        async with VerifierClient(verifiers, timeout_s=2, retries=3, backoff_s=0.05) as client:
            return await client.score([Record(Task("busy", ""), (Rollout(0, "abc"), Rollout(1, "ab")))]), client.stats

    with ch:
        [scored], stats = asyncio.run(run())
        [f.result() for f in held]
    assert stats["calls"] == 4 and stats["failed_groups"] == 1
    assert {s.status for s in scored} == {RolloutStatus.DEPENDENCY_UNAVAILABLE}
    assert not any(s.usable for s in scored)  # masked out of the group statistics by the learner
    assert all("RESOURCE_EXHAUSTED" in s.detail for s in scored)
