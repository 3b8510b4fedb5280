"""Warm pools of sandbox slots and the in-process :class:`Sandbox` facade.

Two pools: *candidate* slots run untrusted code, *grader* slots run the trusted test code of
``grader.py``. A test run holds one slot of each, always acquired in that order, so concurrent
test runs cannot deadlock. A slot whose fork server died or could not clean up is replaced in the
background; callers never wait for a bubblewrap start unless every slot is gone.

Fairness between tenants (e.g. one verifier group): work run under :func:`as_tenant` counts against
that tenant, and one tenant holds at most ``max_per_tenant`` slots of a pool at a time (default half
the pool), so a group whose programs all burn CPU or sleep to their deadline leaves the other half
of the slots to everyone else. Work without a tenant (``""``) is not capped. CPU between slots is
shared by the slots' cgroups (cgroup.py).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import logging
import os
import posixpath
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from cohort.sandbox import cgroup, policy
from cohort.sandbox.executor import ExecResult, SandboxError, Slot

log = logging.getLogger("cohort.sandbox")

ACQUIRE_TIMEOUT_S = 300.0  # waiting for a free slot is queueing, not failure (dead pools fail at once)


_SPAWN_QUEUE: queue.Queue | None = None
_SPAWN_LOCK = threading.Lock()
SPAWN_THREADS = max(4, 2 * (os.cpu_count() or 2))
"""Slots started at once (two per CPU, at least 4): the admission cap of slot and session start-up. A burst
of starts (a round of new stateful sessions) queues here instead of forking hundreds of bwraps at once."""


def _spawner() -> queue.Queue:
    """A few long-lived threads start every slot: bwrap's --die-with-parent (PR_SET_PDEATHSIG)
    fires when the *thread* that forked it exits, so slots must never be started from a
    short-lived thread."""
    global _SPAWN_QUEUE
    with _SPAWN_LOCK:
        if _SPAWN_QUEUE is None:
            _SPAWN_QUEUE = queue.Queue()

            def loop(q: queue.Queue) -> None:
                while True:
                    q.get()()

            for i in range(SPAWN_THREADS):
                threading.Thread(target=loop, args=(_SPAWN_QUEUE,), name=f"sandbox-spawner-{i}", daemon=True).start()
        return _SPAWN_QUEUE


def start_slot(config: policy.SandboxConfig, timeout: float) -> Slot:
    """A new slot started on the spawner threads (queued behind the starts before it); raises SandboxError
    when it fails to start or is not started within ``timeout``."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def start() -> None:
        if not done.set_running_or_notify_cancel():
            return  # the caller gave up while it queued
        try:
            done.set_result(Slot(config))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            done.set_exception(exc)

    _spawner().put(start)
    try:
        return done.result(timeout)
    except concurrent.futures.TimeoutError:
        if done.cancel():
            raise SandboxError(f"no sandbox slot started within {timeout:.1f}s (start-up queue)") from None
        return done.result()  # it was starting: it ends within the slot's own start timeout
    except OSError as exc:
        raise SandboxError(f"sandbox slot failed to start: {exc}") from None


_TENANT = threading.local()


def as_tenant(tenant: str, fn: Callable, *args):
    """``fn(*args)`` with every slot it acquires on this thread counted against ``tenant``."""
    previous = getattr(_TENANT, "name", "")
    _TENANT.name = tenant
    try:
        return fn(*args)
    finally:
        _TENANT.name = previous


class Cancelled(Exception):
    """The execution was cancelled before it started (its caller gave up)."""


