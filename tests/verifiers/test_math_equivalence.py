"""Equivalence cases per category, written for this suite (not the dev set), through the real verifier.

Each case is (gold, full response, expected CORRECT?). The whole table runs through one
``MathVerifier`` (worker pool included), so cheap-path and SymPy-path cases are both exercised.
"""

from __future__ import annotations

import pytest

from cohort.verifiers.base import GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.math import MathVerifier
from cohort.verifiers.math.extract import extract_answer

R = "We compute step by step; a first try gave $7$ but that was wrong.\n\n"

CASES: dict[str, list[tuple[str, str, bool]]] = {
    "integers": [
        ("42", R + "The answer is $\\boxed{42}$.", True),
        ("42", R + "The answer is $\\boxed{43}$.", False),
        ("-3", R + "So the value is \\boxed{-3}", True),
        ("-3", R + "So the value is \\boxed{3}", False),  # wrong sign
        ("0", "#### 0", True),
        ("17", R + "#### 17", True),
    ],
    "fractions_decimals": [
        ("\\frac{3}{8}", R + "\\boxed{0.375}", True),
        ("0.375", R + "\\boxed{\\dfrac38}", True),
        ("\\frac{2}{3}", R + "\\boxed{0.667}", True),
        ("\\frac{2}{3}", R + "\\boxed{0.6}", False),
        ("\\frac{2}{3}", R + "\\boxed{0.66}", False),  # rel. error 1%: outside the policy
        ("\\frac{22}{7}", R + "\\boxed{\\pi}", False),
        ("7", R + "\\boxed{7.0001}", False),
        ("1.5", R + "\\boxed{3/2}", True),
        ("2\\frac{1}{4}", R + "\\boxed{\\frac{9}{4}}", True),
        ("2\\frac{1}{4}", R + "\\boxed{2.25}", True),
        ("12345678", R + "\\boxed{12,345,678}", True),
        ("12345678", R + "\\boxed{12\\,345\\,678}", True),
        ("6.02\\times 10^{23}", R + "\\boxed{602000000000000000000000}", True),
        ("6.02\\times 10^{23}", R + "\\boxed{6.02\\times 10^{22}}", False),
    ],
    "symbolic": [
        ("\\sqrt{8}", R + "\\boxed{2\\sqrt{2}}", True),
        ("\\sqrt{8}", R + "\\boxed{2\\sqrt{3}}", False),
        ("\\frac{1}{\\sqrt{2}}", R + "\\boxed{\\frac{\\sqrt2}{2}}", True),
        ("(a-b)(a+b)", R + "\\boxed{a^2-b^2}", True),
        ("(a-b)(a+b)", R + "\\boxed{a^2+b^2}", False),
        ("2\\pi r", R + "\\boxed{2 r \\pi}", True),
        ("\\frac{n(n+1)}{2}", R + "\\boxed{\\frac{n^2+n}{2}}", True),
        ("\\frac{n(n+1)}{2}", R + "\\boxed{\\frac{n^2+1}{2}}", False),
        ("x^2", R + "\\boxed{y^2}", False),
        ("\\log_2 8", R + "\\boxed{3}", True),
        ("e^{2}", R + "\\boxed{\\mathrm{e}^2}", True),
        ("|x|", R + "\\boxed{x}", False),  # equal for x > 0 only
        ("\\sqrt{x^2}", R + "\\boxed{|x|}", True),
        ("a", R + "\\boxed{\\frac{2a}{2}}", True),  # a single-letter gold is an expression, not a logic atom
        ("(x+1)^2", R + "\\boxed{(x+1)^2 + 10^{-30}}", False),  # not 'numerically close': 60-digit evaluation
    ],
    "complex": [
        ("3+4i", R + "\\boxed{4i+3}", True),
        ("3+4i", R + "\\boxed{3-4i}", False),
        ("\\frac{1}{2}i", R + "\\boxed{\\frac{i}{2}}", True),
    ],
    "sets_tuples_intervals": [
        ("\\{2, 5\\}", R + "\\boxed{\\{5, 2\\}}", True),
        ("\\{2, 5\\}", R + "\\boxed{\\{5, 3\\}}", False),
        ("(2, 5)", R + "The point is $\\boxed{(2,5)}$", True),
        ("(2, 5)", R + "The point is $\\boxed{(5,2)}$", False),  # order matters in tuples
        ("[1, 4)", R + "\\boxed{[1,4)}", True),
        ("[1, 4)", R + "\\boxed{[1,4]}", False),  # closed vs open end
        ("(-\\infty, 0) \\cup (2, \\infty)", R + "\\boxed{(2,\\infty)\\cup(-\\infty,0)}", True),
        ("(-\\infty, 0) \\cup (2, \\infty)", R + "\\boxed{(-\\infty,0]\\cup(2,\\infty)}", False),
        ("3, 7", R + "The solutions are \\boxed{7} and \\boxed{3}.", True),
        ("3, 7", R + "\\boxed{3, 7, 9}", False),
    ],
    "matrices": [
        ("\\begin{pmatrix}2\\\\-1\\end{pmatrix}", R + "\\boxed{\\begin{bmatrix}2\\\\-1\\end{bmatrix}}", True),
        ("\\begin{pmatrix}2\\\\-1\\end{pmatrix}", R + "\\boxed{\\begin{pmatrix}-1\\\\2\\end{pmatrix}}", False),
        ("\\begin{pmatrix}1&0\\\\0&2\\end{pmatrix}", R + "\\boxed{\\begin{pmatrix}1&0\\\\0&\\frac{4}{2}\\end{pmatrix}}", True),
    ],
    "equations_inequalities": [
        ("y = 2x + 1", R + "\\boxed{y=1+2x}", True),
        ("y = 2x + 1", R + "\\boxed{2x+1}", True),
        ("y = 2x + 1", R + "\\boxed{y=2x-1}", False),
        ("x = 4", R + "\\boxed{4}", True),
        ("x + y = 4", R + "\\boxed{4}", False),
        ("t > 3", R + "\\boxed{3 < t}", True),
        ("t > 3", R + "\\boxed{t \\ge 3}", False),
        ("1 < x \\le 5", R + "\\boxed{(1, 5]}", True),
        ("1 < x \\le 5", R + "\\boxed{(1, 5)}", False),
        ("|t| < 3", R + "\\boxed{-3 < t < 3}", True),
        ("|t| < 3", R + "\\boxed{t < 3}", False),
        ("2 \\le |t| \\le 4", R + "\\boxed{t \\in [-4,-2] \\cup [2,4]}", True),
        ("2 \\le |t| \\le 4", R + "\\boxed{t \\in [-4,-2) \\cup [2,4]}", False),
    ],
    "percent_units_degrees": [
        ("45\\%", R + "\\boxed{45}", True),
        ("45\\%", R + "\\boxed{0.45}", True),
        ("45\\%", R + "\\boxed{54\\%}", False),
        ("5\\text{ cm}", R + "\\boxed{5\\text{ m}}", False),
        ("5\\text{ cm}", R + "\\boxed{5 \\text{ centimeters}}", True),
        ("5\\text{ cm}", R + "\\boxed{5}", True),
        ("60^\\circ", R + "\\boxed{60}", True),
        ("60^\\circ", R + "\\boxed{60°}", True),
        ("60^\\circ", R + "\\boxed{30^\\circ}", False),
        ("\\$12.50", R + "The total cost is \\boxed{\\$12.50}.", True),
    ],
    "plus_minus_infinity": [
        ("\\pm 3", R + "\\boxed{3, -3}", True),
        ("\\pm 3", R + "\\boxed{3}", False),
        ("2 \\pm \\sqrt{5}", R + "\\boxed{2+\\sqrt5, 2-\\sqrt5}", True),
        ("\\infty", R + "\\boxed{\\infty}", True),
        ("\\infty", R + "\\boxed{-\\infty}", False),
    ],
    "choice_text": [
        ("B", R + "The correct option is \\boxed{B}", True),
        ("B", R + "The correct option is \\boxed{(B)}", True),
        ("B", R + "The correct option is \\boxed{\\textbf{(B)}}", True),
        ("B", R + "The correct option is \\boxed{D}", False),
        ("\\text{yes}", R + "\\boxed{\\text{Yes}}", True),
        ("\\text{yes}", R + "\\boxed{\\text{no}}", False),
    ],
    "extraction": [
        ("9", R + "<answer>9</answer>", True),
        ("9", R + "<answer>\\boxed{9}</answer>", True),
        ("9", "<think>the answer is 9</think><answer></answer>", False),  # empty tag does not borrow
        ("9", "<think>so it is \\boxed{9}</think>I am not sure.", False),  # only in the reasoning
        ("9", R + "Final Answer: The final answer is $9$. I hope it is correct.", True),
        ("9", R + "Answer: 9", True),
        ("9", R + "\\boxed{9} or \\boxed{10}", False),  # hedging
        ("9", R + "\\boxed{9}, \\boxed{8}, \\boxed{7}, \\boxed{6}", False),  # box spam
        ("9", R + "\\boxed{9} is right, I checked: \\boxed{9}", True),
        ("9", "AB9CD", False),
        ("0.25", "Answer: $\\frac{1}{4}$", True),
    ],
}

