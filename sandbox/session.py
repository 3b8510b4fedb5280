"""Stateful Python sessions: one sandboxed interpreter per rollout, kept across its turns.

A session is a whole slot (a bubblewrap sandbox with its own fork server, as for every other run: the
same seccomp filter, rlimits, uid, mounts and cgroup) whose one job is a long-lived interpreter
(``_zygote._run_session``) that reads each call's code from a pipe and runs it in one namespace, so
variables and imports persist between the calls of that session and of no other (another session is
another sandbox). Nothing of a session outlives it: when it ends, its fork server kills every process
in the sandbox and the slot is destroyed.

Bounds (:class:`SessionLimits`): memory (RLIMIT_AS of the interpreter and the slot's cgroup), CPU over its
whole life (RLIMIT_CPU), calls, idle time and lifetime; a call that runs past its wall time, or exhausts
the session's memory or CPU, ends the session (the model is told its variables are gone). At most
``max_live`` sessions live at once: a new one beyond that takes the place of the least recently used
idle session, or waits for one to end (until its call's budget runs out: ``busy``). Start-up is
admission-controlled by the sandbox's spawner threads (:data:`cohort.sandbox.pool.SPAWN_THREADS` at once):
a burst of new sessions queues there instead of failing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace

from cachetools import TTLCache

from cohort.sandbox import policy
from cohort.sandbox.codec import CodecError
from cohort.sandbox.executor import ExecStatus, SandboxError, Slot
from cohort.sandbox.grader import _recv, _Run, _send
from cohort.sandbox.pool import Cancel, Cancelled, start_slot

log = logging.getLogger("cohort.sandbox")

SESSIONS_PER_CORE = 32
"""Default live sessions per CPU (at least 64 in all): an idle session costs about 18 MB (its sandbox,
fork server and interpreter), so 64 cost about 1.2 GB."""
MIN_SESSIONS = 64
MAX_CODE_FRAME = 1 << 20
STATUSES = frozenset({"ok", "error", "exit", "memory", "output"})


@dataclass(frozen=True)
class SessionLimits:
    memory_bytes: int = 256 << 20
    """Address space of the session's interpreter (and each process it starts)."""
    cpu_s: float = 120.0
    """CPU seconds over the session's whole life."""
    max_calls: int = 64
    idle_s: float = 120.0
    """A session not called for this long is ended."""
    lifetime_s: float = 900.0
    """A session is ended this long after it started, whatever it does (a rollout's longest life plus a
    margin for grading: the learner normally ends it sooner, EndSessions)."""
    output_chars: int = 16 << 10
    """Per call and stream (stdout, stderr)."""
    max_processes: int = 8
    disk_bytes: int = 16 << 20
    max_live: int = 0
    """Sessions alive at once; 0: :data:`SESSIONS_PER_CORE` per CPU, at least :data:`MIN_SESSIONS`."""

    def live_cap(self) -> int:
        return self.max_live or max(MIN_SESSIONS, SESSIONS_PER_CORE * (os.cpu_count() or 1))

    def slot_limits(self) -> policy.Limits:
        """The limits of the session's one long job (its wall time is the session's lifetime)."""
        return policy.Limits(wall_s=self.lifetime_s + 1.0, cpu_s=self.cpu_s, memory_bytes=self.memory_bytes,
                             output_bytes=1 << 20, max_processes=self.max_processes, disk_bytes=self.disk_bytes)


@dataclass(frozen=True)
class CellResult:
    """One call in a session: what it printed and how it ended; ``ended`` says why the session ended with it."""

    status: str  # ok | error | exit | memory | output | time | gone
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    truncated: bool = False
    ended: str = ""
    wall_s: float = 0.0
    """The wall time the call was given (less than the tool's when its budget was short)."""


class _Session:
    def __init__(self, slot: Slot, limits: SessionLimits) -> None:
        self.slot, self.limits = slot, limits
        self.run = _Run(slot, {"mode": "session", "output_chars": limits.output_chars}, limits.slot_limits())
        self.started = self.used = time.monotonic()
        self.calls = 0
        self.lock = threading.Lock()
        self.ended = ""
        self._done = False

    def expired(self, now: float) -> str:
        if self.ended:
            return self.ended
        if now - self.used > self.limits.idle_s:
            return f"it was idle for {self.limits.idle_s:g} s"
        if now - self.started > self.limits.lifetime_s:
            return f"it reached its lifetime of {self.limits.lifetime_s:g} s"
        if self.calls >= self.limits.max_calls:
            return f"it made its {self.limits.max_calls} calls"
        return ""

    def call(self, code: str, wall_s: float, cancel: Cancel | None) -> CellResult:
        self.calls += 1
        deadline = time.monotonic() + wall_s
        if cancel is None:
            return replace(self._call(code, deadline), wall_s=wall_s)
        try:  # the client gave up: kill the session's run (the session ends with the call)
            with cancel.running(self.slot):
                return replace(self._call(code, deadline), wall_s=wall_s)
        except Cancelled:
            self.end("the call was cancelled")
            return CellResult("gone", ended=self.ended, wall_s=wall_s)

    def _call(self, code: str, deadline: float) -> CellResult:
        try:
            _send(self.run.host, {"code": code}, deadline)
            reply = _recv(self.run.host, deadline, cap=12 * self.limits.output_chars + (64 << 10))
        except TimeoutError:
            self.end("a call ran past its time limit", kill=True)
            return CellResult("time", ended=self.ended)
        except (OSError, CodecError):
            reply = False  # not a frame: kill it
        finally:
            self.used = time.monotonic()
        if not isinstance(reply, dict) or reply.get("status") not in STATUSES:
            # EOF: the interpreter exited (or closed its pipe: then it is killed after a short wait)
            result = self.end("its interpreter exited", kill=reply is not None, timeout=1.0)
            status = "gone"
            if result is not None and result.status is ExecStatus.MEMORY_LIMIT_EXCEEDED:
                status, self.ended = "memory", "it ran out of memory"
            elif result is not None and result.status is ExecStatus.TIME_LIMIT_EXCEEDED:
                status, self.ended = "time", "it used up its CPU time"
            elif result is not None and result.status is ExecStatus.OUTPUT_LIMIT_EXCEEDED:
                status, self.ended = "output", "it flooded its output"
            out = (result.stdout if result is not None else b"").decode(errors="replace")
            err = (result.stderr if result is not None else b"").decode(errors="replace")
            return CellResult(status, out, err, result.exit_code if result is not None else -1, ended=self.ended)
        text = lambda key: reply.get(key) if isinstance(reply.get(key), str) else ""  # noqa: E731
        exit_code = reply.get("exit") if isinstance(reply.get("exit"), int) else 1
        return CellResult(reply["status"], text("out"), text("err"), exit_code, reply.get("truncated") is True)

    def end(self, why: str, kill: bool = True, timeout: float = 10.0):
        """End the session (its sandbox is destroyed); the run's result, or None."""
        self.ended = self.ended or why
        if self._done:
            return None
        self._done = True
        try:
            return self.run.finish(kill=kill, timeout=timeout)
        except SandboxError as exc:
            log.warning("a session's sandbox failed while ending: %s", exc)
            return None
        finally:
            self.slot.kill()


