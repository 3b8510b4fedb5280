"""Killable worker processes: the one process pool of the verifier service.

Used by the math verifier's SymPy checks (:mod:`verifiers.math.pool`) and by the server's scoring
processes (:mod:`verifiers.hosting.procs`). Each worker runs ``setup(*setup_args)`` once on its main thread
(load verifiers, set an rlimit, ...), says it is ready, then answers tasks one at a time with the
handler ``setup`` returned. A caller holds a worker exclusively from taking it off the idle queue to
putting it back, so tasks run in parallel up to the pool size and no lock is held while one runs.

A task still running at its deadline is killed with its process (SIGKILL); a worker that dies is
noticed when its pipe closes. Either way a fresh worker takes its place in the background and
``restarts`` counts it, so a pathological input costs one restart, never a hung thread. ``signal.alarm``
is never used. Callers wait either on a thread (:meth:`WorkerPool.run`, for verifiers' thread pools)
or on the event loop (:meth:`WorkerPool.run_async`, for the server: no thread hand-off per task, and
a cancelled call kills its worker at once); both drive the same submit/retry/replace loop.

Workers are started by ``forkserver`` (optionally with modules preloaded, so a replacement is ready
in milliseconds) or ``spawn``; never by ``fork``, since a server process has gRPC threads. As with any
spawn/forkserver use, the program's main module must be importable without side effects.

Why in-house rather than ``pebble`` (which has killable tasks with timeouts and worker restarts):
pebble's timeout starts when a worker picks the task up, while here the deadline also bounds the
wait for a free worker; it has no ready handshake (the server must not turn SERVING before its
scoring processes have loaded their verifiers); and it offers no event-loop waiting, no worker pids
and no restart count, which the tests and logs rely on. What is needed fits in this module, which is over
400 lines because the waits on a thread and on the event loop share one submit/retry/replace loop and one
set of worker books (idle queue, waiters, restarts, start failures): split, each part would reach into the
other's state.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cohort.rpc.retry import run_blocking

log = logging.getLogger(__name__)

_READY = "ready"
MAX_START_FAILURES = 5
"""Workers in a row that fail to start (the start itself raises, or the process dies before it says it is
ready) before a pool gives up: it is then :attr:`WorkerPool.broken`, answers every task at once as crashed
with the reason, and the server reports NOT_SERVING (a pool retrying forever served nothing and logged a
traceback each second)."""
_BROKEN: dict[int, tuple[str, str]] = {}
_BROKEN_LOCK = threading.Lock()


def broken_pools() -> list[tuple[str, str]]:
    """(pool name, reason) of every pool in this process that gave up starting workers."""
    with _BROKEN_LOCK:
        return list(_BROKEN.values())


@dataclass(frozen=True)
class PoolResult:
    kind: Literal["ok", "timeout", "crashed"]
    value: Any = None
    detail: str = ""


def _serve(conn, setup: Callable[..., Callable[[Any], Any]], setup_args: tuple) -> None:
    """A worker's body: set up once, say ready, then answer tasks until the pipe closes."""
    handle = setup(*setup_args)
    conn.send(_READY)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        conn.send(handle(task))


