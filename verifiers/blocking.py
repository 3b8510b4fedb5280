"""The blocking adapter of :class:`~cohort.verifiers.client.VerifierClient`, written once for every caller that
scores synchronously: the trainer's scorer, the TRL, verl, ORS and NeMo-Gym adapters.

The client is asyncio/grpc.aio; it lives on a private event loop thread (:class:`cohort.rpc.loop.BackgroundLoop`)
started here and stopped by :meth:`BlockingClient.close` (or at interpreter exit). :meth:`BlockingClient.submit`
returns a ``concurrent.futures.Future`` at once; the other calls block until the loop answers.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any

from cohort.rpc.loop import BackgroundLoop
from cohort.verifiers.base import GroupRequest, GroupResult
from cohort.verifiers.client import VerifierClient, WeightedVerifier
from cohort.verifiers.combine import ScoredRollout
from cohort.verifiers.records import Record


class BlockingClient:
    """A :class:`VerifierClient` on its own event loop thread; ``client_options`` go to the client.

    >>> client = BlockingClient([WeightedVerifier("math", 1.0, ["127.0.0.1:50051"])])  # doctest: +SKIP
    >>> client.handshake()  # doctest: +SKIP
    >>> row = Record(Task("q1", "2+2=?", Reference(answer="4")), (Rollout(0, "\\\\boxed{4}"),))  # doctest: +SKIP
    >>> client.score([row])  # doctest: +SKIP
    >>> client.close()  # doctest: +SKIP
    """

    def __init__(self, verifiers: Sequence[WeightedVerifier], *, thread_name: str = "cohort-verifier-loop",
                 **client_options: Any) -> None:
        self._bg = BackgroundLoop(thread_name)
        try:
            self.client = VerifierClient(list(verifiers), **client_options)  # channels open on the loop, on first use
        except BaseException:
            self._bg.close()
            raise
        self._bg.on_close(self.client.close)

    @property
    def closed(self) -> bool:
        return self._bg.closed

    @property
    def thread(self):  # noqa: ANN201
        return self._bg.thread

    def submit(self, coro: Coroutine) -> Future:
        """Run ``coro`` (one using :attr:`client`) on the client's loop; its result as a ``Future``, at once."""
        return self._bg.submit(coro)

    def handshake(self, timeout_s: float = 10.0) -> dict[str, str]:
        """``ListVerifiers`` everywhere; :class:`~cohort.verifiers.client.HandshakeError` if a verifier is served
        nowhere."""
        return self._bg.run(self.client.handshake(timeout_s))

    def score(self, rows: Sequence[Record], **options: Any) -> list[list[ScoredRollout]]:
        """:meth:`VerifierClient.score` (route, fan out, combine), blocking."""
        return self._bg.run(self.client.score(rows, **options))

    def verify_groups(self, groups: Sequence[GroupRequest]) -> list[GroupResult]:
        """Groups for any mix of the configured verifiers; results in request order."""
        return self._bg.run(self.client.verify_groups(groups))

    def close(self) -> None:
        """Close the channels, stop the loop and join its thread. Idempotent."""
        self._bg.close()
