"""The one retry/failover policy of every Cohort gRPC client (the async verifier client and the sync
sandbox client inside the code verifier).

- Endpoints are tried in round-robin order; an endpoint that just failed goes to the back of the
  rotation for ``penalty_s`` (a frozen replica is not the first choice of the next call).
- Each attempt gets its own timeout: ``attempt_timeout_s``, never more than what is left of the
  call's overall deadline. A frozen (SIGSTOPped) replica therefore costs one attempt, not the whole
  deadline, and failover to a healthy replica happens in time.
- Retryable codes (:data:`RETRYABLE`) fail over to the next endpoint; once every endpoint has been
  tried, the next round waits an exponential, jittered backoff (RESOURCE_EXHAUSTED is a server
  shedding load: it must be given time). Any other code (INVALID_ARGUMENT first) is the request's
  fault: never retried, the caller maps it.

Why in-house rather than gRPC's service-config retries or ``tenacity``: gRPC retries stay inside one
channel (one target), never retry DEADLINE_EXCEEDED and have no per-attempt timeout in the Python
(C-core) stack, so they cannot move a call off a frozen replica; ``round_robin`` keeps a stopped
replica READY as long as its TCP connection stays up. ``tenacity`` would supply the backoff only:
the rotation, the per-attempt deadline and the code classes would still be ours, in two styles (sync
and async callbacks). The schedule here is a pure function of the clock, tested without servers.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
"""Codes that say "this endpoint, now" rather than "this request": fail over and retry."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    """Calls in all (the first plus retries), across endpoints."""
    backoff_s: float = 0.05
    """Wait before the second round over the endpoints; doubles each round, jittered x0.5..1.5."""
    max_backoff_s: float = 5.0
    attempt_timeout_s: float | None = None
    """Timeout of one attempt; None: what is left of the deadline split evenly over the endpoints still
    to try in this round (with two replicas the first gets half, the second all that is left)."""
    penalty_s: float = 5.0
    """How long an endpoint that failed goes to the back of the rotation."""

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff_s < 0 or self.max_backoff_s < 0 or self.penalty_s < 0:
            raise ValueError("attempts must be >= 1 and backoff_s, max_backoff_s, penalty_s >= 0")
        if self.attempt_timeout_s is not None and self.attempt_timeout_s <= 0:
            raise ValueError("attempt_timeout_s must be > 0 (or None)")

    @staticmethod
    def retryable(code: grpc.StatusCode) -> bool:
        return code in RETRYABLE

    def backoff(self, attempt: int, n_endpoints: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before ``attempt`` (0-based): 0 inside the first round, then exponential."""
        if attempt == 0 or attempt % n_endpoints:
            return 0.0
        jitter = 0.5 + (rng or random).random()
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt // n_endpoints - 1)) * jitter

    def attempt_timeout(self, attempt: int, remaining_s: float, n_endpoints: int) -> float:
        """Timeout of ``attempt`` (0-based): the configured one, or what is left over the endpoints still
        to try in this round; never more than what is left."""
        untried = n_endpoints - attempt % n_endpoints
        per = self.attempt_timeout_s if self.attempt_timeout_s is not None else remaining_s / untried
        return max(0.001, min(per, remaining_s))


