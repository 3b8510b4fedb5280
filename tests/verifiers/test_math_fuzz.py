"""Random token soup through extraction and the cheap comparison: only the two designed exceptions escape."""

from __future__ import annotations

import random

from cohort.verifiers.math.compare import NeedSympy, OverLimits, cheap_leaf, compare
from cohort.verifiers.math.extract import extract_answer

TOKENS = [
    "\\boxed{", "}", "{", "\\frac", "\\sqrt", "[", "]", "(", ")", "1", "23", "0.5", "x", "=", "<", "\\le", ",", ";",
    " and ", " or ", "\\pm", "\\text{cm}", "%", "\\%", "^", "_", "\\circ", "$", "\\begin{pmatrix}", "\\end{pmatrix}",
    "&", "\\\\", "\\cup", "\\infty", "-", "+", "A", "(B)", "<answer>", "</answer>", "</think>", "Answer:",
    "The answer is ", "####", "é", "√", "²", "\\overline{3}", ":", "\\in", "|", "!", "\\binom", "e", "i", " ", "\n",
    ".", "\\left(", "\\right)", "\\mathrm{e}", "⅓", "⁻¹",
]


def test_token_soup_never_crashes_the_cheap_pass():
    rng = random.Random(20261129)
    for _ in range(20_000):
        response = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 14)))
        gold = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 6)))
        extraction = extract_answer(response)
        assert all(isinstance(a, str) for a in extraction.answers)
        if extraction.answers:
            try:
                outcome = compare(gold, extraction.answers, cheap_leaf)
            except (NeedSympy, OverLimits):
                continue
            assert isinstance(outcome.equal, bool) and outcome.how
