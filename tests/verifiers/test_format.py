"""The format verifier's rules and reward-hack flags, in-process (pure logic)."""

from __future__ import annotations

import pytest

from cohort.verifiers.base import GroupRequest, InvalidRequest, Rollout, Verdict, VerifyContext
from cohort.verifiers.format import FormatVerifier

V = FormatVerifier()


def score(text: str, **options: str):
    return V.verify_group(GroupRequest("format", (Rollout(0, text),), options=options), VerifyContext())[0]


@pytest.mark.parametrize(
    "text,options,reward,flags",
    [
        ("<think>2+2 is 4</think><answer>4</answer>", {}, 1.0, ()),
        ("  <think>x</think>\n\n<answer> 4 </answer>\n", {}, 1.0, ()),
        ("<think>x</think><answer>4</answer> and that's it", {}, 0.0, ("text_after_answer",)),
        ("<think>x</think><answer>4</answer> and that's it", {"mode": "soft"}, 1.0, ()),
        ("intro <think>x</think><answer>4</answer>", {}, 0.0, ()),
        ("<think>x</think><answer>1</answer><answer>2</answer>", {}, 0.0, ("multiple_answers",)),
        ("<think>x</think><answer>   </answer>", {}, 0.0, ("empty_answer",)),
        ("<think>x<answer>4</answer></think>", {"mode": "soft"}, 1 / 3, ("nested_tags",)),
        ("<think><think>x</think></think><answer>4</answer>", {}, 0.0, ("nested_tags",)),
        ("<think>x</think></answer><answer>4</answer>", {}, 0.0, ("unbalanced_tags",)),
        ("<think>x<answer>4</answer>", {}, 0.0, ("unbalanced_tags",)),
        ("<think>x</think> so \\boxed{\\frac{1}{2}}", {"answer": "boxed"}, 1.0, ()),
        ("<think>x</think> \\boxed{1} or \\boxed{2}", {"answer": "boxed"}, 0.0, ("multiple_answers",)),
        ("<think>x</think><answer>\\boxed{1} \\boxed{2}</answer>", {}, 0.0, ("multiple_answers",)),
        ("<think>x</think> \\boxed{}", {"answer": "boxed"}, 0.0, ("empty_answer",)),
        ("<think>x</think> \\boxed{1", {"answer": "boxed"}, 0.0, ("unbalanced_tags",)),
        ("<answer>4</answer>", {"think": "forbidden"}, 1.0, ()),
        ("<answer>4</answer>", {"think": "optional"}, 1.0, ()),
        ("<think>x</think><answer>4</answer>", {"think": "forbidden"}, 0.0, ()),
        ("<think>x</think> \\fbox{7}", {"answer": "either"}, 1.0, ()),
        ("<THINK>x</THINK><Answer>4</Answer>", {}, 1.0, ()),
    ],
)
def test_rules(text, options, reward, flags):
    r = score(text, **options)
    assert r.reward == pytest.approx(reward)
    assert r.flags == tuple(sorted(flags))
    assert r.usable


def test_no_answer_verdict_and_components():
    r = score("I think it is 4")
    assert r.verdict is Verdict.NO_ANSWER and r.reward == 0.0
    assert r.components == {"think": 0.0, "answer": 0.0, "clean": 0.0}
    soft = score("<think>x</think> 4", mode="soft")
    assert soft.components == {"think": 1.0, "answer": 0.0, "clean": 0.0}
    assert soft.reward == pytest.approx(1 / 3) and soft.verdict is Verdict.NO_ANSWER


def test_spam_never_pays_more_than_one_answer():
    one = score("<think>x</think><answer>4</answer>", mode="soft").reward
    for spam in ("<answer>4</answer>" * 5, "<answer>4</answer><answer></answer>", "\\boxed{4}\\boxed{5}"):
        assert score("<think>x</think>" + spam, mode="soft").reward < one


def test_bad_option_is_invalid_request():
    with pytest.raises(InvalidRequest, match="mode='lenient'"):
        score("x", mode="lenient")


def test_huge_completion_is_linear_time():
    r = score("<think>" + "a<" * 200_000 + "</think><answer>1</answer>")
    assert r.reward == 1.0