class _Worker:
    def __init__(self, ctx, setup, setup_args: tuple, name: str, on_ready: Callable[[], None]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child, setup, setup_args), daemon=True, name=name)
        self.process.start()
        child.close()
        self.ready = False
        self._on_ready = on_ready

    def said_ready(self) -> bool:
        """Whether it ever said it is ready (read now from the pipe if nobody has yet; the message outlives the
        process): a worker that dies after that did start, whatever killed it."""
        if not self.ready:
            try:
                if self.conn.poll(0):
                    self._check_ready(self.conn.recv())
            except (EOFError, OSError, RuntimeError):
                pass
        return self.ready

    def receive(self, deadline: float | None):
        """The next message; TimeoutError past ``deadline``; EOFError/OSError when the process died."""
        if not self.conn.poll(None if deadline is None else max(0.0, deadline - time.monotonic())):
            raise TimeoutError
        return self.conn.recv()

    # A task is sent only once the worker has said it is ready: it then waits in recv() and drains the
    # pipe, so sending a large task never blocks on a worker still setting up.

    def call(self, task: Any, deadline: float, budget_s: float | None = None):
        """The task's reply by ``deadline``; with ``budget_s``, also within that long of the task reaching a
        ready worker (a fresh worker's start-up is waited for within the deadline, not charged to the task)."""
        if not self.ready:
            self._check_ready(self.receive(deadline))
        self.conn.send(task)
        return self.receive(deadline if budget_s is None else min(deadline, time.monotonic() + budget_s))

    async def call_async(self, task: Any, deadline: float):
        if not self.ready:
            self._check_ready(await asyncio.wait_for(self._receive_async(), max(0.0, deadline - time.monotonic())))
        self.conn.send(task)
        return await asyncio.wait_for(self._receive_async(), max(0.0, deadline - time.monotonic()))

    def _check_ready(self, message) -> None:
        if message != _READY:
            raise RuntimeError(f"worker {self.process.pid} sent {message!r} instead of saying it is ready")
        self.ready = True
        self._on_ready()  # the pool's count of workers in a row that failed to start goes back to 0

    async def _receive_async(self):
        """The next message, read by the event loop once the pipe is readable."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        fd = self.conn.fileno()

        def readable() -> None:
            loop.remove_reader(fd)
            if not done.done():
                try:
                    done.set_result(self.conn.recv())
                except BaseException as exc:  # EOFError when the process died
                    done.set_exception(exc)

        loop.add_reader(fd, readable)
        try:
            return await done
        finally:
            loop.remove_reader(fd)

    def kill(self) -> None:
        try:
            self.process.kill()
        except (OSError, ValueError):
            pass
        self.process.join(timeout=5)
        self.conn.close()


def _ensure_forkserver() -> None:
    """Start the forkserver with ``PYTHONSAFEPATH=1`` (a no-op when it runs already).

    Python starts the forkserver with ``-c``, which puts the working folder first on its ``sys.path``;
    the forkserver imports the preloaded modules (``cohort`` among them) and every worker inherits them.
    Started in a folder that holds a ``cohort/`` package (a checkout of an older layout, a user's
    project), every worker would import that folder as ``cohort`` and die. The variable is set only
    while the forkserver starts: it is the forkserver's environment, not this process's.
    """
    from multiprocessing import forkserver

    with _LOCK:
        before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            forkserver.ensure_running()
        finally:
            if before is None:
                del os.environ["PYTHONSAFEPATH"]
            else:
                os.environ["PYTHONSAFEPATH"] = before


_LOCK = threading.Lock()


class WorkerPool:
    """``size`` killable worker processes running ``setup(*setup_args)``'s handler. Thread-safe."""

    def __init__(self, setup: Callable[..., Callable[[Any], Any]], setup_args: tuple = (), size: int = 1, *,
                 start_method: str | None = None, preload: Sequence[str] = (), name: str = "cohort-worker",
                 attempts: int = 1) -> None:
        if size < 1:
            raise ValueError("pool size must be >= 1")
        method = start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        if method == "fork":
            raise ValueError("the fork start method is unsafe in a gRPC server; use forkserver or spawn")
        self._ctx = mp.get_context(method)
        if method == "forkserver":
            if preload:
                self._ctx.set_forkserver_preload(list(preload))
            _ensure_forkserver()
        self._setup, self._setup_args, self._name = setup, setup_args, name
        self._size = size
        self._attempts = attempts
        """Tries per task when the worker dies under it (1: a task that kills its worker is not rerun)."""
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = collections.deque()
        """Event-loop callers waiting for a worker; a released worker goes to the first of them."""
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()  # guards _all, _waiters, _started, _closed and restarts only
        self._started = False
        self._closed = False
        self.restarts = 0
        self._start_failures = 0
        """Workers in a row that failed to start; reset when one says it is ready."""
        self.broken = ""
        """Why the pool gave up starting workers (MAX_START_FAILURES in a row); empty while it works."""

    @property
    def size(self) -> int:
        return self._size

    def start(self, ready_timeout_s: float | None = None) -> None:
        """Start the workers (once); with ``ready_timeout_s``, wait until each has set up. Raises RuntimeError
        (with the reason) on a pool that gave up starting workers."""
        if self.broken:
            raise RuntimeError(self.broken)
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
        workers = [w for w in (self._add_worker() for _ in range(self._size)) if w is not None]
        if ready_timeout_s is None:
            return
        if self.broken:
            raise RuntimeError(self.broken)
        deadline = time.monotonic() + ready_timeout_s
        for w in workers:
            try:
                w._check_ready(w.receive(deadline))
            except (TimeoutError, EOFError, OSError) as exc:
                raise RuntimeError(f"{self._name} process {w.process.pid} did not start within {ready_timeout_s}s ({exc!r})") from None

    def _add_worker(self) -> _Worker | None:
        if self.broken:
            return None
        try:
            worker = _Worker(self._ctx, self._setup, self._setup_args, self._name, self._started_one)
        except Exception as exc:  # a failed start must not lose a pool slot silently, nor retry forever
            if self._start_failed(f"{type(exc).__name__}: {exc}"):
                threading.Timer(1.0, self._add_worker).start()
            return None
        with self._lock:
            if self._closed:
                worker.kill()
                return None
            self._all.add(worker)
        self._release(worker)
        return worker

    def _start_failed(self, why: str) -> bool:
        """Count one worker that did not start; False (and the pool broken) once MAX_START_FAILURES in a row."""
        with self._lock:
            if self._closed or self.broken:
                return False
            self._start_failures += 1
            n = self._start_failures
            if n >= MAX_START_FAILURES:
                self.broken = (f"{self._name}: {n} worker processes in a row failed to start; giving up "
                               f"(last: {why[:500]})")
                waiters, self._waiters = list(self._waiters), collections.deque()
        if n < MAX_START_FAILURES:
            log.warning("%s process failed to start (%d of %d before giving up): %s", self._name, n,
                        MAX_START_FAILURES, why[:500])
            return True
        log.error("%s", self.broken)
        with _BROKEN_LOCK:
            _BROKEN[id(self)] = (self._name, self.broken)
        self._idle.put(None)  # wake the threads waiting for a worker: each passes it on (see _take_blocking)
        for loop, waiter in waiters:
            try:
                loop.call_soon_threadsafe(self._hand, waiter, None)
            except RuntimeError:
                pass
        return False

    def _started_one(self) -> None:
        with self._lock:
            self._start_failures = 0

    def _replace(self, worker: _Worker, why: str) -> None:
        log.warning("%s process %s %s: killing and replacing it", self._name, worker.process.pid, why)
        with self._lock:
            self._all.discard(worker)
            self.restarts += 1
        never_ready = not worker.said_ready()

        def restart() -> None:
            worker.kill()
            # A failed start is a worker that ended by itself before it was ready (its setup raised or exited:
            # exit code >= 0). One killed by a signal (by this pool at a deadline, by a test, by an operator)
            # says nothing about whether workers can start: a busy machine where setups outlast short
            # deadlines must not add those kills up until the pool gives up.
            code = worker.process.exitcode
            if never_ready and code is not None and code >= 0 and not self._start_failed(
                    f"process {worker.process.pid} {why} before it was ready (exit code {code})"):
                return
            self._add_worker()

        threading.Thread(target=restart, daemon=True, name=f"{self._name}-restart").start()

    def run(self, task: Any, deadline: float, budget_s: float | None = None) -> PoolResult:
        """Run ``task`` in a worker on this thread; give up at ``deadline`` (``time.monotonic()``).

        ``budget_s``: the task may also run at most this long once a worker has it (the wait for a free
        worker does not count); a task killed at that bound says so in its detail ("ran past its budget")."""
        if self.broken:
            return PoolResult("crashed", detail=self.broken)
        self.start()

        # The same loop as run_async, waiting by blocking this thread: nothing it awaits ever suspends,
        # so cohort.rpc.retry.run_blocking runs it to its end (no event loop involved).
        async def take() -> _Worker | None:
            return self._take_blocking(deadline)

        async def call(worker: _Worker) -> Any:
            return worker.call(task, deadline, budget_s)

        result = run_blocking(self._attempt(take, call))
        if (result.kind == "timeout" and budget_s is not None and result.detail == "killed at the deadline"
                and time.monotonic() < deadline):
            return PoolResult("timeout", detail="ran past its budget")
        return result

    async def run_async(self, task: Any, deadline: float) -> PoolResult:
        """:meth:`run` on the event loop; a cancelled call kills its worker (then re-raises)."""
        if self.broken:
            return PoolResult("crashed", detail=self.broken)
        self.start()
        return await self._attempt(lambda: self._take(deadline), lambda worker: worker.call_async(task, deadline))

    async def _attempt(self, take: Callable[[], Awaitable[_Worker | None]], call: Callable[[_Worker], Awaitable[Any]]) -> PoolResult:
        """The submit/retry/replace loop of :meth:`run` and :meth:`run_async`, written once: ``take`` waits
        for an idle worker (None: none free before the deadline), ``call`` for the task's reply from it.
        A worker found dead is replaced without using up a try; one that dies during the task is
        replaced and the task tried again, up to ``attempts``; one past the deadline is killed."""
        tries = 0
        while tries < self._attempts:
            if self.broken:
                return PoolResult("crashed", detail=self.broken)
            worker = await take()
            if worker is None:
                if self.broken:
                    return PoolResult("crashed", detail=self.broken)
                return PoolResult("timeout", detail="no worker free before the deadline")
            if not worker.process.is_alive():  # died while idle (killed, OOM killer)
                self._replace(worker, "died while idle")
                continue  # not a try: the task never reached it
            tries += 1
            try:
                value = await call(worker)
            except TimeoutError:
                self._replace(worker, "ran past its deadline")
                return PoolResult("timeout", detail="killed at the deadline")
            except asyncio.CancelledError:
                self._replace(worker, "had its call cancelled")
                raise
            except (EOFError, OSError, RuntimeError) as exc:
                self._replace(worker, f"died during a task ({exc!r})")
                continue
            if self._start_failures:
                self._started_one()
            self._release(worker)
            return PoolResult("ok", value)
        return PoolResult("crashed", detail=self.broken or "the worker died during the task")

    def _take_blocking(self, deadline: float) -> _Worker | None:
        """An idle worker, waited for on this thread (None at the deadline)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            worker = self._idle.get(timeout=remaining)
        except queue.Empty:
            return None
        if worker is None:  # the pool broke: pass the wake-up on to the next waiting thread
            self._idle.put(None)
        return worker

    async def _take(self, deadline: float) -> _Worker | None:
        """An idle worker, waited for on the event loop (None at the deadline)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.broken:
                return None
            try:
                worker = self._idle.get_nowait()
                if worker is None:
                    self._idle.put(None)
                return worker
            except queue.Empty:
                waiter = loop.create_future()
                self._waiters.append((loop, waiter))
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._give_up(loop, waiter)
            return None
        except asyncio.CancelledError:
            self._give_up(loop, waiter)
            raise

    def _give_up(self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future) -> None:
        with self._lock:
            if (loop, waiter) in self._waiters:
                self._waiters.remove((loop, waiter))
        if waiter.done():  # handed a worker just as the wait ended: pass it on
            if waiter.result() is not None:
                self._release(waiter.result())
        else:
            waiter.cancel()  # a worker handed later goes back (see _hand)

    def _release(self, worker: _Worker) -> None:
        """Back to the pool: to the longest-waiting event-loop caller, else onto the idle queue."""
        while True:
            with self._lock:
                if not self._waiters:
                    self._idle.put(worker)
                    return
                loop, waiter = self._waiters.popleft()
            try:
                loop.call_soon_threadsafe(self._hand, waiter, worker)
                return
            except RuntimeError:  # that caller's event loop is closed: the next one, or the queue
                continue

    def _hand(self, waiter: asyncio.Future, worker: _Worker | None) -> None:
        if waiter.done():  # its caller gave up meanwhile
            if worker is not None:
                self._release(worker)
        else:
            waiter.set_result(worker)

    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._all if w.process.pid is not None]

    def close(self) -> None:
        with _BROKEN_LOCK:
            _BROKEN.pop(id(self), None)
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()
