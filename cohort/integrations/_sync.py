"""A :class:`VerifierClient` for trainers that call their reward synchronously (TRL, verl).

The client is asyncio/grpc.aio. Calling ``asyncio.run`` per batch would build and tear down channels
on every call and fails inside a thread that already runs a loop (Jupyter, some trainers), so the
client lives on one private event loop in one daemon thread, started here and stopped by
:meth:`SyncScorer.close` (or a ``with`` block, or at interpreter exit through ``weakref.finalize``).
Every public call blocks the caller until the loop answers.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

from cohort.verifiers.base import GroupRequest, GroupResult
from cohort.verifiers.client import ScoredRollout, ScoreRequest, VerifierClient, WeightedVerifier

ENDPOINTS_ENV = "COHORT_VERIFIER_ENDPOINTS"


def parse_endpoints(spec: str | Mapping[str, str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """``"math=10.0.0.5:50051,math=10.0.0.6:50051,code=127.0.0.1:50052"`` (repeat a name for replicas),
    or a mapping ``{"math": ["10.0.0.5:50051"], "code": "127.0.0.1:50052"}``, to ``{name: addresses}``."""
    out: dict[str, list[str]] = {}
    if isinstance(spec, str):
        for item in (s.strip() for s in spec.replace(";", ",").split(",")):
            if not item:
                continue
            name, sep, address = item.partition("=")
            if not sep or not name.strip() or not address.strip():
                raise ValueError(f"verifier endpoints: expected NAME=HOST:PORT, got {item!r} in {spec!r}")
            out.setdefault(name.strip(), []).append(address.strip())
    elif isinstance(spec, Mapping):
        for name, addresses in spec.items():
            addresses = [addresses] if isinstance(addresses, str) else list(addresses)
            if not addresses or not all(isinstance(a, str) and a for a in addresses):
                raise ValueError(f"verifier endpoints: {name!r} needs one or more 'HOST:PORT' strings, got {addresses!r}")
            out[str(name)] = addresses
    else:
        raise TypeError(f"verifier endpoints: expected 'NAME=HOST:PORT,...' or a mapping, got {type(spec).__name__}")
    for name, addresses in out.items():
        for a in addresses:
            host, sep, port = a.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"verifier endpoints: {name}={a!r} is not HOST:PORT")
    if not out:
        raise ValueError(f"verifier endpoints: none given ({spec!r})")
    return {name: tuple(a) for name, a in out.items()}


def endpoints_from_env() -> dict[str, tuple[str, ...]]:
    spec = os.environ.get(ENDPOINTS_ENV, "")
    if not spec.strip():
        raise ValueError(f"no verifier endpoints: pass them in the configuration or set {ENDPOINTS_ENV}="
                         "'NAME=HOST:PORT,...' (e.g. 'math=127.0.0.1:50051,code=127.0.0.1:50052')")
    return parse_endpoints(spec)


def _shutdown(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: VerifierClient | None) -> None:
    if loop.is_closed():
        return
    if client is not None and thread.is_alive():
        try:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        except Exception:  # noqa: BLE001  (closing channels of a loop that is going away: nothing left to do)
            pass
    if thread.is_alive():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
    if not thread.is_alive():
        loop.close()


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
