"""Issue 29: several answers whose words in between reject or doubt the earlier ones are a sequence of
self-corrections, not a list. Through the real ``MathVerifier``: none of them may match a gold *list* of
those answers; genuine lists (stated as lists) still do. The phrasings are written from the class, not
from one example: negations, rejections, doubts, double negations, in boxes and after answer markers."""

from __future__ import annotations

import time

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.math import MathVerifier

R = "We set up the problem and simplify step by step.\n\n"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=1, cache_size=0)
    v.pool.start()
    yield v
    v.close()


def _verdict(verifier, gold: str, response: str) -> Verdict:
    group = GroupRequest("math", (Rollout(0, response),), Reference(answer=gold), rollout_timeout_s=20.0)
    (r,) = verifier.verify_group(group, VerifyContext(deadline=time.monotonic() + 30))
    assert r.status is RolloutStatus.OK, r.detail
    return r.verdict


SELF_CORRECTIONS = [  # (first, second, response): never the list {first, second}
    ("3", "5", r"\boxed{3} no, not that, \boxed{5}"),
    ("2", "4", r"\boxed{2}? No. \boxed{4}"),
    ("1", "7", r"not \boxed{1} but \boxed{7}"),
    ("1", "7", r"The answer is not $\boxed{1}$ but $\boxed{7}$."),
    ("3", "5", r"\boxed{3}, no \boxed{5}"),
    ("3", "5", r"\boxed{3}. Nope. \boxed{5}"),
    ("3", "5", r"\boxed{3} is not the answer; \boxed{5}"),
    ("3", "5", r"\boxed{3} isn't right, \boxed{5}"),
    ("3", "5", r"\boxed{3}. Not quite. \boxed{5}"),
    ("3", "5", r"\boxed{3}, never mind, \boxed{5}"),
    ("2", "4", r"\boxed{2}, I doubt it, \boxed{4}"),
    ("3", "5", r"\boxed{3}, not not \boxed{5}"),  # double negation
    ("3", "5", r"It's not \boxed{3}, it's not not \boxed{5}"),
    ("3", "5", r"\boxed{3} (no!) \boxed{5}"),
    ("3", "5", r"\boxed{3}, rather \boxed{5}"),
    ("3", "5", r"\boxed{3} ... no ... \boxed{5}"),
    ("1", "7", r"$\boxed{1}$ -- no -- $\boxed{7}$"),
    ("3", "5", r"\boxed{3}, nah, \boxed{5}"),
    ("3", "5", r"\boxed{3} is false; \boxed{5}"),
    ("3", "5", r"\boxed{3} won't work, so \boxed{5}"),
    ("3", "5", r"\boxed{3} \text{ (discard) } \boxed{5}"),
    ("-2", "6", r"$x = \boxed{-2}$, which we reject, so $x = \boxed{6}$"),
    ("3", "5", r"\boxed{3} leads to a contradiction, \boxed{5}"),
    ("3", "5", r"\boxed{3}\quad\text{No}\quad\boxed{5}"),
    ("3", "5", r"\boxed{3}. Hmm, that can't be it. \boxed{5}"),
]


@pytest.mark.parametrize("first,second,body", SELF_CORRECTIONS)
def test_self_corrections_are_not_a_list(verifier, first, second, body):
    for gold in (f"{first}, {second}", f"\\{{{first}, {second}\\}}", f"{second}, {first}"):
        assert _verdict(verifier, gold, R + body) is not Verdict.CORRECT, (gold, body)


@pytest.mark.parametrize("body", [
    r"not \boxed{1} but \boxed{7}",
    r"The answer is not $\boxed{1}$ but rather $\boxed{7}$.",
])
def test_a_negated_first_box_is_dropped(verifier, body):
    assert _verdict(verifier, "7", R + body) is Verdict.CORRECT
    assert _verdict(verifier, "1", R + body) is Verdict.INCORRECT


@pytest.mark.parametrize("gold,body", [
    ("3, 5", r"The roots are $\boxed{3}$ and $\boxed{5}$."),
    ("3, 5", r"x = \boxed{3} or x = \boxed{5}"),
    ("2, 3", r"The solutions are $\boxed{2}$ and $\boxed{3}$ (note that $x = 0$ is not a solution)."),
    ("2, 3", r"Since $x \neq 0$, the solutions are $\boxed{2}, \boxed{3}$"),
    ("3, 5", r"\boxed{3} and \boxed{5}, not \boxed{4}"),
    ("3, 5", r"The answer is 3 and 5."),
    ("3, 5", r"The solutions are $x = 3$ and $x = 5$."),
])
def test_genuine_lists_still_match(verifier, gold, body):
    assert _verdict(verifier, gold, R + body) is Verdict.CORRECT, body


@pytest.mark.parametrize("first,second,body", [
    ("3", "5", "The answer is 3, no, 5."),
    ("3", "5", "The answer is 3... no wait, 5."),
    ("3", "5", "Final Answer: 3, nope, 5"),
    ("3", "5", "The answer is 3 (not really), 5."),
    ("3", "5", "The answer is not 3 but 5."),
    ("3", "5", "#### 3 no 5"),
])
def test_self_corrections_after_a_marker_are_not_a_list(verifier, first, second, body):
    for gold in (f"{first}, {second}", f"\\{{{first}, {second}\\}}"):
        assert _verdict(verifier, gold, R + body) is not Verdict.CORRECT, (gold, body)


@pytest.mark.parametrize("body", [
    r"\boxed{3}, \boxed{5}. Hmm, no.",
    r"The answer is $3, 5$... no.",
    r"$\boxed{3}$ and $\boxed{5}$. Wait, no!",
])
def test_a_list_taken_back_at_once_is_not_a_list(verifier, body):
    assert _verdict(verifier, "3, 5", R + body) is not Verdict.CORRECT, body


@pytest.mark.parametrize("body", [
    r"The roots are $\boxed{3}$ and $\boxed{5}$. No other values work.",
    r"The answer is $3, 5$. No other pair satisfies both equations.",
])
def test_a_list_followed_by_more_words_still_matches(verifier, body):
    assert _verdict(verifier, "3, 5", R + body) is Verdict.CORRECT, body
