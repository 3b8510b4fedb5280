"""The one killable worker pool (``verifiers/hosting/workers.py``), driven directly: real processes running the
math verifier's worker body, on a thread and on an event loop. The math verifier's and the scoring
processes' own tests (test_math_pool.py, test_scoring_procs.py) cover it through them."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from cohort.verifiers.math import _worker
from cohort.verifiers.math.outcome import Compared
from cohort.verifiers.hosting import workers
from cohort.verifiers.hosting.workers import WorkerPool

SLOW = ("\\sum_{k=1}^{n} \\frac{k^3}{(k+1)(k+2)}", ("\\sum_{j=1}^{n} \\frac{j^3}{(j+2)(j+1)}",))  # tens of seconds of SymPy
QUICK = ("(x+1)^2", ("x^2+2x+1",))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return stat[0] != "Z"


def _wait_idle(pool: WorkerPool, n: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(pool.pids()) == n and pool._idle.qsize() == n:
            return pool.pids()
        time.sleep(0.05)
    raise AssertionError(f"pool did not come back to {n} idle workers: {pool.pids()}")


@pytest.fixture
def pool():
    p = WorkerPool(_worker.setup, (1536 << 20,), 1, start_method="spawn", name="test-worker")
    p.start(ready_timeout_s=120)
    yield p
    p.close()


def test_a_task_past_its_deadline_kills_its_worker_and_the_next_task_is_answered(pool):
    (first,) = _wait_idle(pool, 1)
    t0 = time.monotonic()
    out = pool.run(SLOW, time.monotonic() + 0.5)
    assert out.kind == "timeout" and time.monotonic() - t0 < 2.0
    assert pool.restarts == 1
    (second,) = _wait_idle(pool, 1)
    assert second != first and not _alive(first)
    ok = pool.run(QUICK, time.monotonic() + 60)
    assert ok.kind == "ok" and ok.value == Compared(True, ok.value.how)


def test_a_cancelled_call_on_the_event_loop_kills_its_worker(pool):
    (first,) = _wait_idle(pool, 1)

    async def cancel_after(seconds: float):
        task = asyncio.ensure_future(pool.run_async(SLOW, time.monotonic() + 600))
        await asyncio.sleep(seconds)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after(0.5))
    assert pool.restarts == 1
    _wait_idle(pool, 1)
    assert not _alive(first)
    assert asyncio.run(pool.run_async(QUICK, time.monotonic() + 60)).value.equal is True


def test_a_worker_killed_mid_task_is_crashed_with_one_try(pool):
    (first,) = _wait_idle(pool, 1)

    async def run():
        async def kill_soon():
            await asyncio.sleep(0.5)
            os.kill(first, signal.SIGKILL)

        return (await asyncio.gather(pool.run_async(SLOW, time.monotonic() + 60), kill_soon()))[0]

    out = asyncio.run(run())
    assert out.kind == "crashed"  # one try (the default): the task is not run again
    assert pool.restarts == 1
    assert _wait_idle(pool, 1) != [first]


def test_with_more_tries_a_task_whose_worker_died_runs_again():
    retried = WorkerPool(_worker.setup, (1536 << 20,), 1, start_method="spawn", name="test-worker", attempts=3)
    retried.start(ready_timeout_s=120)
    try:
        (victim,) = _wait_idle(retried, 1)
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()
        t0 = time.monotonic()
        out = retried.run(SLOW, time.monotonic() + 4.0)
        # killed at 0.5 s, run again on the replacement, which is killed at the deadline
        assert out.kind == "timeout" and 3.5 < time.monotonic() - t0 < 6.0
        assert retried.restarts == 2
        (idle_victim,) = _wait_idle(retried, 1)
        os.kill(idle_victim, signal.SIGKILL)
        while _alive(idle_victim):
            time.sleep(0.05)
        ok = retried.run(QUICK, time.monotonic() + 60)  # found dead while idle: replaced, not counted as a try
        assert ok.kind == "ok" and ok.value == Compared(True, ok.value.how) and retried.restarts == 3
    finally:
        retried.close()


def test_a_setup_that_never_says_ready_fails_the_start():
    p = WorkerPool(os._exit, (3,), 1, start_method="spawn", name="test-worker")
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            p.start(ready_timeout_s=60)
    finally:
        p.close()


def test_fork_is_refused():
    with pytest.raises(ValueError, match="fork"):
        WorkerPool(_worker.setup, (0,), 1, start_method="fork")


def test_event_loop_callers_queue_for_a_busy_worker_and_give_up_at_their_deadline(pool):
    """One worker, three calls at once: two are served in turn, one waits past its deadline and times
    out without a worker being killed; the pool ends with its worker idle."""
    (only,) = _wait_idle(pool, 1)

    async def three():
        now = time.monotonic()
        return await asyncio.gather(pool.run_async(QUICK, now + 60), pool.run_async(QUICK, now + 60),
                                    pool.run_async(QUICK, now + 0.001))

    first, second, late = asyncio.run(three())
    assert first.kind == second.kind == "ok" and first.value.equal is second.value.equal is True
    assert late.kind == "timeout" and "no worker free" in late.detail
    assert pool.restarts == 0 and _wait_idle(pool, 1) == [only]


def _start_failures(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "failed to start" in r.getMessage()]


def test_a_pool_whose_workers_cannot_be_started_gives_up_with_one_clear_error(caplog):
    """The start itself fails in this process (here: a setup spawn cannot pickle). It used to retry every
    second forever, a traceback each time, while callers waited out their whole deadline."""
    p = WorkerPool(lambda: None, (), 2, start_method="spawn", name="unstartable")
    try:
        p.start()
        started = time.monotonic()
        r = p.run("task", time.monotonic() + 30)
        assert r.kind == "crashed" and "failed to start" in r.detail and "pickle" in r.detail.lower(), r
        assert time.monotonic() - started < 25  # answered when the pool gave up, not at the deadline
        assert p.broken and ("unstartable", p.broken) in workers.broken_pools()
        with pytest.raises(RuntimeError, match="failed to start"):
            p.start(ready_timeout_s=5)  # a second start names the reason too
        seen = len(_start_failures(caplog))
        time.sleep(2.5)
        assert len(_start_failures(caplog)) == seen <= workers.MAX_START_FAILURES  # no more retries once given up
        assert not any(r.exc_info for r in caplog.records if r.name == "cohort.verifiers.hosting.workers")  # no tracebacks
        assert asyncio.run(p.run_async("task", time.monotonic() + 60)).kind == "crashed"
    finally:
        p.close()
    assert ("unstartable", p.broken) not in workers.broken_pools()


def test_a_pool_whose_workers_die_before_they_are_ready_gives_up():
    """The processes start but die in setup (say the package does not import where the server was started):
    started lazily, the pool gives up after workers.MAX_START_FAILURES of them instead of replacing them forever."""
    p = WorkerPool(os._exit, (3,), 1, start_method="spawn", name="dies-in-setup")
    try:
        results = [p.run("task", time.monotonic() + 60) for _ in range(workers.MAX_START_FAILURES + 1)]
        assert all(r.kind == "crashed" for r in results), results
        assert p.broken and "in a row failed to start" in results[-1].detail
        assert p.restarts <= workers.MAX_START_FAILURES
    finally:
        p.close()


def test_workers_killed_at_a_deadline_before_they_are_ready_do_not_break_the_pool():
    """On a busy machine a worker's setup can outlast a short deadline: the pool kills it and starts another.
    Those kills are not failed starts (the fresh-machine CI run's math pool gave up after five of them)."""
    p = WorkerPool(_worker.setup, (1536 << 20,), 1, start_method="spawn", name="slow-setup")
    try:
        short = [p.run(QUICK, time.monotonic() + 0.01) for _ in range(workers.MAX_START_FAILURES + 2)]
        assert all(r.kind == "timeout" for r in short), short
        assert not p.broken, p.broken
        r = p.run(QUICK, time.monotonic() + 60)
        assert r.kind == "ok" and r.value.equal is True, r
    finally:
        p.close()


BROKEN_SERVER = """
import asyncio, sys, time
from pathlib import Path
from cohort.rpc.runtime import RuntimeOptions
from cohort.verifiers.base import RolloutResult, RolloutStatus
from cohort.verifiers.hosting.server import serve
from cohort.verifiers.hosting import workers
from cohort.verifiers.hosting.workers import WorkerPool

from cohort.verifiers.base import VerifierBase

class Unstartable(VerifierBase):
    name, version, description, reference_kinds = "unstartable", "1", "workers that cannot start", ("answer",)

    def __init__(self):
        self.pool = WorkerPool(lambda: None, (), 1, start_method="spawn", name="unstartable-worker")
        self.pool.start()

    def verify_group(self, group, ctx):
        r = self.pool.run(None, time.monotonic() + 30)
        return [RolloutResult.unusable(x.index, RolloutStatus.VERIFIER_ERROR, r.detail) for x in group.rollouts]

asyncio.run(serve({"unstartable": Unstartable()}, RuntimeOptions(port_file=Path(sys.argv[1]))))
"""


def test_a_server_whose_worker_pool_gave_up_is_not_serving(tmp_path):
    import subprocess
    import sys

    from cohort.rpc.launch import health_status

    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-c", BROKEN_SERVER, str(port_file)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        endpoint = f"127.0.0.1:{port_file.read_text()}"
        statuses = []
        while time.monotonic() < deadline:
            statuses.append((health_status(endpoint, ""), health_status(endpoint, "unstartable")))
            if statuses[-1] == ("NOT_SERVING", "NOT_SERVING"):
                break
            time.sleep(0.25)
        assert statuses[-1] == ("NOT_SERVING", "NOT_SERVING"), statuses[-5:]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "giving up" in err and err.count("Traceback") == 0, err[-3000:]
