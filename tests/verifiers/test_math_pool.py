"""The math verifier's worker pool: deadlines, killed workers, concurrency (real processes, no mocks)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.math import MathVerifier

# Takes SymPy tens of seconds (checked by hand: ~37 s): a reliable "busy worker".
SLOW_GOLD = "\\sum_{k=1}^{n} \\frac{k^3}{(k+1)(k+2)}"
SLOW_ANSWER = "\\boxed{\\sum_{j=1}^{n} \\frac{j^3}{(j+2)(j+1)}}"

# (gold, response, expected CORRECT) needing SymPy (not decided by the cheap pass)
SYMPY_CASES = [
    ("(x+1)^2", "\\boxed{x^2+2x+1}", True),
    ("(x+1)^2", "\\boxed{x^2+2x+2}", False),
    ("\\sqrt{12}", "\\boxed{2\\sqrt{3}}", True),
    ("\\sqrt{12}", "\\boxed{3\\sqrt{2}}", False),
    ("\\frac{\\pi}{4}", "\\boxed{\\frac{\\pi}{2}\\cdot\\frac{1}{2}}", True),
    ("\\tan^2 x + 1", "\\boxed{\\sec^2 x}", True),
    ("2x + 3y = 6", "\\boxed{y = 2 - \\frac{2}{3}x}", True),
    ("2x + 3y = 6", "\\boxed{y = 2 + \\frac{2}{3}x}", False),
]


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=2)
    v.pool.start()
    yield v
    v.close()


def _group(gold: str, responses: list[str], timeout: float = 10.0, gid: str = "") -> GroupRequest:
    return GroupRequest("math", tuple(Rollout(i, r) for i, r in enumerate(responses)), Reference(answer=gold), gid, rollout_timeout_s=timeout)


def _wait_for_workers(v: MathVerifier, n: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = v.pool.pids()
        if len(pids) == n and v.pool._idle.qsize() == n:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"pool did not come back to {n} idle workers: {v.pool.pids()}")


def _slack(slowdown, idle_s: float) -> float:
    """``idle_s`` on an idle machine, scaled by how loaded it is just now (as test_math_pathological's)."""
    return idle_s * (1.0 + 1.5 * (max(1.0, slowdown()) - 1.0))


def test_deadline_gives_timeout_status_not_incorrect(verifier, slowdown):
    t0 = time.monotonic()
    (result,) = verifier.verify_group(_group(SLOW_GOLD, [SLOW_ANSWER], timeout=0.5), VerifyContext())
    elapsed = time.monotonic() - t0
    assert result.status is RolloutStatus.VERIFIER_TIMEOUT and result.verdict is Verdict.UNSPECIFIED
    # the check's budget, then the two attribution probes (gold and answer alone, in parallel, each under the
    # same budget; issue 29): the gold alone is over it, so the rollout stays masked. A replacement worker's
    # start-up is not charged to a budget, so the slack grows with the machine's load
    assert elapsed < 3 * 0.5 + _slack(slowdown, 0.5), elapsed
    _wait_for_workers(verifier, 2)


def test_ctx_deadline_wins_over_rollout_timeout(verifier, slowdown):
    t0 = time.monotonic()
    (result,) = verifier.verify_group(_group(SLOW_GOLD, [SLOW_ANSWER], timeout=10), VerifyContext(deadline=time.monotonic() + 0.4))
    assert result.status is RolloutStatus.VERIFIER_TIMEOUT
    assert time.monotonic() - t0 < 0.4 + _slack(slowdown, 0.1)
    _wait_for_workers(verifier, 2)


def test_killed_worker_mid_check_is_replaced(verifier):
    _wait_for_workers(verifier, 2)
    before = set(verifier.pool.pids())
    restarts = verifier.pool.restarts
    box: dict = {}

    def run():
        box["results"] = verifier.verify_group(_group(SLOW_GOLD, [SLOW_ANSWER], timeout=3.0), VerifyContext())

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)  # the check is now running in one of the workers
    idle = {w.process.pid for w in list(verifier.pool._idle.queue)}
    (victim,) = before - idle  # the busy one
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=10)
    assert not thread.is_alive()
    (result,) = box["results"]
    # never scored as a wrong answer: the retry on the other worker runs out of time
    assert result.status in (RolloutStatus.VERIFIER_TIMEOUT, RolloutStatus.VERIFIER_ERROR), result
    after = set(_wait_for_workers(verifier, 2))
    assert victim not in after and verifier.pool.restarts > restarts
    # and the pool still scores correctly
    results = verifier.verify_group(_group("(x+1)^2", ["\\boxed{x^2+2x+1}", "\\boxed{x^2+1}"]), VerifyContext())
    assert [r.reward for r in results] == [1.0, 0.0] and all(r.status is RolloutStatus.OK for r in results)


def test_concurrent_requests_match_serial_verdicts(verifier):
    serial = []
    for gold, response, expected in SYMPY_CASES:
        (r,) = verifier.verify_group(_group(gold, [response]), VerifyContext())
        assert r.status is RolloutStatus.OK and (r.verdict is Verdict.CORRECT) == expected, (gold, response, r)
        serial.append((r.status, r.verdict, r.reward))
    fresh = MathVerifier(workers=2, cache_size=0)  # no cache: every concurrent call really runs
    try:
        results: dict[int, tuple] = {}
        errors: list[BaseException] = []

        def call(k: int) -> None:
            gold, response, _ = SYMPY_CASES[k % len(SYMPY_CASES)]
            try:
                (r,) = fresh.verify_group(_group(gold, [response], timeout=30, gid=str(k)), VerifyContext())
                results[k] = (r.status, r.verdict, r.reward)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        assert len(results) == 48
        for k, got in results.items():
            assert got == serial[k % len(SYMPY_CASES)], (k, got)
    finally:
        fresh.close()


def test_group_with_many_distinct_answers_runs_in_parallel(verifier):
    responses = [f"\\boxed{{(x+{k})^2 - {k * k}}}" for k in range(1, 7)]
    results = verifier.verify_group(_group("x^2 + 2x", responses), VerifyContext())
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert all(r.status is RolloutStatus.OK for r in results)


def test_worker_killed_while_idle_is_replaced_on_use(verifier):
    pids = _wait_for_workers(verifier, 2)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    results = verifier.verify_group(_group("(x+2)^2", ["\\boxed{x^2+4x+4}", "\\boxed{x^2+4}"]), VerifyContext())
    assert [(r.status, r.reward) for r in results] == [(RolloutStatus.OK, 1.0), (RolloutStatus.OK, 0.0)]
    assert not set(_wait_for_workers(verifier, 2)) & set(pids)


def test_workers_run_under_a_memory_cap(verifier):
    for pid in _wait_for_workers(verifier, 2):
        limits = open(f"/proc/{pid}/limits").read()
        line = next(ln for ln in limits.splitlines() if ln.startswith("Max address space"))
        assert line.split()[3] == str(1536 * 1024 * 1024), line


def test_close_stops_workers():
    v = MathVerifier(workers=1)
    v.pool.start()
    pids = _wait_for_workers(v, 1)
    v.close()
    time.sleep(0.2)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
