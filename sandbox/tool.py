"""The ``python`` tool (``grpo.tool.v1``), served by the sandbox service with the sandbox's isolation.

Each call runs the model's code as a fresh program in a sandbox slot (no state is kept between calls:
a rollout that needs an earlier value computes it again), or, with sessions on (serve config
``sandbox.python_tool.sessions``), in the interpreter its session keeps across the rollout's turns
(:mod:`cohort.sandbox.session`), under :data:`LIMITS` (the wall time configurable:
``sandbox.python_tool.wall_s``). The tool has its own slots, ``sandbox.python_tool.slots_per_core`` per
CPU (:data:`SLOTS_PER_CORE`, at least :data:`MIN_SLOTS`), apart from the code verifier's, so neither
waits for the other; the tool server shares them fairly between sessions and gives every call its own
budget (``cohort.tools.server``). The result is what the model reads next: its stdout, plus the end of
stderr when the program failed. A program that raises, loops or exhausts its limits is the call's own
failure (an OK result with ``error_kind``); a call stopped before its full time limit because the server
was busy (its budget ran out while it waited) says ``busy``; a sandbox that cannot run it is
:class:`~cohort.tools.base.ToolUnavailable` (the rollout is masked).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from cohort import __version__
from cohort.sandbox.executor import SLOT_START_TIMEOUT_S, ExecStatus, SandboxError
from cohort.sandbox.policy import Limits
from cohort.sandbox.pool import Cancel, Cancelled, Sandbox
from cohort.sandbox.session import SessionLimits, Sessions
from cohort.tools.base import ToolOutput, ToolSpec, ToolUnavailable, cut
from cohort.tools.server import BUSY, current_call

LIMITS = Limits(wall_s=5.0, cpu_s=5.0, memory_bytes=256 << 20, output_bytes=16 << 10, max_processes=8,
                disk_bytes=16 << 20)
SLOTS_PER_CORE = 2.0
"""Default tool slots per CPU: a slot whose program loops holds one CPU, one that sleeps none; two per
CPU keep the CPUs busy while half the slots wait on their programs' deadlines."""
MIN_SLOTS = 4
STATELESS = ("Run a Python 3 program and return what it prints (stdout). Each call starts a fresh interpreter: "
             "print the values you need. No network, no files outside the work dir.")
STATEFUL = ("Run Python 3 code and return what it prints (stdout). Your calls share one interpreter: variables, "
            "functions and imports persist from one call to the next. No network, no files outside the work dir.")
STDERR_TAIL = 800
"""Characters of stderr shown to the model after a failure (the traceback's end says what went wrong)."""


def tool_slots(per_core: float = 0.0) -> int:
    """The tool's slots on this machine: ``per_core`` (0: :data:`SLOTS_PER_CORE`) per CPU, at least
    :data:`MIN_SLOTS`."""
    per_core = per_core or SLOTS_PER_CORE
    return max(MIN_SLOTS, round(per_core * (os.cpu_count() or 1)))


