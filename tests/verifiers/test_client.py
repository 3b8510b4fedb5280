"""The async client against real servers: failover, retries, outages as DEPENDENCY_UNAVAILABLE, weights."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.launch import ServiceProcess
from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus
from cohort.verifiers.client import HandshakeError, VerifierClient, VerifierRequestError, WeightedVerifier
from cohort.verifiers.records import Record, Task

GOOD = "<think>t</think><answer>4</answer>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failover_when_a_replica_dies_mid_batch(testplugin):
    """Two replicas; the one holding the batch is killed mid-call; every result arrives, matched, none zeroed."""
    a = ServiceProcess(["sleepy"]).start()
    b = ServiceProcess(["sleepy"]).start()
    try:
        groups = [
            GroupRequest("sleepy", tuple(Rollout(i, "x" * (g + i)) for i in range(8)), group_id=f"g{g}", options={"sleep_s": "0.4"})
            for g in range(32)
        ]

        async def run():
            async with VerifierClient({"sleepy": [a.endpoint, b.endpoint]}, timeout_s=30) as client:
                await client.handshake()
                task = asyncio.ensure_future(client.verify_groups(groups))  # first call goes to `a`
                await asyncio.sleep(0.3)
                a.kill()
                return await task, client.stats

        results, stats = asyncio.run(run())
        assert a.proc.poll() is not None, "replica a should be dead"
        assert stats["retries"] >= 1 and stats["failed_groups"] == 0
        assert [r.group_id for r in results] == [g.group_id for g in groups]
        for g, res in zip(groups, results):
            assert [r.index for r in res.results] == list(range(8))
            assert all(r.status is RolloutStatus.OK for r in res.results)
            assert [r.reward for r in res.results] == [float((len(ro.completion)) % 2) for ro in g.rollouts]
    finally:
        a.stop()
        b.stop()


def test_everything_down_is_dependency_unavailable_not_zero():
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]

    async def run():
        async with VerifierClient([WeightedVerifier("format", 1.0, dead)], timeout_s=3, retries=3, backoff_s=0.01) as client:
            with pytest.raises(HandshakeError, match="no endpoint serves verifier 'format'"):
                await client.handshake()
            return await client.score([Record(Task("g", ""), (Rollout(0, GOOD), Rollout(1, "x")))])

    t0 = time.monotonic()
    (scored,) = asyncio.run(run())
    assert time.monotonic() - t0 < 10
    assert [s.status for s in scored] == [RolloutStatus.DEPENDENCY_UNAVAILABLE] * 2
    assert not any(s.usable for s in scored)
    assert "unavailable after 4 attempt(s)" in scored[0].detail


def test_weighted_combination_and_partial_outage(format_server, testplugin):
    """format (weight 0.25) + exact (weight 1.0); then the exact server dies: those rollouts become unusable."""
    with ServiceProcess(["exact"]) as exact:
        verifiers = [WeightedVerifier("format", 0.25, (format_server.endpoint,)),
                     WeightedVerifier("exact", 1.0, (exact.endpoint,), options={})]
        req = Record(Task("q", "", Reference(answer="4")), (Rollout(0, "4"), Rollout(1, GOOD), Rollout(2, "5")))

        async def run(client):
            return await client.score([req])

        async def both():
            async with VerifierClient(verifiers, timeout_s=5, retries=1, backoff_s=0.01) as client:
                assert await client.handshake() == {"format": "1.0.0", "exact": "0.0.1"}
                first = await run(client)
                exact.kill()
                second = await run(client)
                return first, second

        (first,), (second,) = asyncio.run(both())
    assert [s.reward for s in first] == [1.0, 0.25, 0.0]
    assert first[1].components["format"] == 1.0 and first[1].components["exact"] == 0.0
    assert first[1].components["format/think"] == 1.0
    assert all(s.usable for s in first)
    assert [s.status for s in second] == [RolloutStatus.DEPENDENCY_UNAVAILABLE] * 3


def test_invalid_argument_raises(format_server):
    async def run():
        async with VerifierClient({"format": [format_server.endpoint]}) as client:
            await client.verify_groups([GroupRequest("format", (Rollout(0, "a"), Rollout(0, "b")))])

    with pytest.raises(VerifierRequestError, match="duplicate rollout index 0"):
        asyncio.run(run())


class _Liar(pb_grpc.VerifierServiceServicer):
    """A wrong server: answers with shuffled, missing or foreign results."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def BatchVerifyGroups(self, request, context):
        out = []
        for req in request.requests:
            results = [pb.RolloutResult(index=r.index, status=pb.ROLLOUT_STATUS_OK, verdict=pb.VERDICT_CORRECT, reward=1.0)
                       for r in req.rollouts]
            if self.mode == "reversed":
                results.reverse()
            elif self.mode == "missing":
                results = results[:-1]
            elif self.mode == "foreign":
                results[0].index = 999
            out.append(pb.VerifyGroupResponse(group_id=req.group_id, verifier=req.verifier, results=results))
        if self.mode == "fewer_groups":
            out = out[:-1]
        return pb.BatchVerifyGroupsResponse(responses=out)


