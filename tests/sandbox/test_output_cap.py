"""A graded run whose candidate exceeds the output cap is void, whenever the cap's kill lands.

Regression for a red-team flake (``stdout_flood_in_call`` scored 0.25 once in CI): the host reads
the candidate's pipes and, past the cap, asks PID 1 to kill it; a call that answered before the
kill landed used to count as passed. Here the candidate sends its (right) answer on fd 3 *before*
writing a byte of the flood, which forces that ordering on every call instead of leaving it to the
scheduler. Before the fix the assert passed every time (reward 1.0); now the run fails as a whole.
"""

from __future__ import annotations

import pytest

from cohort.sandbox import policy
from cohort.sandbox.grader import OUTPUT_VOID, TestSpec
from cohort.verifiers.base import Verdict
from cohort.verifiers.code.verifier import verdict_for

CAP = 1 << 16
LIMITS = policy.Limits(wall_s=5.0, cpu_s=5.0, memory_bytes=256 << 20, output_bytes=CAP, max_processes=16,
                       disk_bytes=0)
SPEC = TestSpec("asserts", asserts=("assert add(123, 456) == 579",))
ANSWER_FIRST = ("import os, json\n"
                "def add(a, b):\n"
                "    body = json.dumps({'ok': {'i': str(a + b)}}).encode()\n"
                "    os.write(3, len(body).to_bytes(4, 'big') + body)  # the answer is on its way to the grader\n"
                "    FLOOD\n")


def _grade(sandbox, flood: str):
    run = sandbox.run_tests(ANSWER_FIRST.replace("FLOOD", flood), SPEC, 3.0, False, LIMITS)
    return run, verdict_for(run.outcomes, run.load_error, run.load_cause, all_or_nothing=False)


def test_answer_sent_first_passes_without_a_flood(sandbox, host_unaffected) -> None:
    """Control: the hand-written reply frame is a real pass, so the test below can fail."""
    run, (reward, verdict) = _grade(sandbox, "pass")
    assert (reward, verdict) == (1.0, Verdict.CORRECT), run


@pytest.mark.parametrize("stream", [1, 2], ids=["stdout", "stderr"])
def test_answer_before_the_cap_fires_does_not_count(stream, sandbox, host_unaffected) -> None:
    run, (reward, verdict) = _grade(sandbox, f"os.write({stream}, b'x' * (16 * {CAP}))")
    assert (reward, verdict) == (0.0, Verdict.RESOURCE_LIMIT_EXCEEDED), run
    assert [(o.passed, o.cause, o.error) for o in run.outcomes] == [(False, "output", OUTPUT_VOID)]
    assert len(run.stdout) <= CAP and len(run.stderr) <= CAP