class PythonTool:
    def __init__(self, sandbox: Sandbox, slots: int = 0, wall_s: float = 0.0,
                 sessions: SessionLimits | None = None) -> None:
        """``sessions``: keep one interpreter per session id (calls without one stay stateless)."""
        wall_s = wall_s or LIMITS.wall_s
        if not 0 < wall_s <= sandbox.options.maxima.wall_s:
            raise ValueError(f"the python tool's wall time must be in (0, {sandbox.options.maxima.wall_s}] s, "
                             f"got {wall_s}")
        self.limits = replace(LIMITS, wall_s=wall_s, cpu_s=min(LIMITS.cpu_s, wall_s))
        self.stateful = sessions is not None
        self.spec = ToolSpec(
            name="python",
            description=STATEFUL if self.stateful else STATELESS,
            parameters={"type": "object", "properties": {"code": {"type": "string", "maxLength": 65536}},
                        "required": ["code"], "additionalProperties": False},
            max_wall_s=wall_s, max_output_bytes=4096)
        self.sandbox = sandbox
        self.capacity = slots or tool_slots()
        """Calls that run at once (the tool server's places for this tool): one slot each."""
        self.slots = sandbox.add_pool("tool", self.capacity)
        self.sessions = Sessions(sandbox.options.config, sessions) if sessions is not None else None
        if self.sessions is not None:
            sandbox.on_close(self.sessions.close)

    def end_sessions(self, session_ids: list[str]) -> int:
        """End these sessions (their rollouts ended); how many held an interpreter."""
        return self.sessions.end(session_ids) if self.sessions is not None else 0

    def run(self, arguments: dict[str, Any], session_id: str) -> ToolOutput:
        call = current_call()
        if call is not None and call.time_left() <= 0:
            return ToolOutput("the tool server was busy: no time was left for this call; call again", BUSY)
        cancel = Cancel()
        if call is not None:
            call.on_cancel(cancel.cancel)
        if self.sessions is not None and session_id:
            return self._in_session(session_id, arguments["code"], call, cancel)
        # a slot being replaced (or still starting) is waited for within the call's budget; the program then
        # runs for what is left of it, at most the full wall time
        ends_by = call.deadline if call is not None else None
        wait = max(1.0, call.time_left()) if call is not None else SLOT_START_TIMEOUT_S
        try:
            result = self.sandbox.execute(arguments["code"], b"", self.limits, pool=self.slots, cancel=cancel,
                                          acquire_timeout_s=wait, ends_by=ends_by)
        except Cancelled:
            return ToolOutput("cancelled: the client gave up on this call", BUSY)
        except SandboxError as exc:
            raise ToolUnavailable(f"sandbox failure: {exc}") from None
        # room for the error's own words after the output, within what the server passes on
        stdout, cut_here = cut(result.stdout.decode(errors="replace"), self.spec.max_output_bytes - STDERR_TAIL - 100)
        truncated = result.stdout_truncated or cut_here
        # stopped by the wall clock before its full wall time (its budget ran short while it waited): busy;
        # a program that used up its CPU time did so by itself
        if (result.status is ExecStatus.TIME_LIMIT_EXCEEDED and result.wall_s < self.limits.wall_s - 0.01
                and result.cpu_s < self.limits.cpu_s):
            return ToolOutput(f"{stdout}\nstopped after {result.wall_s:.1f} s of its {self.limits.wall_s:g} s: the tool "
                              "server was busy; call again".strip(), BUSY, truncated)
        kinds = {ExecStatus.TIME_LIMIT_EXCEEDED: ("time_limit", f"time limit exceeded ({self.limits.wall_s:g} s)"),
                 ExecStatus.MEMORY_LIMIT_EXCEEDED: ("memory_limit", "memory limit exceeded"),
                 ExecStatus.OUTPUT_LIMIT_EXCEEDED: ("output_limit", "output limit exceeded")}
        if result.status in kinds:
            kind, message = kinds[result.status]
            return ToolOutput(f"{stdout}\n{message}".strip(), kind, truncated)
        if result.exit_code != 0 or result.signal:
            stderr = result.stderr.decode(errors="replace")[-STDERR_TAIL:]
            return ToolOutput(f"{stdout}{stderr}".strip() or f"exit code {result.exit_code}", "runtime_error", truncated)
        return ToolOutput(stdout, "", truncated)


    def _in_session(self, session_id: str, code: str, call, cancel: Cancel) -> ToolOutput:
        full = self.limits.wall_s
        # used directly (no server): the call's whole wall time after a session start of up to 30 s
        deadline = call.deadline if call is not None else time.monotonic() + full + SLOT_START_TIMEOUT_S
        try:
            cell, previous = self.sessions.call(session_id, code, full, deadline, cancel)
        except TimeoutError as exc:
            return ToolOutput(f"the tool server was busy: {exc}; call again", BUSY)
        except SandboxError as exc:
            raise ToolUnavailable(f"sandbox failure: {exc}") from None
        note = f"[a new session: the previous one ended ({previous}); its variables are gone]\n" if previous else ""
        gone = f"\n[the session ended ({cell.ended}): its variables are gone]" if cell.ended else ""
        room = self.spec.max_output_bytes - STDERR_TAIL - 200 - len(note.encode())
        stdout, cut_here = cut(cell.stdout, max(0, room))
        truncated = cell.truncated or cut_here
        if cell.status == "time":
            kind = BUSY if cell.wall_s < full - 1e-3 else "time_limit"  # cut short by its budget: busy
            message = ("stopped early: the tool server was busy; call again" if kind == BUSY
                       else f"time limit exceeded ({full:g} s)")
            return ToolOutput(f"{note}{stdout}\n{message}{gone}".strip(), kind, truncated)
        kinds = {"memory": ("memory_limit", "memory limit exceeded"), "output": ("output_limit", "output limit exceeded")}
        if cell.status in kinds:
            kind, message = kinds[cell.status]
            return ToolOutput(f"{note}{stdout}\n{cell.stderr[-STDERR_TAIL:]}\n{message}{gone}".strip(), kind, truncated)
        if cell.status in ("error", "gone") or (cell.status == "exit" and cell.exit_code):
            stderr = cell.stderr[-STDERR_TAIL:]
            text = f"{note}{stdout}{stderr}".strip() or f"exit code {cell.exit_code}"
            return ToolOutput(f"{text}{gone}", "runtime_error", truncated)
        return ToolOutput(f"{note}{stdout}", "", truncated)


VERSION = f"cohort-sandbox {__version__}"
