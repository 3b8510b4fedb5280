"""Issue 29: who caused a math check that could not finish? Real worker processes, real SymPy, no mocks.

A mask removes the rollout's negative gradient, so only what no better policy could have avoided is masked:
SymPy time spent on the *answer's own* expression is the candidate's doing (scored INCORRECT, flag
``candidate_limit``); time spent on the gold's own expression is the reference's (masked); a comparison that
is slow only as a pair, the call's deadline, and crashed workers stay masked."""

from __future__ import annotations

import time

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.math import MathVerifier

# SymPy's simplify of two different symbolic sums runs for well over a minute (checked by hand: > 12 s
# here, where simplify of either sum alone takes about 0.3 s); a plain symbol costs milliseconds.
HEAVY = r"\sum_{k=1}^{n} \frac{k^3}{(k+1)(k+2)} + \sum_{j=1}^{n} \frac{j^2}{(j+3)(j+1)}"
BUDGET_S = 1.0


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=2, cache_size=0)
    v.pool.start()
    yield v
    v.close()


def _one(verifier, gold: str, response: str, budget: float = BUDGET_S, deadline_s: float = 60.0):
    group = GroupRequest("math", (Rollout(0, response),), Reference(answer=gold), options={"timeout_s": str(budget)})
    (r,) = verifier.verify_group(group, VerifyContext(deadline=time.monotonic() + deadline_s))
    return r


def test_sympy_time_on_the_answers_own_expression_is_scored_and_flagged(verifier):
    r = _one(verifier, "n", f"The total is $\\boxed{{{HEAVY}}}$.")
    assert r.status is RolloutStatus.OK, r.detail
    assert r.verdict is Verdict.INCORRECT and r.reward == 0.0
    assert "candidate_limit" in r.flags and "answer's own expression" in r.detail


def test_sympy_time_on_the_golds_own_expression_is_masked(verifier):
    r = _one(verifier, HEAVY, "The total is $\\boxed{n}$.")
    assert r.status is RolloutStatus.VERIFIER_TIMEOUT, r.detail
    assert "candidate_limit" not in r.flags and "gold answer alone" in r.detail


def test_the_calls_deadline_is_never_the_candidates_doing(verifier):
    r = _one(verifier, "n", f"$\\boxed{{{HEAVY}}}$", budget=10.0, deadline_s=0.5)
    assert r.status is RolloutStatus.VERIFIER_TIMEOUT and "candidate_limit" not in r.flags, r.detail


def test_the_same_answer_within_the_budget_is_judged_normally(verifier):
    r = _one(verifier, "(x+1)^2", "$\\boxed{x^2 + 2x + 1}$")
    assert r.status is RolloutStatus.OK and r.verdict is Verdict.CORRECT and r.flags == ()


def test_an_answer_over_the_input_caps_carries_the_shared_flag(verifier):
    r = _one(verifier, "5", "$\\boxed{2^{100000}}$")
    assert r.status is RolloutStatus.OK and r.verdict is Verdict.INCORRECT
    assert {"answer_over_limits", "candidate_limit"} <= set(r.flags)


def _nested(last: str, depth: int = 17) -> str:
    inner = f"({depth}, {last})"
    for k in range(depth - 1, 0, -1):
        inner = f"({k}, {inner})"
    return inner


def test_a_gold_nested_beyond_the_structure_depth_is_the_references_doing(verifier):
    # a right answer written otherwise ('\\frac{36}{2}' for 18) walks the whole structure: the depth cap is
    # reached on both sides, and the gold is the one that is that deep
    r = _one(verifier, _nested("18"), f"$\\boxed{{{_nested(chr(92) + 'frac{36}{2}')}}}$")
    assert r.status is RolloutStatus.INVALID_REFERENCE and "nested deeper" in r.detail, r.detail
    shallow = _one(verifier, "(17, 18)", "$\\boxed{(17, \\frac{36}{2})}$")
    assert shallow.status is RolloutStatus.OK and shallow.verdict is Verdict.CORRECT, shallow.detail
