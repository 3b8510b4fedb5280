"""The one retry/failover policy (rpc/retry.py): the schedule as numbers, no servers."""

from __future__ import annotations

import random
import time

import grpc
import pytest

from cohort.rpc.retry import RETRYABLE, Failover, RetryPolicy


def test_retryable_codes_never_include_the_requests_fault():
    assert {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED} <= RETRYABLE
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED,
                 grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OK):
        assert not RetryPolicy.retryable(code), code


def test_backoff_is_zero_inside_a_round_then_doubles_with_jitter_and_a_cap():
    policy = RetryPolicy(attempts=9, backoff_s=0.1, max_backoff_s=0.3)

    class Half(random.Random):
        def random(self) -> float:  # jitter factor 0.5 + 0.5 = 1.0
            return 0.5

    rng = Half()
    assert [policy.backoff(k, 2, rng) for k in range(9)] == [0.0, 0.0, 0.1, 0.0, 0.2, 0.0, 0.3, 0.0, 0.3]
    assert [policy.backoff(k, 1, rng) for k in range(4)] == [0.0, 0.1, 0.2, 0.3]
    lo, hi = min(policy.backoff(2, 2) for _ in range(200)), max(policy.backoff(2, 2) for _ in range(200))
    assert 0.05 <= lo < 0.08 and 0.12 < hi <= 0.15  # jitter x0.5 .. x1.5


def test_attempt_timeout_splits_what_is_left_over_the_untried_endpoints():
    policy = RetryPolicy()
    assert policy.attempt_timeout(0, 6.0, 2) == 3.0  # first of two replicas: half
    assert policy.attempt_timeout(1, 3.0, 2) == 3.0  # the last untried one: all that is left
    assert policy.attempt_timeout(2, 2.0, 2) == 1.0  # next round: half again
    assert policy.attempt_timeout(0, 6.0, 1) == 6.0  # one endpoint: the whole deadline (as before)
    fixed = RetryPolicy(attempt_timeout_s=1.5)
    assert fixed.attempt_timeout(0, 6.0, 2) == 1.5 and fixed.attempt_timeout(0, 0.4, 2) == 0.4  # never past the deadline
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(attempt_timeout_s=0)


def test_rotation_is_round_robin_and_a_failed_endpoint_goes_last():
    f = Failover(3, RetryPolicy(penalty_s=60))
    assert [f.rotation() for _ in range(3)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    f.failed(1)
    assert f.rotation() == [0, 2, 1] and f.rotation() == [2, 0, 1] and f.rotation() == [2, 0, 1]
    f.succeeded(1)
    assert f.rotation() == [0, 1, 2]


def test_attempts_stop_at_the_count_and_at_the_deadline():
    f = Failover(2, RetryPolicy(attempts=5, backoff_s=0.0))
    plan = list(f.attempts(time.monotonic() + 60))
    assert [a.endpoint for a in plan] == [0, 1, 0, 1, 0] and [a.number for a in plan] == list(range(5))
    assert 29 < plan[0].timeout() <= 30  # half of the 60 s for the first of two
    assert list(f.attempts(time.monotonic() - 1)) == []  # nothing once the deadline has passed
    late = next(Failover(1, RetryPolicy(backoff_s=10)).attempts(time.monotonic() + 0.2))
    assert late.timeout() <= 0.2
    g = Failover(1, RetryPolicy(backoff_s=10))
    it = g.attempts(time.monotonic() + 0.5)
    next(it)
    assert next(it).backoff_s < 0.5  # a backoff never sleeps past the deadline


def test_a_preferred_endpoint_comes_first_until_it_fails():
    f = Failover(3, RetryPolicy(attempts=3, penalty_s=60))
    assert f.rotation(start=2) == [2, 0, 1] and f.rotation(start=5) == [2, 0, 1]
    assert [a.endpoint for a in f.attempts(time.monotonic() + 10, start=1)] == [1, 2, 0]
    f.failed(2)
    assert f.rotation(start=2) == [0, 1, 2]  # penalised: its calls go to the next replica meanwhile
