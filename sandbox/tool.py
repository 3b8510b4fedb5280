"""The ``python`` tool (``grpo.tool.v1``), served by the sandbox service with the sandbox's isolation.

Each call runs the model's code as a fresh program in a sandbox slot (no state is kept between calls:
a rollout that needs an earlier value computes it again), under :data:`LIMITS`, as the tenant
``tools``: all tool calls together hold at most half of the candidate slots, so the code verifier
keeps the rest. The result is what the model reads next: its stdout, plus the end of stderr when the
program failed. A program that raises, loops or exhausts its limits is the call's own failure (an OK
result with ``error_kind``); a sandbox that cannot run it is :class:`~cohort.tools.base.ToolUnavailable`
(the rollout is masked).
"""

from __future__ import annotations

from typing import Any

from cohort import __version__
from cohort.sandbox.executor import ExecStatus, SandboxError
from cohort.sandbox.policy import Limits
from cohort.sandbox.pool import Sandbox, as_tenant
from cohort.tools.base import ToolOutput, ToolSpec, ToolUnavailable, cut

LIMITS = Limits(wall_s=5.0, cpu_s=5.0, memory_bytes=256 << 20, output_bytes=16 << 10, max_processes=8,
                disk_bytes=16 << 20)
TENANT = "tools"
STDERR_TAIL = 800
"""Characters of stderr shown to the model after a failure (the traceback's end says what went wrong)."""

_KINDS = {ExecStatus.TIME_LIMIT_EXCEEDED: ("time_limit", "time limit exceeded ({:g} s)".format(LIMITS.wall_s)),
          ExecStatus.MEMORY_LIMIT_EXCEEDED: ("memory_limit", "memory limit exceeded"),
          ExecStatus.OUTPUT_LIMIT_EXCEEDED: ("output_limit", "output limit exceeded")}


class PythonTool:
    spec = ToolSpec(
        name="python",
        description="Run a Python 3 program and return what it prints (stdout). Each call starts a fresh "
                    "interpreter: print the values you need. No network, no files outside the work dir.",
        parameters={"type": "object", "properties": {"code": {"type": "string", "maxLength": 65536}},
                    "required": ["code"], "additionalProperties": False},
        max_wall_s=LIMITS.wall_s, max_output_bytes=4096)

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def run(self, arguments: dict[str, Any], session_id: str) -> ToolOutput:
        try:
            result = as_tenant(TENANT, self.sandbox.execute, arguments["code"], b"", LIMITS)
        except SandboxError as exc:
            raise ToolUnavailable(f"sandbox failure: {exc}") from None
        # room for the error's own words after the output, within what the server passes on
        stdout, cut_here = cut(result.stdout.decode(errors="replace"), self.spec.max_output_bytes - STDERR_TAIL - 100)
        truncated = result.stdout_truncated or cut_here
        if result.status in _KINDS:
            kind, message = _KINDS[result.status]
            return ToolOutput(f"{stdout}\n{message}".strip(), kind, truncated)
        if result.exit_code != 0 or result.signal:
            stderr = result.stderr.decode(errors="replace")[-STDERR_TAIL:]
            return ToolOutput(f"{stdout}{stderr}".strip() or f"exit code {result.exit_code}", "runtime_error", truncated)
        return ToolOutput(stdout, "", truncated)


VERSION = f"cohort-sandbox {__version__}"