class Sessions:
    """The live sessions of one tool, by session id. Thread-safe."""

    def __init__(self, config: policy.SandboxConfig, limits: SessionLimits) -> None:
        self.config, self.limits = config, limits
        self.cap = limits.live_cap()
        self._live: dict[str, _Session] = {}
        self._why: TTLCache = TTLCache(1 << 16, limits.lifetime_s)  # why the server ended a session
        self._starting = 0
        self._cond = threading.Condition()
        self._closed = False
        self.started = 0
        self._reaper = threading.Thread(target=self._reap, name="session-reaper", daemon=True)
        self._reaper.start()

    def __len__(self) -> int:
        with self._cond:
            return len(self._live)

    def call(self, session_id: str, code: str, wall_s: float, deadline: float,
             cancel: Cancel | None = None) -> tuple[CellResult, str]:
        """Run ``code`` in the session (started if it has none); (its result, why an earlier session of this
        id ended, when this call had to start a new one). Raises SandboxError when no session could be
        started before ``deadline`` (:class:`TimeoutError` when that was for want of a place)."""
        while True:
            session, previous = self._session(session_id, deadline)
            with session.lock:
                if session.ended:  # ended while this call waited for its lock: start another
                    self._drop(session_id, session)
                    continue
                wall = min(wall_s, deadline - time.monotonic())
                result = session.call(code, wall, cancel)
                if result.ended:
                    self._drop(session_id, session)  # already ended: its sandbox is gone
                return result, previous

    def end(self, session_ids) -> int:
        """End these sessions (the rollouts ended); how many were live."""
        ended = []
        with self._cond:
            for sid in session_ids:
                s = self._live.pop(sid, None)
                if s is not None:
                    ended.append(s)
            self._cond.notify_all()
        for s in ended:
            with s.lock:  # after a call in flight
                s.end("the rollout ended")
        return len(ended)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            live, self._live = list(self._live.values()), {}
            self._cond.notify_all()
        for s in live:
            s.end("the server stopped")

    def _session(self, session_id: str, deadline: float) -> tuple[_Session, str]:
        previous = ""
        evict = None
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("the sandbox is closing")
                s = self._live.get(session_id)
                if s is not None:
                    why = s.expired(time.monotonic()) if not s.lock.locked() else ""
                    if not why:
                        return s, ""
                    s.ended = previous = why
                    del self._live[session_id]
                    evict = s
                    break
                previous = self._why.pop(session_id, "")
                if len(self._live) + self._starting < self.cap:
                    break
                idle = [x for x in self._live.items() if not x[1].lock.locked()]
                if idle:  # the least recently used idle session gives its place
                    sid, s = min(idle, key=lambda x: x[1].used)
                    del self._live[sid]
                    evict = s
                    s.ended = s.ended or "the server needed its place for another session"
                    self._why[sid] = s.ended
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"all {self.cap} sessions are busy")
                self._cond.wait(min(left, 1.0))
            self._starting += 1
        try:
            if evict is not None:
                with evict.lock:
                    evict.end(evict.ended)
            slot = start_slot(self.config, max(0.1, deadline - time.monotonic()))
            session = _Session(slot, self.limits)
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify_all()
        with self._cond:
            self.started += 1
            if self._closed:
                session.end("the server stopped")
                raise SandboxError("the sandbox is closing")
            self._live[session_id] = session
        return session, previous

    def _drop(self, session_id: str, session: _Session) -> None:
        with self._cond:
            if self._live.get(session_id) is session:
                del self._live[session_id]
                self._why[session_id] = session.ended
            self._cond.notify_all()

    def _reap(self) -> None:
        period = max(0.05, min(1.0, self.limits.idle_s / 4))
        while True:
            time.sleep(period)
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                gone = [(sid, s) for sid, s in self._live.items() if not s.lock.locked() and s.expired(now)]
                for sid, s in gone:
                    del self._live[sid]
                    s.ended = self._why[sid] = s.expired(now)
                if gone:
                    self._cond.notify_all()
            for _, s in gone:
                with s.lock:
                    s.end(s.ended)


__all__ = ["CellResult", "SessionLimits", "Sessions"]