# Written forms: unicode, scientific notation, mixed numbers, degrees, choices, markers, vectors.
FORMS: list[tuple[str, str, bool]] = [
    ('\\frac{1}{2}', '\\boxed{½}', True),
    ('\\sqrt{2}', '\\boxed{√2}', True),
    ('2\\sqrt{3}', '\\boxed{2√3}', True),
    ('x^2', '\\boxed{x²}', True),
    ('-5', '\\boxed{−5}', True),
    ('\\pi', '\\boxed{π}', True),
    ('\\infty', '\\boxed{∞}', True),
    ('1500', '\\boxed{1.5 \\times 10^{3}}', True),
    ('1500', '\\boxed{1.5e3}', True),
    ('1500', '\\boxed{1.5E+3}', True),
    ('1500', '\\boxed{1.5·10³}', True),
    ('2\\frac{1}{4}', '\\boxed{2 1/4}', True),
    ('\\frac{9}{4}', '\\boxed{2\\tfrac14}', True),
    ('2\\frac{1}{4}', '\\boxed{21/4}', False),
    ('\\frac{1}{8}', '\\boxed{12.5\\%}', True),
    ('\\frac{\\pi}{4}', '\\boxed{45^\\circ}', True),
    ('45^\\circ', '\\boxed{\\frac{\\pi}{4}}', True),
    ('45^\\circ', '\\boxed{\\frac{\\pi}{3}}', False),
    ('\\infty', 'The answer is infinity.', True),
    ('2i', '\\boxed{\\sqrt{-4}}', True),
    ('1+i', '\\boxed{i+1}', True),
    ('1+i', '\\boxed{1-i}', False),
    ('B', 'The answer is (B) 12', True),
    ('B', 'The answer is B) 12', True),
    ('A', 'The answer is a+b', False),
    ('A', '\\boxed{\\textbf{(A)}\\ 5}', True),
    ('\\text{Yes}', 'The answer is yes.', True),
    ('\\text{No}', 'The answer is yes.', False),
    ('1234567', '\\boxed{1\\,234\\,567}', True),
    ('1234567', '\\boxed{1 234 567}', True),
    ('5\\text{ cm}', '\\boxed{\\text{5 cm}}', True),
    ('5\\text{ cm}', '\\boxed{\\text{5 m}}', False),
    ('5\\text{ cm}', '\\boxed{5\\,\\mathrm{m}}', False),
    ('5 \\text{ cm}^2', '\\boxed{5 \\text{ cm}}', False),
    ('x = 3', '\\boxed{x=3}', True),
    ('3', '\\boxed{x = 3}', True),
    ('(1,2)', '\\boxed{x=1, y=2}', True),
    ('(1,2)', '\\boxed{x=2, y=1}', False),
    ('\\frac{\\sqrt{3}}{2}', '\\boxed{0.866}', False),  # issue 20: no rounding asked
    ('\\frac{\\sqrt{3}}{2}', '\\boxed{0.87}', False),
    ('3.14', '\\boxed{\\pi}', True),
    ('-\\frac{1}{2}', '\\boxed{\\frac{-1}{2}}', True),
    ('-\\frac{1}{2}', '\\boxed{\\frac{1}{-2}}', True),
    ('\\frac12', '\\boxed{-\\frac{1}{2}}', False),
    ('10', 'The answer is 10 apples.', True),
    ('10', 'The answer is 100.', False),
    ('\\$5', '\\boxed{5 dollars}', True),
    ('x \\in (-\\infty, 2)', '\\boxed{x<2}', True),
    ('x \\in (-\\infty, 2]', '\\boxed{x<2}', False),
    ('[2,\\infty)', '\\boxed{x \\geq 2}', True),
    ('\\{1,2,3\\}', '\\boxed{\\{3,2,1\\}}', True),
    ('\\{1,2,3\\}', '\\boxed{\\{1,2\\}}', False),
    ('(1,2,3)', '\\boxed{(3,2,1)}', False),
    ('y=2x+3', '\\boxed{2x+3}', True),
    ('y=2x+3', '\\boxed{y = 3 + 2x}', True),
    ('y=2x+3', '\\boxed{2x - y + 3 = 0}', True),
    ('0.5', '\\boxed{50\\%}', True),
    ('50\\%', '\\boxed{\\frac12}', True),
    ('50', '\\boxed{50\\%}', True),
    ('12', '#### 12', True),
    ('12', 'The final answer is 12', True),
    ('12', 'Answer: $12$', True),
    ('12', '**Answer:** 12', True),
    ('12', '**Final Answer:** $\\boxed{12}$', True),
    ('\\frac{3}{4}', '<answer>$\\frac{3}{4}$</answer>', True),
    ('\\frac{3}{4}', '<answer>The answer is 3/4</answer>', True),
    ('2', 'It is 2. Wait, no, it is 3. The answer is 3.', False),
    ('2', '\\boxed{2}\n\nWait, let me recheck... actually the answer is \\boxed{3}', False),
    ('e', '\\boxed{e}', True),
    ('e^2', '\\boxed{e^{2}}', True),
    ('\\log_{2} 8', '\\boxed{3}', True),
    ('\\sin 30^\\circ', '\\boxed{\\frac12}', True),
    ('\\dfrac{\\sqrt{2}}{2}', '\\boxed{\\frac{1}{\\sqrt{2}}}', True),
    ('1,2', '\\boxed{1} \\text{ and } \\boxed{2}', True),
    ('(3,4)', 'The point is $(3, 4)$.', True),
    ('(3,4)', 'The point is $(4, 3)$.', False),
    ('\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}', '\\boxed{(1,2)}', True),
    ('\\text{(C)}', '\\boxed{C}', True),
    ('C', '\\boxed{\\text{(C) } 24}', True),
    ('C', '\\boxed{24}', False),
    ('5', '\\boxed{5.0}', True),
    ('5', '\\boxed{5.00}', True),
    ('5', '\\boxed{5.01}', False),
    ('0.333', '\\boxed{\\frac13}', True),
    ('0.3', '\\boxed{\\frac13}', False),
    ('100', '\\boxed{100.}', True),
    ('007', '\\boxed{7}', True),
    ('1/3', '\\boxed{0.\\overline{3}}', True),
]
FORMS += [
    ("3\\times 10^{8}", "\\boxed{3×10⁸}", True),
    ("3\\times 10^{8}", "\\boxed{3×10⁷}", False),
    ("x^2+1", "\\boxed{x²+1}", True),
    ("\\frac{1}{3}", "\\boxed{⅓}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{√(3)/2}", True),
    ("1\\frac{1}{2}", "\\boxed{1 ½}", True),
    ("C", "The answer is Option C.", True),
    ("C", "The answer is Option D.", False),
]
CASES["written_forms"] = FORMS