class Cancel:
    """Stops one execution from another thread (a tool call whose client gave up): cancelled before it has
    a slot, it never starts (:class:`Cancelled`); while it runs, its job is killed (the result is whatever
    the killed program left). Once the execution has given its slot back, cancelling does nothing: the
    kill can never reach a later job in that slot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slot: Slot | None = None
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._slot is not None:
                self._slot.kill_current()

    @contextmanager
    def running(self, slot: Slot) -> Iterator[None]:
        with self._lock:
            if self.cancelled:
                raise Cancelled("cancelled before it started")
            self._slot = slot
        try:
            yield
        finally:
            with self._lock:
                self._slot = None


class SlotPool:
    """``size`` warm slots; ``acquire()`` lends one for a single job sequence."""

    def __init__(self, config: policy.SandboxConfig, size: int, name: str, max_per_tenant: int = 0) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.config = config
        self.size = size
        self.name = name
        self.max_per_tenant = max_per_tenant or max(1, size // 2)
        self._held: Counter[str] = Counter()
        self._tenants = threading.Condition()
        self._idle: queue.Queue[Slot] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._live: set[Slot] = set()
        self.last_error: str = ""
        for _ in range(size):
            self._spawn_async()

    def _spawn(self) -> None:
        if self._closed:
            return
        try:
            slot = Slot(self.config)
        except (SandboxError, OSError) as exc:
            self.last_error = str(exc)
            if self._closed:  # closed while it started (a server exiting at once): its failure is expected
                return
            log.error("sandbox %s slot failed to start: %s", self.name, exc)
            self._idle.put(None)  # wake a waiter so it can report the failure
            return
        with self._lock:
            if self._closed:
                slot.kill()
                return
            self._live.add(slot)
        self._idle.put(slot)

    def _spawn_async(self) -> None:
        _spawner().put(self._spawn)

    @contextmanager
    def _tenant_share(self, timeout: float) -> Iterator[None]:
        tenant = getattr(_TENANT, "name", "")
        if not tenant:
            yield
            return
        with self._tenants:
            if not self._tenants.wait_for(lambda: self._held[tenant] < self.max_per_tenant, timeout):
                raise SandboxError(
                    f"tenant {tenant!r} held {self.max_per_tenant} {self.name} slots for {timeout:.0f}s")
            self._held[tenant] += 1
        try:
            yield
        finally:
            with self._tenants:
                self._held[tenant] -= 1
                if not self._held[tenant]:
                    del self._held[tenant]
                self._tenants.notify_all()

    @contextmanager
    def acquire(self, timeout: float = ACQUIRE_TIMEOUT_S) -> Iterator[Slot]:
        if self._closed:
            raise SandboxError("sandbox pool is closed")
        with self._tenant_share(timeout), self._lend(timeout) as slot:
            yield slot

    @contextmanager
    def _lend(self, timeout: float) -> Iterator[Slot]:
        try:
            slot = self._idle.get(timeout=timeout)
        except queue.Empty:
            raise SandboxError(f"no {self.name} sandbox slot free after {timeout:.0f}s") from None
        if slot is None:
            self._spawn_async()
            raise SandboxError(f"sandbox slot failed to start: {self.last_error}")
        try:
            yield slot
        finally:
            if slot.healthy and not self._closed:
                self._idle.put(slot)
            else:
                slot.kill()
                with self._lock:
                    self._live.discard(slot)
                self._spawn_async()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            live, self._live = list(self._live), set()
        for slot in live:
            slot.kill()


def check_file_path(path: str) -> str:
    """A relative path that stays inside the work dir, e.g. ``data/input.txt``."""
    norm = posixpath.normpath(path)
    if not path or path.startswith("/") or norm.startswith("..") or "\0" in path or norm == ".":
        raise ValueError(f"file path {path!r} must be relative and stay inside the work dir")
    return norm


def default_pool_size() -> int:
    """Slots per pool: 2 per CPU (at least 4). A slot idles at ~10 MB; more slots than CPUs keep
    the CPUs busy while other slots wait on pipes, forks and cleanup."""
    return max(4, 2 * (os.cpu_count() or 2))


@dataclass(frozen=True)
class SandboxOptions:
    config: policy.SandboxConfig = field(default_factory=policy.SandboxConfig)
    pool_size: int = 0
    """Candidate slots (and as many grader slots); 0 = max(4, 2 * CPUs)."""
    max_per_tenant: int = 0
    """Slots of a pool one tenant (:func:`as_tenant`) may hold at once; 0 = half the pool (at least 1)."""
    defaults: policy.Limits = policy.DEFAULT_LIMITS
    maxima: policy.Limits = policy.MAX_LIMITS


class Sandbox:
    """In-process sandbox: warm pools plus ``execute`` and ``run_tests``. Thread-safe."""

    def __init__(self, options: SandboxOptions | None = None) -> None:
        self.options = options or SandboxOptions()
        size = self.options.pool_size or default_pool_size()
        if self.options.config.use_cgroups:
            cgroup.sweep()  # slot cgroups left by service processes that died without closing their sandbox
        self.candidates = SlotPool(self.options.config, size, "candidate", self.options.max_per_tenant)
        self.graders = SlotPool(self.options.config, size, "grader", self.options.max_per_tenant)
        self.extra: list[SlotPool] = []
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the sandbox closes (before its pools: a user's sessions)."""
        self._on_close.append(fn)

    def add_pool(self, name: str, size: int) -> SlotPool:
        """A further pool of ``size`` candidate slots for one user (the ``python`` tool's own slots, so tool
        calls and the code verifier never wait for each other), closed with the sandbox."""
        pool = SlotPool(self.options.config, size, name, max_per_tenant=size)
        self.extra.append(pool)
        return pool

    def clamp(self, limits: policy.Limits | None) -> policy.Limits:
        return (limits or policy.Limits(0, 0, 0, 0, 0, 0)).clamp(self.options.maxima, self.options.defaults)

    def execute(self, code: str, stdin: bytes = b"", limits: policy.Limits | None = None,
                files: dict[str, bytes] | None = None, pool: SlotPool | None = None,
                cancel: Cancel | None = None, acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
                ends_by: float | None = None) -> ExecResult:
        """Run ``code`` as a program (``__main__``) with ``stdin`` and ``files`` placed in its work dir, in a
        slot of ``pool`` (default: the candidate slots); ``cancel`` may stop it from another thread;
        ``ends_by`` (``time.monotonic()``) cuts its wall time to what is left then, once it has a slot.

        Raises SandboxError on infra failure, ValueError for a bad file path, :class:`Cancelled` when
        cancelled before it started.
        """
        clamped = self.clamp(limits)
        job = {"mode": "exec", "code": code}
        if files:
            job["files"] = [[check_file_path(p), base64.b64encode(c).decode()] for p, c in files.items()]
        with (pool or self.candidates).acquire(acquire_timeout_s) as slot:
            if ends_by is not None:
                clamped = replace(clamped, wall_s=max(0.001, min(clamped.wall_s, ends_by - time.monotonic())))
            with cancel.running(slot) if cancel is not None else contextlib.nullcontext():
                return slot.run(job, clamped, stdin=stdin)

    def run_tests(self, code: str, spec, per_test_timeout_s: float, stop_first: bool = False,
                  limits: policy.Limits | None = None):
        from cohort.sandbox.grader import run_tests

        return run_tests(self, code, spec, per_test_timeout_s, stop_first, self.clamp(limits))

    def close(self) -> None:
        for fn in self._on_close:
            fn()
        self.candidates.close()
        self.graders.close()
        for pool in self.extra:
            pool.close()
        if self.options.config.use_cgroups:
            cgroup.sweep()  # anything a slot's own removal could not finish in time

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
