"""A step the ``steps`` verifier cannot check counts against the chain (issue 49): the steps it used to
skip (a factorial, scientific notation, LaTeX) let a chain holding a wrong one keep a reward of 1.0. Now
each is a wrong step (reward 0) and the rollout is flagged ``unchecked_step``; plain words before an '='
(``x = 5``) are still no step."""

from __future__ import annotations

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.steps import UNCHECKED_STEP, StepsVerifier

CHAIN = " So 2 + 2 = 4. #### 4"


def score(*texts: str, gold: str = "4"):
    g = GroupRequest("steps", tuple(Rollout(i, t) for i, t in enumerate(texts)), Reference(answer=gold))
    return StepsVerifier().verify_group(g, VerifyContext())


@pytest.mark.parametrize("wrong", ["100000! = 1.", "1e308 * 1e308 = 1.", "We get \\frac{1}{2} = 3.",
                                   "\\sqrt{16} = 5.", "√16 = 5.", "2 \\cdot 3 = 7.", "{1 + 1} = 3."])
def test_a_step_it_cannot_parse_withholds_full_credit(wrong):
    [r] = score(wrong + CHAIN)
    assert r.status is RolloutStatus.OK and UNCHECKED_STEP in r.flags, r
    assert r.reward < 1.0 and r.verdict is Verdict.PARTIAL and [s.reward for s in r.steps] == [0.0, 1.0, 1.0]
    assert "cannot check" in r.detail


def test_plain_words_and_checked_chains_are_unchanged():
    plain, checked, neq = score("x = 5, and" + CHAIN, "She has 16 - 3 - 4 = 9 eggs, 9 * 2 = 18. #### 18",
                                "Is 5 != 4?" + CHAIN, gold="4")
    assert plain.reward == 1.0 and plain.flags == () and len(plain.steps) == 2
    assert UNCHECKED_STEP not in checked.flags and [s.reward for s in checked.steps] == [1.0, 1.0, 0.0]
    assert neq.reward == 1.0 and neq.flags == ()


def test_unchecked_steps_are_bounded_like_the_others():
    [r] = score("{1} = 1 " * 1000)
    assert r.status is RolloutStatus.OK and r.reward == 0.0 and "candidate_limit" in r.flags  # > 256 steps