# False-positive traps and more forms (sign, ends, units, hedging, j vs i, tolerance edges).
TRAPS: list[tuple[str, str, bool]] = [
    ('\\frac{1}{3}', '\\boxed{0.33}', False),
    ('\\frac{1}{3}', '\\boxed{0.333}', True),
    ('100', '\\boxed{99.9}', False),
    ('3', '\\boxed{3.0001}', False),
    ('-2', '\\boxed{2}', False),
    ('x-1', '\\boxed{1-x}', False),
    ('(0,1]', '\\boxed{(0,1)}', False),
    ('[0,1]', '\\boxed{(0,1)}', False),
    ('5\\text{ m}', '\\boxed{5\\text{ cm}}', False),
    ('5\\text{ km}', '\\boxed{5000\\text{ m}}', False),
    ('10\\text{ cm}^2', '\\boxed{10\\text{ cm}^3}', False),
    ('\\frac{\\sqrt{2}}{2}', '\\boxed{\\sqrt{2}}', False),
    ('2\\pi', '\\boxed{\\pi}', False),
    ('\\pi', '\\boxed{3.14}', False),  # issue 20: a rounded value of an exact irrational gold
    ('\\pi', '\\boxed{3.1}', False),
    ('1,2,3', '\\boxed{1,2}', False),
    ('1,2', '\\boxed{1,2,3}', False),
    ('(1,2)', '\\boxed{(1,2,3)}', False),
    ('\\{1,2\\}', '\\boxed{\\{1,2,2\\}}', True),
    ('x^2+1', '\\boxed{x^2-1}', False),
    ('\\frac{x}{2}', '\\boxed{2x}', False),
    ('2^{10}', '\\boxed{1024}', True),
    ('2^{10}', '\\boxed{1000}', False),
    ('30^\\circ', '\\boxed{30}', True),
    ('30^\\circ', '\\boxed{\\frac{\\pi}{6}}', True),
    ('30^\\circ', '\\boxed{60}', False),
    ('A', '\\boxed{B}', False),
    ('A', '\\boxed{A, B}', False),
    ('\\text{A}', 'The answer is (A) and (B)', False),
    ('5', '\\boxed{5} \\boxed{6}', False),
    ('5', 'The answer is 5 or 6.', False),
    ('5', 'Answer: 5 or 6', False),
    ('1\\pm\\sqrt{2}', '\\boxed{1+\\sqrt{2}}', False),
    ('\\pm 1', '\\boxed{1, -1}', True),
    ('\\pm 1', '\\boxed{\\pm 1}', True),
    ('\\infty', '\\boxed{\\text{infinity}}', True),
    ('-\\infty', '\\boxed{\\infty}', False),
    ('(-\\infty, \\infty)', '\\boxed{\\mathbb{R}}', True),
    ('2+3i', '\\boxed{2+3j}', False),
    ('2+3i', '\\boxed{3i+2}', True),
    ('i', '\\boxed{-i}', False),
    ('\\sqrt{-1}', '\\boxed{i}', True),
    ('y = x', '\\boxed{x}', True),
    ('y = x', '\\boxed{y = -x}', False),
    ('x > 2', '\\boxed{x < 2}', False),
    ('x \\geq 2', '\\boxed{x > 2}', False),
    ('x^2 + y^2 = 1', '\\boxed{x^2 + y^2 = 2}', False),
    ('x^2 + y^2 = 1', '\\boxed{2x^2 + 2y^2 = 2}', True),
    ('\\text{Tuesday}', 'The answer is Tuesday.', True),
    ('\\text{Tuesday}', 'The answer is Wednesday.', False),
    ('12,345', '\\boxed{12345}', True),
    ('12,345', '\\boxed{12.345}', False),
    ('1,234', '\\boxed{1234}', True),
    ('7.5\\%', '\\boxed{0.075}', True),
    ('7.5\\%', '\\boxed{7.5}', True),
    ('7.5\\%', '\\boxed{75\\%}', False),
    ('\\$1.50', '\\boxed{1.5}', True),
    ('\\$1.50', '\\boxed{\\$1.05}', False),
    ('3\\frac{1}{2}', '\\boxed{3.5}', True),
    ('3\\frac{1}{2}', '\\boxed{\\frac{3}{2}}', False),
    ('1.2\\times10^{-3}', '\\boxed{0.0012}', True),
    ('1.2\\times10^{-3}', '\\boxed{0.012}', False),
    ('\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}', '\\boxed{\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}}', False),
    ('\\begin{pmatrix}1\\\\2\\\\3\\end{pmatrix}', '\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}', False),
    ('\\frac{1}{2}', '<answer>1/2 or 1/3</answer>', False),
    ('\\frac{1}{2}', '<answer>0.5</answer>', True),
    ('7', 'The sum is 3+4 = 7.', True),
    ('7', 'The value is 3+4.', True),
    ('10', '\\boxed{10}\\boxed{10}\\boxed{10}', True),
    ('\\text{no solution}', '\\boxed{\\text{No solution}}', True),
    ('\\text{no solution}', '\\boxed{\\emptyset}', False),
    ('\\sqrt{2}', '\\boxed{1.414}', False),  # issue 20 (was True)
    ('\\sqrt{2}', '\\boxed{1.41}', False),
    ('\\sqrt{2}', '\\boxed{1.4142}', False),  # issue 20 (was True)
    ('\\ln 2', '\\boxed{0.693}', False),  # issue 20 (was True)
    ('e', '\\boxed{2.718}', False),  # issue 20 (was True)
    ('e', '\\boxed{2.72}', False),  # issue 20 (was True)
    ('\\frac{5}{2}', '\\boxed{\\frac{10}{4}}', True),
    ('\\frac{5}{2}', '\\boxed{5/2}', True),
    ('\\frac{5}{2}', '\\boxed{2.5}', True),
    ('\\frac{5}{2}', '\\boxed{2\\frac12}', True),
    ('0', '\\boxed{-0}', True),
    ('0', '\\boxed{0.0}', True),
    ('0', '\\boxed{}', False),
    ('x=2, y=3', '\\boxed{(2,3)}', True),
    ('x=2, y=3', '\\boxed{(3,2)}', False),
    ('x \\in [2, 5]', '\\boxed{2 \\le x \\le 5}', True),
    ('x \\in [2, 5]', '\\boxed{2 < x \\le 5}', False),
]
CASES["traps_and_forms"] = TRAPS

