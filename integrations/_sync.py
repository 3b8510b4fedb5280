"""A :class:`VerifierClient` for trainers that call their reward synchronously (TRL, verl).

The client is asyncio/grpc.aio. Calling ``asyncio.run`` per batch would build and tear down channels
on every call and fails inside a thread that already runs a loop (Jupyter, some trainers), so the
client lives on one private event loop in one daemon thread, started here and stopped by
:meth:`SyncScorer.close` (or a ``with`` block, or at interpreter exit through ``weakref.finalize``).
Every public call blocks the caller until the loop answers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future

from cohort.verifiers.base import GroupRequest, GroupResult
from cohort.verifiers.client import ScoredRollout, ScoreRequest, VerifierClient, WeightedVerifier

log = logging.getLogger("cohort.integrations")


def _shutdown(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: VerifierClient | None) -> None:
    if loop.is_closed():
        return
    if client is not None and thread.is_alive():
        try:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        except Exception as exc:  # noqa: BLE001  (closing: the loop stops below whatever happened)
            log.warning("closing the verifier client's channels failed: %r", exc)
    if thread.is_alive():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
    if not thread.is_alive():
        try:
            loop.close()
        except RuntimeError:  # a forked child: the loop "runs" in a thread that does not exist here
            pass


class SyncScorer:
    """Blocking ``score`` / ``handshake`` over a :class:`VerifierClient` on a private event loop thread.

    >>> with SyncScorer([WeightedVerifier("math", 1.0, ["127.0.0.1:50051"])]) as scorer:  # doctest: +SKIP
    ...     scorer.handshake()
    ...     scorer.score([ScoreRequest("q1", (Rollout(0, "\\\\boxed{4}"),), Reference(answer="4"))])
    """

    def __init__(self, verifiers: Sequence[WeightedVerifier], *, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 0.05) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cohort-verifier-loop", daemon=True)
        self._thread.start()
        try:
            self.client = VerifierClient(list(verifiers), timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        except BaseException:
            _shutdown(self._loop, self._thread, None)
            raise
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._thread, self.client)
        self._pid = os.getpid()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _run(self, coro):  # type: ignore[no-untyped-def]
        if self.closed:
            coro.close()
            raise RuntimeError("this Cohort verifier client is closed")
        if os.getpid() != self._pid:
            coro.close()
            raise RuntimeError("this Cohort verifier client was created in another process (fork): create one per process")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SyncScorer called from its own event loop thread")
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def handshake(self, timeout_s: float = 10.0) -> dict[str, str]:
        """``ListVerifiers`` everywhere; raises :class:`~cohort.verifiers.client.HandshakeError` if a verifier is served nowhere."""
        return self._run(self.client.handshake(timeout_s))

    def score(self, requests: Sequence[ScoreRequest]) -> list[list[ScoredRollout]]:
        """Every request scored by every configured verifier, combined with the verifiers' weights."""
        return self._run(self.client.score(requests))

    def verify_groups(self, groups: Sequence[GroupRequest]) -> list[GroupResult]:
        """Groups for any mix of the configured verifiers; results in request order."""
        return self._run(self.client.verify_groups(groups))

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self) -> None:
        """Close the channels, stop the loop and join its thread. Idempotent."""
        self._finalizer()

    def __enter__(self) -> SyncScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
