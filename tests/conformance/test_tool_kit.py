"""The tool-server conformance kit against real servers: the sandbox's `python` tool and `calculator` pass;
a server that masks a call's own fault (an infrastructure status for malformed arguments) fails."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from cohort.conformance.tools import RULES, run_tool_kit
from cohort.rpc.launch import ServiceProcess


@pytest.mark.parametrize("name", ["calculator", "sandbox"])
def test_our_tool_servers_conform(name) -> None:
    with ServiceProcess([name]) as server:
        results = run_tool_kit(server.endpoint)
    assert [r.rule for r in results] == list(RULES)
    assert all(r.status == "pass" for r in results), [(r.rule, r.detail) for r in results if r.status != "pass"]


def test_a_server_that_masks_the_calls_fault_fails() -> None:
    from cohort.proto.grpo.tool.v1 import tool_service_pb2 as pb
    from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions
    from cohort.tools import server as tool_server
    from cohort.tools.base import ToolOutput, ToolSpec

    class Echo:
        spec = ToolSpec("echo", "echo", {"type": "object"})

        def run(self, arguments, session_id):
            return ToolOutput(str(arguments))

    class Masking(tool_server.ToolServicer):  # reports malformed arguments as an infrastructure failure
        def _one(self, *args):
            result = super()._one(*args)
            if result.error_kind == "bad_arguments":
                result.status, result.error_kind = pb.CALL_STATUS_INTERNAL, ""
            return result

    ready = threading.Event()
    box: dict = {}

    async def serve() -> None:
        runtime = GrpcRuntime(RuntimeOptions())
        tool_server.register(Masking([Echo()], "masking 0"), runtime)
        box["port"] = await runtime.start(service_names=[tool_server.SERVICE_NAME], health_names=[])
        box["stop"] = asyncio.Event()
        box["loop"] = asyncio.get_running_loop()
        ready.set()
        await box["stop"].wait()
        await runtime.server.stop(0)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        results = {r.rule: r for r in run_tool_kit(f"127.0.0.1:{box['port']}")}
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)
    assert results["bad_json_is_the_calls_fault"].status == "fail"
    assert "CALL_STATUS_INTERNAL" in results["bad_json_is_the_calls_fault"].detail
    assert results["list_tools"].status == "pass" and results["order_and_ids"].status == "pass"


def test_the_command_exits_2_for_an_unreachable_endpoint() -> None:
    proc = subprocess.run([sys.executable, "-m", "cohort.cli", "conformance-tools", "127.0.0.1:1", "--timeout", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unreachable" in proc.stderr