# Answer tags with inline math, boxed gold answers, more units/percent/choices/intervals.
TAGGED: list[tuple[str, str, bool]] = [
    ('\\boxed{5}', 'The answer is 5', True),
    ('$\\frac{1}{2}$', '\\boxed{0.5}', True),
    ('x=2 \\text{ or } x=3', '\\boxed{3, 2}', True),
    ('(B)', '\\boxed{B}', True),
    ('\\{2\\}', '\\boxed{2}', True),
    ('20\\%', '\\boxed{1/5}', True),
    ('5\\text{ cm}', '\\boxed{5 \\mathrm{~cm}}', True),
    ('\\$18.90', '\\boxed{18.9}', True),
    ('\\infty', '\\boxed{+\\infty}', True),
    ('-1+2i', '<answer>\\(2i-1\\)</answer>', True),
    ('\\frac{1}{2}', '<answer>$\\frac{1}{2}$</answer>', True),
    ('x = 3', '<answer>\\(x = 3\\)</answer>', True),
    ('(3, -2)', '<answer>(3,-2)</answer>', True),
    ('(3, -2)', '<answer>(-2,3)</answer>', False),
    ('\\text{even}', '<answer>even</answer>', True),
    ('\\text{even}', '<answer>odd</answer>', False),
    ('8', '<answer>8 cm</answer>', True),
    ('8\\text{ cm}', '<answer>8 m</answer>', False),
    ('8\\text{ cm}', '<answer>8 mm</answer>', False),
    ('(2,3),(4,5)', '\\boxed{(4,5),(2,3)}', True),
    ('(2,3),(4,5)', '\\boxed{(4,5),(3,2)}', False),
    ('y=3x-2', '<answer>y = 3x - 2</answer>', True),
    ('y=3x-2', '<answer>y = -2 + 3x</answer>', True),
    ('y=3x-2', '<answer>y = 3x + 2</answer>', False),
    ('[-1, 3)', '<answer>-1 \\le x < 3</answer>', True),
    ('[-1, 3)', '<answer>-1 < x < 3</answer>', False),
    ('x > 4', 'The solution is $x \\in (4, \\infty)$.', True),
    ('x > 4', 'The solution is $(4, \\infty)$', True),
    ('12\\sqrt{2}', '\\boxed{\\sqrt{288}}', True),
    ('12\\sqrt{2}', '\\boxed{\\sqrt{144}}', False),
    ('\\frac{3}{4}', '\\boxed{\\frac{6}{8}}', True),
    ('\\frac{3}{4}', '\\boxed{.75}', True),
    ('\\frac{3}{4}', '\\boxed{75\\%}', True),
    ('6', '\\boxed{6\\text{ ways}}', True),
    ('6', '\\boxed{7\\text{ ways}}', False),
    ('\\text{B}', '<answer>B</answer>', True),
    ('\\text{B}', '<answer>(B) 7</answer>', True),
    ('\\text{B}', '<answer>b</answer>', True),
    ('1\\frac{3}{4}', '\\boxed{\\frac{7}{4}}', True),
    ('1\\frac{3}{4}', '\\boxed{1.75}', True),
    ('1\\frac{3}{4}', '\\boxed{\\frac{3}{4}}', False),
    ('\\frac{\\pi}{3}', '\\boxed{60^\\circ}', True),
    ('\\frac{\\pi}{3}', '\\boxed{60}', False),
    ('2.5\\times10^{-4}', '\\boxed{0.00025}', True),
    ('2.5\\times10^{-4}', '\\boxed{2.5e-4}', True),
    ('2.5\\times10^{-4}', '\\boxed{2.5\\cdot 10^{-3}}', False),
    ('\\boxed{1, 2}', '\\boxed{2} and \\boxed{1}', True),
    ('\\boxed{1, 2}', '\\boxed{2}', False),
]
CASES["tags_and_gold_forms"] = TAGGED

