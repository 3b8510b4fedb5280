"""SERVING means ready (issue 49): a server whose verifier still loads something slow reports NOT_SERVING
until a call can be answered. In-process on loopback: the real runtime and health service, a verifier whose
``ready()`` turns true later; and through ``cohort serve math``, whose SERVING comes after a worker of its pool
has answered a first check, so the first call after SERVING is answered at once."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cohort.rpc.launch import ServiceProcess
from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions
from cohort.verifiers.hosting.server import watch_ready


class Loading:
    """A verifier stand-in that says whether it is ready (all the watcher reads)."""

    def __init__(self) -> None:
        self.loaded = False

    def ready(self) -> bool:
        return self.loaded


def test_health_is_not_serving_until_every_verifier_is_ready():
    async def main():
        runtime = GrpcRuntime(RuntimeOptions(port=0))
        slow = Loading()
        await runtime.start(service_names=[], health_names=["slow"], serving=slow.ready())
        watcher = asyncio.ensure_future(watch_ready(runtime, [slow], every_s=0.01))
        seen = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{runtime.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            async def status(name):
                return (await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)).status

            seen.append((await status(""), await status("slow")))
            await asyncio.sleep(0.1)
            seen.append((await status(""), await status("slow")))
            slow.loaded = True
            await asyncio.wait_for(watcher, 5)
            seen.append((await status(""), await status("slow")))
        await runtime.server.stop(None)
        return seen

    not_serving, serving = health_pb2.HealthCheckResponse.NOT_SERVING, health_pb2.HealthCheckResponse.SERVING
    assert asyncio.run(main()) == [(not_serving,) * 2, (not_serving,) * 2, (serving,) * 2]


@pytest.mark.slow
def test_math_is_serving_only_once_a_check_is_answered():
    with ServiceProcess(["math"], env={"COHORT_MATH_WORKERS": "1"}) as proc, grpc.insecure_channel(proc.endpoint) as ch:
        # ServiceProcess returned at SERVING: the pool's worker has answered its warm-up check already
        req = pb.VerifyGroupRequest(group_id="g", verifier="math", reference=pb.Reference(answer="\\frac{1}{2}"),
                                    rollouts=[pb.Rollout(index=0, completion="\\boxed{0.5}"),
                                              pb.Rollout(index=1, completion="\\boxed{\\sin(x)^2 + \\cos(x)^2}")])
        started = time.monotonic()
        resp = pb_grpc.VerifierServiceStub(ch).VerifyGroup(req, timeout=30)
        took = time.monotonic() - started
    assert [r.status for r in resp.results] == [pb.ROLLOUT_STATUS_OK] * 2 and resp.results[0].reward == 1.0
    assert took < 10, took  # no worker start-up in the first call
