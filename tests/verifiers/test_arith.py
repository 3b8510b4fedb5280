"""The `arith` verifier's answer rule: first integer by default, last with `pick=last` (in process)."""

from __future__ import annotations

import pytest

from cohort.verifiers.arith import ArithVerifier
from cohort.verifiers.base import GroupRequest, InvalidRequest, Reference, Rollout, RolloutStatus, VerifyContext


def _rewards(texts, answer="19", **options):
    group = GroupRequest("arith", tuple(Rollout(i, t) for i, t in enumerate(texts)), Reference(answer=answer),
                         options={"format_weight": "0", **options})
    return [r.reward for r in ArithVerifier().verify_group(group, VerifyContext())]


def test_first_integer_by_default():
    assert _rewards(["19", "The sum of 7 and 12 is 19.", "7 + 12"]) == [1.0, 0.0, 0.0]


def test_last_integer_reads_a_restated_question_and_refuses_an_echoed_expression():
    texts = ["19", "The sum of 7 and 12 is 19.", "7 + 12", "7 + 12 = 19", "19, no: 20", ""]
    assert _rewards(texts, pick="last") == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]


def test_bad_pick_is_a_clear_request_error():
    with pytest.raises(InvalidRequest, match="pick"):
        _rewards(["19"], pick="middle")


@pytest.mark.parametrize("pick", ["first", "last"])
def test_an_answer_over_the_digit_limit_is_scored_and_flagged_not_masked(pick):
    huge = "9" * 80
    g = GroupRequest("arith", (Rollout(0, huge), Rollout(1, "47")), Reference(answer="47"), options={"pick": pick})
    over, fine = ArithVerifier().verify_group(g, VerifyContext())
    assert over.status is RolloutStatus.OK and over.components["correct"] == 0.0
    assert over.flags == ("candidate_limit",) and "candidate limit" in over.detail
    assert fine.flags == () and fine.reward > 1.0