FLAT = [(cat, *case) for cat, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=2)
    yield v
    v.close()


def test_every_category_has_true_and_false_cases():
    for cat, cases in CASES.items():
        assert {c[2] for c in cases} == {True, False} or cat == "never", cat


def test_equivalence_table(verifier):
    """One group per gold answer; every verdict must match the label (no INCORRECT from timeouts)."""
    failures = []
    for cat, gold, response, expected in FLAT:
        group = GroupRequest("math", (Rollout(0, response),), Reference(answer=gold), rollout_timeout_s=10)
        (result,) = verifier.verify_group(group, VerifyContext())
        assert result.status is RolloutStatus.OK, (cat, gold, response, result)
        got = result.verdict is Verdict.CORRECT
        if got != expected:
            failures.append(f"[{cat}] gold={gold!r} response={response[-60:]!r}: got {result.verdict} ({result.detail})")
    assert not failures, "\n".join(failures)


def test_hedging_is_flagged(verifier):
    group = GroupRequest("math", (Rollout(0, "\\boxed{1} or \\boxed{2}"),), Reference(answer="1"))
    (result,) = verifier.verify_group(group, VerifyContext())
    assert result.verdict is Verdict.INCORRECT and "multiple_answers" in result.flags


def test_empty_answer_tag_is_no_answer_and_flagged(verifier):
    group = GroupRequest("math", (Rollout(0, "the value is 9 <answer> </answer>"),), Reference(answer="9"))
    (result,) = verifier.verify_group(group, VerifyContext())
    assert result.verdict is Verdict.NO_ANSWER and result.reward == 0.0 and "empty_answer_tag" in result.flags


