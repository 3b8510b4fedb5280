"""Replicas of one tool server, over real gRPC on loopback: a batch's calls are spread over them by session,
and the calls of one session keep going to the same replica while it is up (a replica may hold per-rollout
state); when that replica is gone its sessions fail over to another."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions
from cohort.tools import server as tool_server
from cohort.tools.base import ToolOutput, ToolSpec
from cohort.tools.client import Call, ToolClient


class WhoAmI:
    """Answers with the name of the replica that ran it and the session it was given."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.spec = ToolSpec("whoami", "names the replica", {"type": "object", "properties": {}})

    def run(self, arguments, session_id: str) -> ToolOutput:
        return ToolOutput(f"{self.replica} {session_id}")


class Replica:
    """A ``grpo.tool.v1`` server (the real runtime: health, reflection) on 127.0.0.1 in this process, on an event
    loop of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server, port = self._run(self._start(name))
        self.endpoint = f"127.0.0.1:{port}"

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    async def _start(self, name: str):
        runtime = GrpcRuntime(RuntimeOptions())  # 127.0.0.1, a free port
        tool_server.add_to_server([WhoAmI(name)], "test", runtime)
        port = await runtime.start(service_names=[tool_server.SERVICE_NAME], health_names=[])
        return runtime.server, port

    def stop(self) -> None:
        if self.loop.is_running():
            self._run(self.server.stop(None))
            self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def replicas():
    started = [Replica("a"), Replica("b")]
    yield started
    for r in started:
        r.stop()


def whoami(session: str) -> Call:
    return Call("whoami", json.dumps({}), session_id=session)


def test_a_batch_is_spread_over_the_replicas_and_a_session_stays_on_its_own(replicas) -> None:
    client = ToolClient([[r.endpoint for r in replicas]], timeout_s=30)
    client.handshake()
    sessions = [str(i) for i in range(16)]
    first = client.execute([whoami(s) for s in sessions])
    second = client.execute([whoami(s) for s in reversed(sessions)])
    assert all(r.ok for r in first + second)
    placed = {r.output.split()[1]: r.output.split()[0] for r in first}
    assert set(placed) == set(sessions) and set(placed.values()) == {"a", "b"}  # both replicas got calls
    assert {r.output.split()[1]: r.output.split()[0] for r in second} == placed  # every session where it was
    client.close()


def test_the_sessions_of_a_replica_that_is_gone_fail_over_to_another(replicas) -> None:
    client = ToolClient([[r.endpoint for r in replicas]], timeout_s=30)
    client.handshake()
    sessions = [str(i) for i in range(16)]
    placed = {r.output.split()[1]: r.output.split()[0] for r in client.execute([whoami(s) for s in sessions])}
    replicas[1].stop()
    results = client.execute([whoami(s) for s in sessions])
    assert all(r.ok for r in results), [r.detail for r in results if not r.ok]
    assert {r.output.split()[0] for r in results} == {"a"} and any(v == "b" for v in placed.values())
    client.close()
