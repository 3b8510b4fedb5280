"""A pool of killable worker processes for SymPy checks.

Each worker runs checks on its main thread, under an address-space cap (``RLIMIT_AS``). The parent
thread that holds a worker waits for the answer until the check's deadline; past it the worker is
killed (SIGKILL) and a fresh one is started in the background, so a pathological input costs one
worker restart and never a hung server thread. ``signal.alarm`` is never used.

Thread safety: any number of threads may call :meth:`WorkerPool.run` at once. Idle workers sit in a
``queue.Queue``; a thread owns a worker (and its pipe) exclusively between ``get`` and ``put``, so
checks run in parallel up to the pool size and no lock is held while a check runs.

Workers are started by ``forkserver`` (with the SymPy modules preloaded, so a replacement is ready
in milliseconds) or ``spawn``; never by ``fork``, since the server process has gRPC threads. As with
any spawn/forkserver use, the program's main module must be importable without side effects (an
``if __name__ == "__main__"`` guard; ``python -m pkg`` with a ``pkg/__main__.py`` is fine).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_PRELOAD = ["cohort.verifiers.math._worker"]


@dataclass(frozen=True)
class PoolResult:
    kind: str  # "ok" | "timeout" | "crashed"
    value: Any = None
    detail: str = ""


class _Worker:
    def __init__(self, ctx, memory_bytes: int):
        from cohort.verifiers.math import _worker

        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.process = ctx.Process(target=_worker.main, args=(child, memory_bytes), daemon=True, name="math-verify-worker")
        self.process.start()
        child.close()

    def kill(self) -> None:
        try:
            self.process.kill()
        except (OSError, ValueError):
            pass
        self.process.join(timeout=2)
        self.conn.close()


class WorkerPool:
    def __init__(self, size: int, memory_mb: int = 1536, start_method: str | None = None):
        if size < 1:
            raise ValueError("pool size must be >= 1")
        method = start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        if method == "fork":
            raise ValueError("the fork start method is unsafe in a gRPC server; use forkserver or spawn")
        self._ctx = mp.get_context(method)
        if method == "forkserver":
            self._ctx.set_forkserver_preload(_PRELOAD)
        self._memory_bytes = memory_mb * 1024 * 1024
        self._size = size
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()  # guards _all, _started and _closed only
        self._started = False
        self._closed = False
        self.restarts = 0

    @property
    def size(self) -> int:
        return self._size

    def start(self) -> None:
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
        for _ in range(self._size):
            self._add_worker()

    def _add_worker(self) -> None:
        try:
            worker = _Worker(self._ctx, self._memory_bytes)
        except Exception:  # a failed start must not lose a pool slot silently
            log.exception("could not start a math worker; retrying in 1 s")
            threading.Timer(1.0, self._add_worker).start()
            return
        with self._lock:
            if self._closed:
                worker.kill()
                return
            self._all.add(worker)
        self._idle.put(worker)

    def _replace(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
            self.restarts += 1
        threading.Thread(target=lambda: (worker.kill(), self._add_worker()), daemon=True, name="math-worker-restart").start()

    def run(self, task: Any, deadline: float) -> PoolResult:
        """Run ``task`` in a worker; give up at ``deadline`` (``time.monotonic()``)."""
        self.start()
        for _attempt in range(3):  # retries if the worker died under us (killed, OOM)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return PoolResult("timeout", detail="deadline passed before a worker was free")
            try:
                worker = self._idle.get(timeout=remaining)
            except queue.Empty:
                return PoolResult("timeout", detail="no worker free before the deadline")
            if not worker.process.is_alive():  # died while idle (killed, OOM killer)
                self._replace(worker)
                continue
            try:
                worker.conn.send(task)
                if worker.conn.poll(max(0.0, deadline - time.monotonic())):
                    value = worker.conn.recv()
                    self._idle.put(worker)
                    return PoolResult("ok", value)
            except (EOFError, OSError, BrokenPipeError) as exc:
                log.warning("math worker %s died during a check: %r", worker.process.pid, exc)
                self._replace(worker)
                continue
            self._replace(worker)  # deadline: kill it, a fresh one takes its place
            return PoolResult("timeout", detail="check killed at the deadline")
        return PoolResult("crashed", detail="workers kept dying")

    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._all if w.process.pid is not None]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()


def default_pool_size() -> int:
    env = os.environ.get("COHORT_MATH_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(8, os.cpu_count() or 1))