@pytest.mark.parametrize("mode,usable", [
    ("reversed", True), ("missing", False), ("foreign", False), ("fewer_groups", False),
])
def test_results_are_checked_against_the_request(mode, usable):
    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_VerifierServiceServicer_to_server(_Liar(mode), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        groups = [GroupRequest("liar", tuple(Rollout(i, "c") for i in (4, 2, 9)), group_id=f"g{k}") for k in range(2)]

        async def run():
            async with VerifierClient({"liar": [f"127.0.0.1:{port}"]}) as client:
                return await client.verify_groups(groups)

        results = asyncio.run(run())
        for res in results:
            assert [r.index for r in res.results] == [4, 2, 9]
            assert all(r.usable == usable for r in res.results)
            if not usable:
                assert all(r.status is RolloutStatus.VERIFIER_ERROR for r in res.results)
    finally:
        server.stop(0)


def test_deadline_bounds_a_hung_server():
    """A server that accepts and never answers: the client gives up at its deadline, marks rollouts unusable."""
    hang = threading.Event()

    class Hang(pb_grpc.VerifierServiceServicer):
        def BatchVerifyGroups(self, request, context):
            hang.wait(10)
            return pb.BatchVerifyGroupsResponse()

    server = grpc.server(futures.ThreadPoolExecutor(4))
    pb_grpc.add_VerifierServiceServicer_to_server(Hang(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        async def run():
            async with VerifierClient({"h": [f"127.0.0.1:{port}"]}, timeout_s=0.5, retries=2) as client:
                return await client.verify_groups([GroupRequest("h", (Rollout(0, "x"),))])

        t0 = time.monotonic()
        (res,) = asyncio.run(run())
        assert time.monotonic() - t0 < 2.0
        assert res.results[0].status is RolloutStatus.DEPENDENCY_UNAVAILABLE
    finally:
        hang.set()
        server.stop(0)


def test_a_frozen_replica_costs_one_attempt_not_the_deadline(format_server):
    """A replica SIGSTOPped after the handshake accepts the call and never answers: the attempt times out
    at its own share of the deadline and the call fails over to the healthy replica in time; the next
    call starts at the healthy one (the frozen one went to the back of the rotation)."""
    import os
    import signal

    frozen = ServiceProcess(["format"]).start()
    groups = [GroupRequest("format", (Rollout(0, GOOD), Rollout(1, "x")), group_id="g")]

    async def run():
        async with VerifierClient({"format": [frozen.endpoint, format_server.endpoint]}, timeout_s=6, retries=3) as client:
            await client.handshake()
            os.killpg(frozen.proc.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            first = await client.verify_groups(groups)  # the first call of the rotation goes to the frozen one
            t1 = time.monotonic()
            second = await client.verify_groups(groups)
            return first, second, t1 - t0, time.monotonic() - t1, dict(client.stats)

    try:
        first, second, took_first, took_second, stats = asyncio.run(run())
    finally:
        os.killpg(frozen.proc.pid, signal.SIGCONT)
        frozen.kill()
        frozen.stop()
    for (res,) in (first, second):
        assert [(r.status, r.reward) for r in res.results] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
    assert 2.5 < took_first < 5.0, took_first  # one attempt's share (3 s of 6), then the healthy replica
    assert took_second < 1.0, took_second  # straight to the healthy replica
    assert stats["retries"] == 1 and stats["failed_groups"] == 0
