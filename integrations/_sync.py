"""A :class:`VerifierClient` for trainers that call their reward synchronously (TRL, verl).

The client is asyncio/grpc.aio; it lives on the one private event loop thread of every blocking
Cohort caller (:class:`cohort.rpc.loop.BackgroundLoop`, shared with the trainer's scorer), started
here and stopped by :meth:`SyncScorer.close` (or at interpreter exit). Every
public call blocks the caller until the loop answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from cohort.rpc.loop import BackgroundLoop
from cohort.verifiers.base import GroupRequest, GroupResult
from cohort.verifiers.client import ScoredRollout, ScoreRequest, VerifierClient, WeightedVerifier


class SyncScorer:
    """Blocking ``score`` / ``handshake`` over a :class:`VerifierClient` on a private event loop thread.

    >>> scorer = SyncScorer([WeightedVerifier("math", 1.0, ["127.0.0.1:50051"])])  # doctest: +SKIP
    >>> scorer.handshake()  # doctest: +SKIP
    >>> scorer.score([ScoreRequest("q1", (Rollout(0, "\\\\boxed{4}"),), Reference(answer="4"))])  # doctest: +SKIP
    >>> scorer.close()  # doctest: +SKIP
    """

    def __init__(self, verifiers: Sequence[WeightedVerifier], *, timeout_s: float = 60.0, retries: int = 4) -> None:
        self._bg = BackgroundLoop("cohort-verifier-loop")
        try:
            self.client = VerifierClient(list(verifiers), timeout_s=timeout_s, retries=retries)
        except BaseException:
            self._bg.close()
            raise
        self._bg.on_close(self.client.close)

    @property
    def closed(self) -> bool:
        return self._bg.closed

    def handshake(self, timeout_s: float = 10.0) -> dict[str, str]:
        """``ListVerifiers`` everywhere; raises :class:`~cohort.verifiers.client.HandshakeError` if a verifier is served nowhere."""
        return self._bg.run(self.client.handshake(timeout_s))

    def score(self, requests: Sequence[ScoreRequest]) -> list[list[ScoredRollout]]:
        """Every request scored by every configured verifier, combined with the verifiers' weights."""
        return self._bg.run(self.client.score(requests))

    def verify_groups(self, groups: Sequence[GroupRequest]) -> list[GroupResult]:
        """Groups for any mix of the configured verifiers; results in request order."""
        return self._bg.run(self.client.verify_groups(groups))

    @property
    def thread(self):  # noqa: ANN201
        return self._bg.thread

    def close(self) -> None:
        """Close the channels, stop the loop and join its thread. Idempotent."""
        self._bg.close()
