"""The error kinds of issue 20, one group of tests per kind, through the real ``MathVerifier`` (worker pool
included). Each group has several phrasings, positives and the matching negatives; the cases are written
from the kind, not from the examples in ``data/math_kinds.jsonl`` (which the last test holds at zero false
positives and accuracy >= 0.99).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cohort.verifiers.base import GroupRequest, InvalidRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.math import MathVerifier

R = "We set up the problem and simplify step by step; everything checks out.\n\n"
TIMEOUT_S = 20.0
DATA = Path(__file__).parent / "data" / "math_kinds.jsonl"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=2, cache_size=0)
    v.pool.start()
    yield v
    v.close()


def _result(verifier, gold, response, prompt="", options=None):
    group = GroupRequest("math", (Rollout(0, response),), Reference(answer=gold), prompt=prompt, rollout_timeout_s=TIMEOUT_S, options=dict(options or {}))
    (result,) = verifier.verify_group(group, VerifyContext(deadline=time.monotonic() + TIMEOUT_S + 5))
    assert result.status is RolloutStatus.OK, (gold, response[-120:], result.status, result.detail)
    return result


def _check(verifier, cases, prompt="", options=None):
    failures = []
    for case in cases:
        gold, response, expected = case[:3]
        p = case[3] if len(case) > 3 else prompt
        result = _result(verifier, gold, response, p, options)
        if (result.verdict is Verdict.CORRECT) != expected:
            failures.append(f"gold={gold!r} response={response[-80:]!r} prompt={p[-60:]!r}: {result.verdict.name} ({result.detail})")
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------------------------------- rounding

EXACT_IRRATIONAL_VS_ROUNDED = [
    ("\\pi", R + "The answer is $\\boxed{3.14}$.", False),
    ("\\pi", R + "The answer is $\\boxed{3.1416}$.", False),
    ("\\pi", R + "The answer is $\\boxed{3.141592653589793}$.", False),
    ("\\sqrt{2}", R + "So the side is \\boxed{1.414}.", False),
    ("\\sqrt{2}", R + "So the side is \\boxed{1.4142}.", False),
    ("3\\sqrt{3}", R + "Final Answer: The final answer is $5.196$. I hope it is correct.", False),
    ("\\frac{\\sqrt{3}}{2}", R + "\\boxed{0.866}", False),
    ("\\ln 2", R + "\\boxed{0.693}", False),
    ("e", R + "\\boxed{2.718}", False),
    ("\\frac{\\pi}{6}", R + "The angle is $\\boxed{0.5236}$ radians.", False),
    ("2+\\sqrt{3}", R + "#### 3.732", False),
    ("16\\pi", "<answer>50.27</answer>", False),
    # exact forms of the same irrational value stay correct
    ("\\pi", R + "\\boxed{\\frac{2\\pi}{2}}", True),
    ("\\sqrt{2}", R + "\\boxed{\\frac{2}{\\sqrt{2}}}", True),
    ("\\frac{\\pi}{4}", R + "\\boxed{0.25\\pi}", True),
    ("2\\sqrt{2}", R + "\\boxed{\\sqrt{8}}", True),
]


def test_rounded_decimal_for_an_exact_irrational_gold_is_incorrect(verifier):
    _check(verifier, EXACT_IRRATIONAL_VS_ROUNDED)


ROUNDING_PROMPTS = [
    # (gold, response, expected, prompt)
    ("\\pi", R + "\\boxed{3.14}", True, "Round your answer to the nearest hundredth."),
    ("\\pi", R + "\\boxed{3.14}", True, "Express your answer as a decimal to two decimal places."),
    ("\\pi", R + "\\boxed{3.14}", True, "Give the ratio correct to 2 decimal places."),
    ("\\pi", R + "\\boxed{3.142}", True, "Round to the nearest thousandth."),
    ("\\pi", R + "\\boxed{3.1}", True, "Round to the nearest tenth."),
    ("\\pi", R + "\\boxed{3.1}", False, "Round to the nearest hundredth."),  # coarser than asked
    ("\\pi", R + "\\boxed{3.15}", False, "Round to the nearest hundredth."),  # wrongly rounded
    ("\\pi", R + "\\boxed{3.14}", False, "Round to the nearest thousandth."),
    ("5\\sqrt{3}", R + "\\boxed{9}", True, "Round your answer to the nearest whole number."),
    ("5\\sqrt{3}", R + "\\boxed{9}", True, "What is the length, to the nearest integer?"),
    ("5\\sqrt{3}", R + "\\boxed{8}", False, "Round your answer to the nearest whole number."),
    ("5\\sqrt{3}", R + "\\boxed{8.66}", True, "Express your answer as a decimal rounded to the nearest hundredth."),
    ("5\\sqrt{3}", R + "\\boxed{8.66}", True, "Express your answer as a decimal."),
    ("5\\sqrt{3}", R + "\\boxed{8.7}", False, "Express your answer as a decimal rounded to the nearest hundredth."),
    ("5\\sqrt{3}", R + "\\boxed{5\\sqrt{3}}", True, "Round to the nearest hundredth."),  # the exact value is never wrong
    ("1000\\pi", R + "\\boxed{3141.59}", True, "Give your answer to 2 d.p."),
    ("e^{3}", R + "\\boxed{20.1}", True, "Round to three significant figures."),
    ("e^{3}", R + "\\boxed{20.09}", True, "Round to the nearest hundredth."),
    ("\\sqrt{10}", R + "The answer is $\\approx 3.162$.", True, "Express your answer as a decimal to the nearest thousandth."),
    ("\\sqrt{10}", R + "The answer is $\\approx 3.162$.", False, "Simplify."),
    ("\\sqrt{10}", R + "The answer is ≈ 3.16.", False, "Express your answer as a decimal to the nearest thousandth."),
    # prompts that do not ask for rounding
    ("\\pi", R + "\\boxed{3.14}", False, "What is the ratio of the circumference of a circle to its diameter?"),
    ("\\sqrt{2}", R + "\\boxed{1.41}", False, "A square has diagonal 2 cm. Find its side; simplify your answer."),
    ("\\sqrt{2}", R + "\\boxed{1.414}", False, "Express your answer in simplest radical form."),
    ("5\\sqrt{2}", R + "\\boxed{7.07}", False, "A rope of approximately 10 m is cut in two. How long is the diagonal?"),  # data, no request
    ("5\\sqrt{2}", R + "\\boxed{7.07}", False, "Let P be the lattice point nearest the origin on the circle; find its distance to Q."),
    ("2\\pi", R + "\\boxed{6.28}", False, "A round table has radius 1. What is its circumference?"),
    ("2\\pi", R + "\\boxed{6.28}", False, "In each round the token moves to a new vertex of the unit circle. How far does it travel in total?"),
    ("2\\sqrt{2}", R + "\\boxed{3}", False, "A frog jumps to the nearest integer point. Then it jumps along a diagonal of the unit square twice. "
     "Find the length of the second part of its path. Simplify your answer. Put the final answer in a box."),
]


def test_rounding_is_accepted_only_when_the_prompt_asks_for_it(verifier):
    _check(verifier, ROUNDING_PROMPTS)


def test_decimal_gold_keeps_its_precision_policy(verifier):
    _check(verifier, [
        ("3.14", R + "\\boxed{\\pi}", True),
        ("3.14", R + "\\boxed{3.14}", True),
        ("3.14", R + "\\boxed{3.1}", False),
        ("1.732", R + "\\boxed{\\sqrt{3}}", True),
        ("1.73", R + "\\boxed{1.75}", False),
        ("\\frac{2}{3}", R + "\\boxed{0.667}", True),  # rational golds: the documented decimal policy is unchanged
    ])


# --------------------------------------------------------------------------------------------- several boxes

def test_boxes_joined_by_a_hedge_are_not_a_multi_part_answer(verifier):
    _check(verifier, [
        ("2, 3", R + "So $x = \\boxed{2}$. Hmm, or maybe $x = \\boxed{3}$?", False),
        ("2, 3", R + "I believe it is \\boxed{2}; perhaps \\boxed{3} instead.", False),
        ("2, 3", R + "It might be $\\boxed{2}$ but it could also be $\\boxed{3}$.", False),
        ("(1, 5)", R + "Either $\\boxed{1}$ or possibly $\\boxed{5}$, I'm not sure.", False),
        ("-1, 1", R + "$\\boxed{-1}$? Or is it $\\boxed{1}$?", False),
        ("7, 8", R + "My guess is \\boxed{7}, alternatively \\boxed{8}.", False),
        ("4", R + "Probably $\\boxed{4}$, or maybe $\\boxed{5}$.", False),
        ("2, 3", R + "I am torn between \\boxed{2} and \\boxed{3}.", False),
        # a bare 'or' between two boxes offers candidates, unless the sentence says there are several or labels each
        ("2, 3", R + "The answer is $\\boxed{2}$ or $\\boxed{3}$.", False),
        ("2, 3", R + "$\\boxed{2} \\text{ or } \\boxed{3}$", False),
        ("2, 3", R + "The roots are $\\boxed{2}$ or $\\boxed{3}$.", True),
        ("2, 3", R + "$x = \\boxed{2} \\text{ or } x = \\boxed{3}$", True),
    ])


def test_boxes_joined_as_a_list_are_a_multi_part_answer(verifier):
    _check(verifier, [
        ("2, 3", R + "The solutions are $x = \\boxed{2}$ and $x = \\boxed{3}$.", True),
        ("2, 3", R + "$\\boxed{3}, \\boxed{2}$", True),
        ("-1, 1", R + "$x=\\boxed{-1}$ or $x=\\boxed{1}$", True),
        ("2, 3", R + "The solutions are $x = \\boxed{2}$ and $x = \\boxed{4}$.", False),  # a different second box
        ("2, 3", R + "The solutions are $x = \\boxed{2}$, $x = \\boxed{3}$ and $x = \\boxed{4}$.", False),
        ("2", R + "$\\boxed{2}$ and $\\boxed{3}$", False),
    ])


def test_a_box_the_response_rules_out_is_not_an_answer(verifier):
    _check(verifier, [
        ("2", R + "So $x=\\boxed{2}$ (not $\\boxed{-2}$, since $x>0$).", True),
        ("2, -2", R + "So $x=\\boxed{2}$ (not $\\boxed{-2}$, since $x>0$).", False),
        ("5", R + "The answer is \\boxed{5} rather than \\boxed{7}.", True),
        ("5, 7", R + "The answer is \\boxed{5} rather than \\boxed{7}.", False),
        ("6", R + "\\boxed{5} is not right; \\boxed{6}", True),
    ])


def test_a_self_correction_is_judged_on_its_final_answer(verifier):
    _check(verifier, [
        ("6", R + "So the answer is $\\boxed{5}$. Wait, that's wrong. The answer is $\\boxed{6}$.", True),
        ("6", R + "$\\boxed{5}$. Actually, I made an error in the last step: $\\boxed{6}$.", True),
        ("6", R + "\\boxed{5}\nOops, mistake. Corrected: \\boxed{6}", True),
        ("6", R + "\\boxed{5} is incorrect; let me recompute. \\boxed{6}", True),
        ("x = 6", R + "$x = \\boxed{4}$. No wait, I mis-added: $x = \\boxed{6}$.", True),
        ("6", R + "So the answer is $\\boxed{6}$. Wait, that's wrong. The answer is $\\boxed{5}$.", False),
        ("6", R + "\\boxed{6}. Actually, I made an error: \\boxed{7}", False),
        ("2, 3", R + "$\\boxed{2}$. Wait, that is wrong: $\\boxed{3}$.", False),  # one part of two
        ("2, 3", R + "$\\boxed{2}$. Wait, I missed a root: $\\boxed{2, 3}$.", True),
        ("6", R + "\\boxed{5}. Hold on, I dropped a sign. \\boxed{6}", True),
        ("6", R + "\\boxed{5}. Hmm, that can't be right. \\boxed{6}", True),
        ("5", R + "\\boxed{5} -- I miscalculated. \\boxed{6}", False),
    ])


def test_a_chain_of_equal_forms_is_one_answer(verifier):
    _check(verifier, [
        ("\\frac{1}{2}", R + "$\\boxed{\\frac12} = \\boxed{0.5}$", True),
        ("0.5", R + "$\\boxed{\\frac12} = \\boxed{0.5}$", True),
        ("\\frac{1}{4}", R + "$\\boxed{\\frac{2}{8}}=\\boxed{\\frac14}=\\boxed{0.25}$", True),
        ("\\frac{\\sqrt{2}}{2}", R + "$\\boxed{\\frac{\\sqrt2}{2}} \\approx \\boxed{0.707}$", True),
        ("\\frac{1}{2}", R + "$\\boxed{\\frac13} = \\boxed{0.333}$", False),
        ("\\frac{1}{2}", R + "$\\boxed{\\frac12} = \\boxed{0.6}$", False),  # the forms are not equal
        ("\\frac{1}{2}, 2", R + "$\\boxed{\\frac12} = \\boxed{0.5}$", False),
        ("\\pi", R + "$\\boxed{3.14} \\approx \\boxed{3.1}$", False),
    ])


# --------------------------------------------------------------------------------------------- units

def test_units_in_text_after_the_number_when_the_gold_has_none(verifier):
    _check(verifier, [
        ("24", R + "The area is $\\boxed{24\\text{ cm}^2}$.", True),
        ("24", R + "The area is $\\boxed{24 \\mathrm{~m}^{2}}$.", True),
        ("24", R + "The area is $\\boxed{24\\ \\text{square feet}}$.", True),
        ("24", R + "The area is $\\boxed{24\\,\\text{units}^2}$.", True),
        ("4\\pi", R + "The area is $\\boxed{4\\pi\\text{ cm}^2}$.", True),
        ("\\frac{9}{2}", R + "The area is $\\boxed{\\frac{9}{2} \\,\\text{m}^2}$.", True),
        ("36", R + "The speed is $\\boxed{36 \\text{ km/h}}$.", True),
        ("36", R + "The speed is $\\boxed{36\\,\\mathrm{km}/\\mathrm{h}}$.", True),
        ("36", R + "The speed is $\\boxed{36\\text{ km}\\cdot\\text{h}^{-1}}$.", True),
        ("36", R + "The speed is $\\boxed{36 \\text{ miles per hour}}$.", True),
        ("12", R + "The speed is $\\boxed{12\\,\\frac{\\text{m}}{\\text{s}}}$.", True),
        ("12", R + "The speed is $\\boxed{12\\;\\text{km}\\,\\text{h}^{-1}}$.", True),
        ("12", R + "The area is $\\boxed{12\\text{ sq ft}}$.", True),
        ("12\\text{ ft}^2", R + "The area is $\\boxed{12\\text{ square feet}}$.", True),
        ("12", R + "$\\boxed{12\\text{ million}}$", False),  # a word that scales the number is no unit
        ("12", R + "$\\boxed{12\\text{ dozen}}$", False),
        ("12", R + "$\\boxed{12\\text{ units squared}}$", True),
        ("50", R + "The speed is $\\boxed{50\\,\\mathrm{m\\,s^{-1}}}$", True),
        ("6\\sqrt{3}", R + "$\\boxed{6\\sqrt{3}\\text{ cm}^2}$", True),
        ("12", R + "$\\boxed{12\\text{ squared}}$", False),
        ("24", R + "The area is $\\boxed{25\\text{ cm}^2}$.", False),
        ("4\\pi", R + "The area is $\\boxed{4\\text{ cm}^2}$.", False),
        ("36", R + "The speed is $\\boxed{3.6 \\text{ km/h}}$.", False),
        ("5", R + "$\\boxed{5 \\text{ or more}}$", False),  # words that qualify the number are no unit
        ("5\\text{ m}^2", R + "$\\boxed{5 \\text{ m}^3}$", False),
        ("10\\text{ m/s}", R + "$\\boxed{10 \\text{ km/h}}$", False),
    ])


# --------------------------------------------------------------------------------------------- choices

def test_multiple_choice_with_letter_and_value(verifier):
    _check(verifier, [
        ("C", R + "The answer is $\\boxed{(C)\\ 12}$.", True),
        ("C", R + "The answer is $\\boxed{\\text{(C) } 12}$.", True),
        ("C", R + "The answer is $\\boxed{C: 12}$.", True),
        ("C", R + "The answer is $\\boxed{C)\\ 12}$.", True),
        ("\\text{(C)}", R + "The answer is $\\boxed{\\mathrm{(C)}\\ \\frac{5}{7}}$.", True),
        ("(D)", R + "Answer: D. $\\sqrt{2}$", True),
        ("C", R + "The answer is $\\boxed{(B)\\ 12}$.", False),
        ("C", R + "The answer is $\\boxed{B: 12}$.", False),
        ("(D)", R + "Answer: A. $\\sqrt{2}$", False),
        ("C", R + "The answer is $\\boxed{12}$.", False),  # a value alone cannot be checked against a letter
        ("A", R + "$\\boxed{4 \\text{ (A)}}$", True),
        ("A", R + "$\\boxed{4 \\text{ (B)}}$", False),
        ("\\text{(A)}", "The correct choice is (A) $x=4$.", True),
        ("\\text{(A)}", "The correct choice is (C) $x=4$.", False),
        ("12", R + "The answer is $\\boxed{(C)\\ 12}$.", True),
        ("12", R + "The answer is $\\boxed{(C)\\ 15}$.", False),
    ])


# --------------------------------------------------------------------------------------------- sets

def test_set_difference_against_a_union_of_intervals(verifier):
    _check(verifier, [
        ("(-\\infty, 2) \\cup (5, \\infty)", R + "$\\boxed{\\mathbb{R} \\setminus [2, 5]}$", True),
        ("(-\\infty, 2] \\cup [5, \\infty)", R + "$\\boxed{\\mathbb{R}\\setminus(2,5)}$", True),
        ("(-\\infty, 2) \\cup [5, \\infty)", R + "$\\boxed{\\mathbb{R}\\setminus[2,5)}$", True),
        ("(-\\infty,3)\\cup(3,\\infty)", R + "$\\boxed{\\mathbb{R}\\setminus\\{3\\}}$", True),
        ("(-\\infty,-1)\\cup(-1,1)\\cup(1,\\infty)", R + "$x \\in \\boxed{\\mathbb{R} \\setminus \\{1, -1\\}}$", True),
        ("\\mathbb{R}\\setminus\\{0\\}", R + "$\\boxed{(-\\infty,0)\\cup(0,\\infty)}$", True),
        ("x \\in (-\\infty, 2) \\cup (5, \\infty)", R + "$\\boxed{x \\in \\mathbb{R}\\backslash [2,5]}$", True),
        ("(-\\infty, 2) \\cup (5, \\infty)", R + "$\\boxed{\\mathbb{R} \\setminus (2, 5)}$", False),
        ("(-\\infty, 2) \\cup (5, \\infty)", R + "$\\boxed{\\mathbb{R} \\setminus [2, 6]}$", False),
        ("(-\\infty,3)\\cup(3,\\infty)", R + "$\\boxed{\\mathbb{R}\\setminus\\{-3\\}}$", False),
        ("\\mathbb{R}\\setminus\\{0\\}", R + "$\\boxed{(-\\infty,0]\\cup(0,\\infty)}$", False),
        ("\\{x \\mid x \\neq 3\\}", R + "$\\boxed{\\mathbb{R}\\setminus\\{3\\}}$", True),
        ("(-\\infty,3)\\cup(3,\\infty)", R + "$\\boxed{x \\neq 3}$", True),
        ("(-\\infty,3)\\cup(3,\\infty)", R + "$\\boxed{\\{x\\in\\mathbb{R} : x\\neq 3\\}}$", True),
        ("(-\\infty,3)\\cup(3,\\infty)", R + "$\\boxed{x \\neq -3}$", False),
    ])


# --------------------------------------------------------------------------------------------- decimal comma

def test_decimal_comma_auto(verifier):
    _check(verifier, [
        ("2.74", R + "$\\boxed{2,74}$", True),
        ("2.74", R + "$\\boxed{2{,}74}$", True),
        ("0.125", R + "Das Ergebnis ist $\\boxed{0,125}$.", True),  # a leading 0 is never a thousands group
        ("-1.5", R + "$\\boxed{-1,5}$", True),
        ("2.74", R + "$\\boxed{2,47}$", False),
        ("274", R + "$\\boxed{2,74}$", False),
        ("2, 74", R + "$\\boxed{2,74}$", True),  # the gold is a list: so is the answer
        ("(2, 74)", R + "$\\boxed{(2,74)}$", True),
        ("2740", R + "$\\boxed{2,740}$", True),  # three digits: a thousands separator
        ("2.74", R + "$\\boxed{2, 74}$", False),  # a space after the comma: a list
        ("2", R + "$\\boxed{2,0}$", False),  # an integer gold gives no decimal context: the pair 2, 0
        ("0.5", R + "$\\boxed{0,5}$", True),
        ("2.74", R + "$\\boxed{2,74\\text{ m}}$", True),
        ("2.74", R + "$\\boxed{2,75\\text{ m}}$", False),
    ])


def test_decimal_comma_option(verifier):
    _check(verifier, [("2.74", R + "$\\boxed{2,74}$", False), ("2740", R + "$\\boxed{2,740}$", True)], options={"decimal_comma": "never"})
    _check(verifier, [("2.74", R + "$\\boxed{2,74}$", True), ("2.740", R + "$\\boxed{2,740}$", True), ("2740", R + "$\\boxed{2,740}$", False)],
           options={"decimal_comma": "always"})
    with pytest.raises(InvalidRequest):
        _result(verifier, "1", "\\boxed{1}", options={"decimal_comma": "sometimes"})


# --------------------------------------------------------------------------------------------- escaping

def test_doubled_backslashes(verifier):
    _check(verifier, [
        ("x \\le 3", R + "$\\\\boxed{x \\\\le 3}$", True),
        ("x \\ge 3", R + "$\\\\boxed{x \\\\le 3}$", False),
        ("\\frac{2}{3}", R + "$\\\\boxed{\\\\frac{2}{3}}$", True),
        ("\\frac{2}{3}", R + "$\\\\boxed{\\\\frac{3}{2}}$", False),
        ("\\\\frac{2}{3}", R + "$\\boxed{\\frac{2}{3}}$", True),
        ("(0, \\infty)", R + "The answer is \\\\((0, \\\\infty)\\\\).", True),
        ("\\{1, 2\\}", R + "$\\\\boxed{\\\\{1,2\\\\}}$", True),
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", R + "$\\\\boxed{\\\\begin{pmatrix}1\\\\\\\\2\\\\end{pmatrix}}$", True),
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", R + "$\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}$", True),  # a real row break stays
        ("x \\in [1, 2]", R + "$\\\\boxed{1 \\\\leq x \\\\leq 2}$", True),
        ("x \\in [1, 2]", R + "$\\\\boxed{1 \\\\leq x \\\\lt 2}$", False),
    ])


def test_or_and_without_spaces(verifier):
    _check(verifier, [
        ("2, 3", R + "$\\boxed{x=2orx=3}$", True),
        ("2, 3", R + "$\\boxed{x=2\\text{or}x=3}$", True),
        ("2, 3", R + "$\\boxed{x=2\\;\\text{or}\\;x=3}$", True),
        ("x=1, y=-2", R + "$\\boxed{x=1andy=-2}$", True),
        ("x=1, y=-2", R + "$\\boxed{x=1\\mathrm{and}y=-2}$", True),
        ("2, 3", R + "$\\boxed{x=2orx=4}$", False),
        ("x=1, y=-2", R + "$\\boxed{x=-2andy=1}$", False),
        ("2", R + "$\\boxed{x=2orx=3}$", False),
        ("-3, 3", R + "$\\boxed{x=-3 \\lor x=3}$", True),
        ("-3, 3", R + "$\\boxed{x=-3 \\vee x=4}$", False),
        ("x=2, y=3", R + "$\\boxed{x=2,andy=3}$", True),
    ])


# --------------------------------------------------------------------------------------------- cheap structure

def test_expensive_looking_but_cheap_answers(verifier):
    ones = lambda n, sep="+": sep.join(["1"] * n)  # noqa: E731
    _check(verifier, [
        ("0", R + "$\\boxed{2^{100000} - 2^{100000}}$", True),
        ("0", R + "$\\boxed{10^{99999}-10^{99999}}$", True),
        ("7", R + "$\\boxed{5^{12345} + 7 - 5^{12345}}$", True),
        ("0", R + "$\\boxed{(2^{100000}) - (2^{100000})}$", True),
        ("0", R + "$\\boxed{2^{100000} - 2^{100001}}$", False),
        ("0", R + "$\\boxed{3^{20000}\\cdot 2 - 2\\cdot 3^{20000}}$", True),
        ("0", R + "$\\boxed{3^{20000}\\cdot 2 - 3\\cdot 3^{20000}}$", False),
        ("0", R + "$\\boxed{1000! - 1000!}$", True),
        ("1", R + "$\\boxed{2^{100000} - 2^{100000}}$", False),
        ("500", R + "$\\boxed{" + ones(500) + "}$", True),
        ("499", R + "$\\boxed{" + ones(500) + "}$", False),
        ("300", R + "$\\boxed{" + ones(300, " + ") + "}$", True),
        ("13", R + "$\\boxed{\\underbrace{13}_{\\text{apples}}}$", True),
        ("13", R + "$\\boxed{\\underbrace{12}_{\\text{apples}}}$", False),
        ("x+1", R + "$\\boxed{\\underbrace{x}_{a} + \\underbrace{1}_{b}}$", True),
        ("9", R + "$\\boxed{\\overbrace{9}^{\\text{nine}}}$", True),
    ])


def test_still_over_the_caps_is_flagged_not_evaluated(verifier):
    result = _result(verifier, "0", "\\boxed{2^{100000} - 3^{100000}}")
    assert result.verdict is Verdict.INCORRECT and "answer_over_limits" in result.flags


# --------------------------------------------------------------------------------------------- no answer

@pytest.mark.parametrize("text", [
    "I am not sure.", "I'm not sure.", "I don't know.", "I do not know the answer.", "Cannot determine.",
    "I cannot determine the answer from the information given.", "It is impossible to determine.",
    "Sorry, I am unable to solve this.", R + "In the end I am not sure what the answer is.",
    "The answer cannot be determined with certainty; I don't know.", "The answer is: not enough information.",
])
def test_a_completion_without_an_answer_is_no_answer(verifier, text):
    result = _result(verifier, "12", text)
    assert result.verdict is Verdict.NO_ANSWER, result.detail


def test_a_real_answer_phrased_with_words_is_still_scored(verifier):
    _check(verifier, [("12", "I am sure the answer is 12.", True), ("12", "I don't know why, but the answer is 13.", False),
                      ("\\text{cannot be determined}", R + "$\\boxed{\\text{cannot be determined}}$", True)])


# --------------------------------------------------------------------------------------------- the set

def test_kinds_set_accuracy_and_no_false_positives(verifier):
    cases = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    wrong, fps = [], 0
    for case in cases:
        result = _result(verifier, case["gold"], case["output"], case.get("prompt", ""), case.get("options"))
        got = result.verdict is Verdict.CORRECT
        if got != case["expected"]:
            fps += got
            wrong.append(f"{'FP' if got else 'FN'} {case['id']} [{case['category']}] gold={case['gold']!r}: {result.detail}")
    accuracy = 1 - len(wrong) / len(cases)
    assert fps == 0 and accuracy >= 0.99, f"accuracy {accuracy:.3f}, {fps} false positives\n" + "\n".join(wrong)


def test_the_verdict_cache_keeps_requests_with_different_policies_apart():
    """The same gold and answer under a rounding prompt and without one, and under two decimal_comma
    settings: a cached verdict of one request must not answer the other."""
    v = MathVerifier(workers=1)  # verdict cache on
    try:
        v.pool.start()
        for _ in range(2):  # the second round is served from the cache
            assert _result(v, "\\pi", R + "\\boxed{3.14}", "Round to the nearest hundredth.").verdict is Verdict.CORRECT
            assert _result(v, "\\pi", R + "\\boxed{3.14}", "Find the ratio.").verdict is Verdict.INCORRECT
            assert _result(v, "2.74", R + "\\boxed{2,74}").verdict is Verdict.CORRECT
            assert _result(v, "2.74", R + "\\boxed{2,74}", options={"decimal_comma": "never"}).verdict is Verdict.INCORRECT
        assert v.cache.hits > 0
    finally:
        v.close()
