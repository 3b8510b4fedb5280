"""One private asyncio event loop in one daemon thread: how blocking code drives asyncio code, written once:
the blocking verifier client (:mod:`cohort.verifiers.blocking`: the trainer's scorer, the TRL, verl, ORS and
NeMo-Gym adapters) and the LLM judge's back-ends (the verifier server's threads calling ``httpx``).

Calling ``asyncio.run`` per batch would build and tear down channels on every call and fails inside a
thread that already runs a loop (Jupyter, some trainers). Here the loop starts once; :meth:`submit`
returns a ``concurrent.futures.Future`` at once and :meth:`run` blocks until the loop answers. It is
stopped by :meth:`close` (idempotent), or at garbage collection / interpreter exit through
``weakref.finalize``, after an optional closing coroutine (e.g. the client's ``close``). A loop made
before a ``fork`` cannot be used in the child (its thread does not exist there): that is an error
naming the fix, never a hang.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

log = logging.getLogger("cohort.rpc.loop")

Closer = Callable[[], Coroutine[Any, Any, Any]]


def _shutdown(loop: asyncio.AbstractEventLoop, thread: threading.Thread, closers: list[Closer]) -> None:
    if loop.is_closed():
        return
    if thread.is_alive():
        for closer in closers:
            try:
                asyncio.run_coroutine_threadsafe(closer(), loop).result(timeout=10)
            except Exception as exc:  # noqa: BLE001  (closing: the loop stops below whatever happened)
                log.warning("closing on the event loop failed: %r", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
    if not thread.is_alive():
        try:
            loop.close()
        except RuntimeError:  # a forked child: the loop "runs" in a thread that does not exist here
            pass


class BackgroundLoop:
    """An event loop on its own daemon thread; ``on_close`` coroutines run on it before it stops."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        self._pid = os.getpid()
        self._closers: list[Closer] = []
        self._finalizer = weakref.finalize(self, _shutdown, self.loop, self.thread, self._closers)

    def on_close(self, closer: Closer) -> None:
        """Run ``closer()`` on the loop when it closes (before it stops)."""
        self._closers.append(closer)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def submit(self, coro: Coroutine) -> Future:
        """Schedule ``coro`` on the loop; its result as a ``concurrent.futures.Future``."""
        problem = None
        if self.closed:
            problem = "is closed"
        elif os.getpid() != self._pid:
            problem = "was created in another process (fork): create one per process"
        elif threading.current_thread() is self.thread:
            problem = "was called from its own event loop thread (a blocking call there would never return)"
        if problem is not None:
            coro.close()
            raise RuntimeError(f"the event loop thread {self.name!r} {problem}")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine) -> Any:
        """Run ``coro`` on the loop and block until it answers."""
        return self.submit(coro).result()

    def close(self) -> None:
        """Run the closers, stop the loop and join its thread. Idempotent."""
        self._finalizer()