def test_detail_and_components_say_what_was_extracted(verifier):
    group = GroupRequest("math", (Rollout(0, R + "\\boxed{\\frac{6}{8}}"),), Reference(answer="0.75"))
    (result,) = verifier.verify_group(group, VerifyContext())
    assert result.reward == 1.0 and result.components == {"correct": 1.0, "has_answer": 1.0}
    assert "\\frac{6}{8}" in result.detail and "boxed" in result.detail


def test_unparseable_gold_is_invalid_reference(verifier):
    group = GroupRequest("math", (Rollout(0, "\\boxed{x+1}"), Rollout(1, "\\boxed{3}")), Reference(answer="\\frac{{x}"), rollout_timeout_s=5)
    results = verifier.verify_group(group, VerifyContext())
    assert [r.status for r in results] == [RolloutStatus.INVALID_REFERENCE] * 2


def test_nested_braces_in_box():
    assert extract_answer("x \\boxed{\\frac{1}{\\sqrt{2}}} y").answers == ("\\frac{1}{\\sqrt{2}}",)


def test_identical_answers_in_a_group_are_checked_once(verifier):
    hits_before = verifier.cache.hits
    rollouts = tuple(Rollout(i, R + "\\boxed{(a+1)^2}") for i in range(8))
    group = GroupRequest("math", rollouts, Reference(answer="a^2+2a+1"), rollout_timeout_s=10)
    results = verifier.verify_group(group, VerifyContext())
    assert [r.reward for r in results] == [1.0] * 8
    again = verifier.verify_group(group, VerifyContext())
    assert [r.reward for r in again] == [1.0] * 8
    assert verifier.cache.hits == hits_before + 1  # one distinct answer, cached after the first group