@dataclass(frozen=True)
class Attempt:
    number: int
    """0-based."""
    endpoint: int
    """Index into the caller's endpoint list."""
    backoff_s: float
    """Sleep this long before calling (the caller sleeps: ``time.sleep`` or ``asyncio.sleep``); never
    past the deadline."""
    deadline: float
    """The overall deadline (``time.monotonic()``)."""
    policy: RetryPolicy
    n_endpoints: int

    def timeout(self) -> float | None:
        """This attempt's timeout, read after the backoff; None once the overall deadline has passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        return self.policy.attempt_timeout(self.number, remaining, self.n_endpoints)


class Failover:
    """Rotation state of one set of endpoints (thread-safe; one per client per verifier / sandbox)."""

    def __init__(self, n_endpoints: int, policy: RetryPolicy) -> None:
        if n_endpoints < 1:
            raise ValueError("no endpoints")
        self.n = n_endpoints
        self.policy = policy
        self._next = itertools.count()
        self._penalised_until = [0.0] * n_endpoints
        self._lock = threading.Lock()

    def rotation(self, start: int | None = None) -> list[int]:
        """Round-robin order starting at ``start`` (a caller's preferred endpoint) or else at the next endpoint;
        recently failed endpoints last."""
        start = next(self._next) % self.n if start is None else start % self.n
        order = [(start + k) % self.n for k in range(self.n)]
        now = time.monotonic()
        with self._lock:
            return sorted(order, key=lambda i: self._penalised_until[i] > now)

    def failed(self, endpoint: int) -> None:
        with self._lock:
            self._penalised_until[endpoint] = time.monotonic() + self.policy.penalty_s

    def succeeded(self, endpoint: int) -> None:
        with self._lock:
            self._penalised_until[endpoint] = 0.0

    def attempts(self, deadline: float, start: int | None = None) -> Iterator[Attempt]:
        """The attempts of one call, in order (from ``start`` when given, see :meth:`rotation`); stops after
        ``policy.attempts`` or at the deadline."""
        order = self.rotation(start)
        for k in range(self.policy.attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            backoff = min(self.policy.backoff(k, self.n), max(0.0, remaining - 0.01))
            yield Attempt(k, order[k % self.n], backoff, deadline, self.policy, self.n)


# ---- the one failover loop ------------------------------------------------------------------------

T = TypeVar("T")


class RequestRejected(Exception):
    """A non-retryable code: the request's fault (INVALID_ARGUMENT first), never retried; the caller maps it."""

    def __init__(self, endpoint: int, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.endpoint, self.code, self.details = endpoint, code, details


class Exhausted(Exception):
    """Every attempt failed with a retryable code, or the deadline passed: the endpoints are unavailable."""

    def __init__(self, errors: list[tuple[int, str]], deadline_passed: bool) -> None:
        self.errors, self.deadline_passed = errors, deadline_passed
        super().__init__(f"{len(errors)} attempt(s) failed" + ("; deadline passed" if deadline_passed else ""))


def short_error(exc: grpc.RpcError) -> str:
    """``CODE: the first line of the details``, at most 160 characters (gRPC's strings run to kilobytes)."""
    details = (exc.details() or "").strip().splitlines()
    text = f"{exc.code().name}: {details[0] if details else ''}".rstrip(": ")
    return text if len(text) <= 160 else text[:157] + "..."


async def call_with_failover(failover: Failover, deadline: float,
                             invoke: Callable[[int, float], Awaitable[T]],
                             sleep: Callable[[float], Awaitable[Any]], start: int | None = None) -> T:
    """The failover loop of every Cohort client, written once: ``invoke(endpoint, timeout)`` per attempt
    of :meth:`Failover.attempts`, after ``sleep(backoff)``; a retryable ``grpc.RpcError`` fails over, any
    other raises :class:`RequestRejected`; all attempts spent (or the deadline passed) raise
    :class:`Exhausted`. The async client awaits it with ``asyncio.sleep``; blocking callers drive it with
    :func:`run_blocking` and an ``invoke``/``sleep`` that never suspend. ``start``: the endpoint to try
    first, while it is not penalised (a caller that keeps related calls on one replica)."""
    errors: list[tuple[int, str]] = []
    for attempt in failover.attempts(deadline, start):
        if attempt.backoff_s:
            await sleep(attempt.backoff_s)
        timeout = attempt.timeout()
        if timeout is None:
            break
        try:
            result = await invoke(attempt.endpoint, timeout)
        except grpc.RpcError as exc:
            if not failover.policy.retryable(exc.code()):
                raise RequestRejected(attempt.endpoint, exc.code(), exc.details() or "") from None
            failover.failed(attempt.endpoint)
            errors.append((attempt.endpoint, short_error(exc)))
            continue
        failover.succeeded(attempt.endpoint)
        return result
    raise Exhausted(errors, time.monotonic() >= deadline)


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (everything it awaits returns at once) on this thread, without
    an event loop: how one coroutine serves both the blocking and the asyncio callers."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a blocking call suspended")
