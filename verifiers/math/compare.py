"""Is an extracted answer equivalent to the gold answer? Structure first, SymPy only for leaves.

``compare(gold, answers, leaf)`` splits both sides into the same structure (lists, tuples,
intervals and unions, relations, matrices, quantities with units/percent/degrees, multiple-choice
letters, text) with plain string code, and compares leaves with exact rational arithmetic. A leaf it
cannot decide that way goes to ``leaf`` (:func:`verifiers.math.symbolic.sympy_leaf_equal` in a worker
process). In the parent the cheap pass uses :func:`cheap_leaf`, which raises :class:`NeedSympy`.

Tolerance policy (decimals). Integers, fractions and exact expressions compare exactly. When one side
is written as a decimal with ``d`` digits after the point, the other side matches if it is within half a
unit of the last digit (``|x - y| <= 0.5 * 10**-d``) *and* within a relative error of 1e-3: ``7.78``
matches ``70/9`` and ``0.0833333`` matches ``1/12``, but ``0.3`` does not match ``1/3`` and ``5.001``
does not match ``5``.

Policies that decide verdicts:
- lists (``1, 2``, ``1 and 2``, ``\\{1,2\\}``, several boxes) are unordered; tuples ``(a, b)`` are ordered;
  open and closed interval ends must match; a union is an unordered list of intervals.
- ``label = value`` (``x = 3``, ``(p,q) = (3,2)``, ``f(x) = 1``) is compared by its value when the
  other side is a bare value; two equations are equal when ``lhs - rhs`` are proportional.
- an inequality in one variable equals the matching interval (``-2 \\le x \\le 7`` = ``[-2, 7]``).
- units: both sides with different units are different (``5 cm`` vs ``5 m``); a unit on one side only
  is ignored (``10\\text{ units}`` = ``10``), also compound units in ``\\text{}``/``\\mathrm{}`` after any
  value (``9\\pi\\text{ cm}^2``, ``15\\text{ m/s}``, ``36\\,\\mathrm{km}\\,\\mathrm{h}^{-1}``,
  ``\\frac{\\text{m}}{\\text{s}}``; ``square feet`` = ``ft^2``); words that scale or qualify the number are
  no unit (``3\\text{ million}``, ``5\\text{ or more}``). ``28\\%`` matches ``28`` and ``0.28``.
  ``90^\\circ`` = ``90``.
- sets: ``\\mathbb{R} \\setminus [a, b]`` (also ``\\backslash``, ``-``, a finite set of numbers) is the union
  of intervals it denotes; ``x \\ne a`` is ``(-\\infty, a) \\cup (a, \\infty)``.
- cheap structure first: top-level terms that cancel or repeat (``2^{100000} - 2^{100000}``, ``1+1+...+1``,
  ``1000! - 1000!``) are added as exact rationals before the caps of
  :func:`verifiers.math.normalize.over_limits` apply; ``\\underbrace{x}_{note}`` is ``x``.
- a multiple-choice gold (a single letter A-E) needs exactly that letter (``(C)``, ``\\text{C}``,
  ``C. x = 42``, ``(C) 12``); a value gold accepts a labelled choice with that value (``(C) 12`` for ``12``).

Rounding (issue 20). A decimal approximation of an *irrational* exact gold (``3.14`` for ``\\pi``, ``1.414``
for ``\\sqrt2``) is INCORRECT unless the prompt asks for rounding (:func:`rounding_request`: "to the nearest
hundredth", "round to two decimal places", "3 significant figures", "as a decimal", "approximately"...). When
it does, a decimal answer must carry at least the requested digits and be correctly rounded at the digits
it shows (half a unit of its last digit, no relative test: "nearest whole number" accepts ``9`` for
``5\\sqrt3``). Rational golds keep the decimal policy above; a decimal gold keeps its own precision.

Request policy (:class:`Policy`): built once per request from the prompt and the options, passed to
:func:`compare` (and through the worker pipe to the SymPy leaf), and part of the verdict cache key.
``decimal_comma`` (``auto`` | ``never`` | ``always``): ``auto`` (the default) reads ``2,74`` / ``2{,}74`` / ``0,125``
as a decimal only when the whole answer is that one number, the gold is one decimal number (``2.74``: an
integer or a list gold gives no such context), and the comma cannot be a thousands separator (the group
after it is not three digits, or the part before it is 0);
``never`` keeps commas as list/thousands separators; ``always`` reads every comma between digits as a
decimal comma (lists then need a space or a semicolon).
"""

from __future__ import annotations

import contextvars
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from cohort.verifiers.math.extract import find_boxes
from cohort.verifiers.math.normalize import normalize, over_limits, split_quantity

REL_TOL = Fraction(1, 1000)
MAX_INPUT_CHARS = 2_000
MAX_PARTS = 32


class NeedSympy(Exception):
    """The cheap pass cannot decide this leaf."""


class OverLimits(Exception):
    def __init__(self, side: str, why: str):
        super().__init__(f"{side} {why}")
        self.side = side
        self.why = why


@dataclass(frozen=True)
class Outcome:
    equal: bool
    how: str


Leaf = Callable[[str, str], Outcome]

DecimalComma = Literal["auto", "never", "always"]
DECIMAL_COMMA_CHOICES: tuple[str, ...] = ("auto", "never", "always")


@dataclass(frozen=True)
class Rounding:
    """What the prompt asks: ``decimals`` digits after the point (negative: tens, hundreds), or
    ``significant`` figures, or neither (any precision: "as a decimal", "approximately")."""

    decimals: int | None = None
    significant: int | None = None


@dataclass(frozen=True)
class Policy:
    """How answers to this request may be written (from the prompt and the options)."""

    rounding: Rounding | None = None
    """Set when the prompt asks for a rounded or decimal answer; None: rounded decimals of exact irrational
    golds are INCORRECT."""
    decimal_comma: DecimalComma = "auto"
    """Is ``2,74`` the decimal 2.74? See the module docstring."""


DEFAULT_POLICY = Policy()
_POLICY: contextvars.ContextVar[Policy] = contextvars.ContextVar("math_policy", default=DEFAULT_POLICY)


def current_policy() -> Policy:
    """The policy of the :func:`compare` call in progress (read by the SymPy leaf in the worker)."""
    return _POLICY.get()


_WORD_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_NEAREST = {
    "whole number": 0, "whole": 0, "integer": 0, "dollar": 0, "degree": 0, "percent": 0, "cent": 2,
    "tenth": 1, "hundredth": 2, "thousandth": 3, "ten-thousandth": 4, "ten thousandth": 4, "hundred-thousandth": 5,
    "ten": -1, "hundred": -2, "thousand": -3,
}
_R_NEAREST = re.compile(r"\b(?:to|round(?:ed|ing)?)\s+(?:the\s+)?nearest\s+(?:the\s+)?(" + "|".join(sorted(map(re.escape, _NEAREST), key=len, reverse=True)) + r")s?\b", re.I)
_R_COUNT = r"(\d{1,2}|" + "|".join(_WORD_NUMBERS) + r")"
_R_DECIMALS = re.compile(_R_COUNT + r"\s*(?:-\s*)?(?:decimal\s+(?:places?|digits?|points?)|decimals\b|d\.\s*p\.?|dp\b|digits?\s+after\s+the\s+decimal)", re.I)
_R_SIGNIFICANT = re.compile(_R_COUNT + r"\s*(?:-\s*)?(?:significant\s+(?:figures?|digits?)|sig\.?\s*figs?\b|s\.\s*f\.?)", re.I)
_R_ANY = re.compile(
    r"\b(?:round(?:ed|ing)?\s+(?:(?:your|the|final|answers?|results?|it|this|that|values?|them|all|each|numbers?|up|down)\s+){0,4}(?:to|off)\b|round(?:ed)?\s+(?:your|the)\s+answer|as\s+a\s+decimal|in\s+decimal\s+form|"
    r"decimal\s+(?:approximation|form|value)|(?:numerical|approximate)\s+(?:value|answer|approximation)|approximate\s+(?:your|the)\s+answer)\b",
    re.I,
)  # not a bare 'approximately': '... weighs approximately 5 kg' states data, it asks for nothing


def rounding_request(prompt: str) -> Rounding | None:
    """The rounding a prompt asks for, or None.

    >>> rounding_request("Express your answer as a decimal to the nearest hundredth.")
    Rounding(decimals=2, significant=None)
    >>> rounding_request("Find the exact value.") is None
    True
    """
    if not prompt:
        return None
    # The instruction is at the end ('... Express your answer to the nearest tenth.'); 'a frog jumps to the
    # nearest integer' earlier in the problem is no request.
    text = " ".join([c for c in re.split(r"(?<=[.?!])\s+|\n+", prompt[-4000:]) if c.strip()][-4:])
    found = [(m.start(), Rounding(decimals=_NEAREST[_nearest_key(m.group(1))])) for m in _R_NEAREST.finditer(text)]
    found += [(m.start(), Rounding(decimals=_count(m.group(1)))) for m in _R_DECIMALS.finditer(text)]
    found += [(m.start(), Rounding(decimals=len(m.group(1)) - 1)) for m in re.finditer(r"\b(?:to|round(?:ed|ing)?)\s+(?:the\s+)?nearest\s+0?(\.0*1)(?!\d)", text)]
    found += [(m.start(), Rounding(significant=_count(m.group(1)))) for m in _R_SIGNIFICANT.finditer(text)]
    if found:
        return max(found, key=lambda f: f[0])[1]  # the last request in the prompt is the one that applies
    return Rounding() if _R_ANY.search(text) else None


def _nearest_key(word: str) -> str:
    word = re.sub(r"\s+", " ", word.lower())
    return word if word in _NEAREST else word.replace(" ", "-")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _WORD_NUMBERS[word.lower()]


def rounded_match(gold: Fraction, answer: Fraction, answer_decimals: int | None, rounding: Rounding) -> Outcome:
    """Is ``answer`` (written with ``answer_decimals`` digits after the point) ``gold`` rounded as asked?"""
    wanted = rounding.decimals
    if rounding.significant is not None:
        if gold == 0 or rounding.significant <= 0:
            return Outcome(gold == answer, "significant figures of 0")
        wanted = rounding.significant - 1 - _floor_log10(abs(gold))
    if wanted is None:  # any precision: the decimal policy, at the digits the answer shows
        if answer_decimals is None:
            return Outcome(gold == answer, "an integer is not a rounded decimal")
        return close_decimal(gold, answer, answer_decimals)
    shown = answer_decimals if answer_decimals is not None else min(wanted, 0)
    if shown < wanted:
        return Outcome(False, f"rounded to {shown} decimals, the prompt asks for {wanted}")
    half = Fraction(10) ** (-shown) / 2 * (1 + Fraction(1, 10**9))
    if abs(gold - answer) <= half:
        return Outcome(True, f"rounded as the prompt asks ({shown} decimals)")
    return Outcome(False, f"not {shown}-decimal rounding of the gold")


def _floor_log10(x: Fraction) -> int:
    guess = math.floor(math.log10(x.numerator) - math.log10(x.denominator))
    while Fraction(10) ** guess > x:
        guess -= 1
    while Fraction(10) ** (guess + 1) <= x:
        guess += 1
    return guess


def cheap_leaf(gold: str, answer: str) -> Outcome:
    raise NeedSympy


# --------------------------------------------------------------------------------------------- splitting


def _top_level_split(s: str, seps: re.Pattern) -> list[str]:
    """Split on ``seps`` where no bracket is open."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\" and s.startswith(("\\{", "\\}"), i):
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth <= 0:
            m = seps.match(s, i)
            if m and m.end() > i:
                parts.append(s[start:i])
                start = i = m.end()
                continue
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


_LIST_SEP = re.compile(r"\s*(?:,\s*(?:\\text\{\s*(?:and|or)\s*\}|and\b|or\b)?|;|\\text\{\s*,?\s*(?:and|or)\s*\}|\band\b|\bor\b)\s*")
_SEMI = re.compile(r"\s*;\s*")
_TUPLE_SEP = re.compile(r"\s*[,;]\s*")
_RATIO = re.compile(r"^([^:=<>]+):([^:=<>]+)$")
_REL = re.compile(r"\\le |\\ge |\\ne |\\in |\\approx |\\equiv |<|>|=")
_LABEL = re.compile(
    r"^(?:[a-zA-Z](?:_\{?[\w,]+\}?)?'*|\\[a-zA-Z]+(?:_\{?[\w,]+\}?)?|[a-zA-Z](?:\^\{?-1\}?|'+)?\s*\([a-zA-Z0-9, ]*\)|\([a-zA-Z ,_{}0-9]+\)"
    r"|\|[a-zA-Z]+\||[A-Z]{1,4}|\\text\{[^{}]*\}|\\frac\{[A-Za-z]+\}\{[A-Za-z]+\}|[A-Za-z_{}0-9]+\s*:\s*[A-Za-z_{}0-9]+"
    r"|\\angle\s*[A-Z]+|[a-zA-Z]\s*\(\s*[-\d./]+\s*\))$"
)


def _strip_set_braces(s: str) -> str:
    for opener, closer in (("\\{", "\\}"), ("{", "}")):
        if s.startswith(opener) and s.endswith(closer) and _balanced(s[len(opener) : -len(closer)]):
            return s[len(opener) : -len(closer)].strip()
    return s


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0


def split_items(s: str) -> list[str]:
    """Top-level answers of one string: '1, 2', '1 and 2', '{1,2}', 'p=5,q=2;p=7,q=2', '1 \\pm 2'."""
    s = s.strip().rstrip(".").strip()
    inner = _strip_set_braces(s)
    groups = _top_level_split(inner, _SEMI)
    items: list[str] = []
    for group in groups:
        parts = _top_level_split(group, _LIST_SEP)
        if len(groups) > 1 and len(parts) > 1 and all(_label_value(p) is not None for p in parts):
            items.append("(" + ", ".join(_label_value(p) for p in parts) + ")")
            continue
        items.extend(parts)
    out: list[str] = []
    for item in items:
        out.extend(_expand_pm(item))
    return out


def _expand_pm(item: str) -> list[str]:
    if "\\pm" not in item and "\\mp" not in item:
        return [item]
    if item.count("\\pm") + item.count("\\mp") > 1:
        return [item]
    item = item.replace("\\mp", "\\pm")
    lhs, rel, rhs = _split_relation(item)
    if rel == "=" and _LABEL.match(lhs):
        item = rhs
    plus = item.replace("\\pm", "+").strip()
    minus = item.replace("\\pm", "-").strip()
    return [plus.lstrip("+").strip() if plus.startswith("+") else plus, minus]


def _split_relation(s: str) -> tuple[str, str | None, str]:
    """First top-level relation: (lhs, op, rest)."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            m = _REL.match(s, i)
            if m:
                return s[:i].strip(), m.group(0).strip(), s[m.end() :].strip()
    return s, None, ""


def _relation_chain(s: str) -> tuple[list[str], list[str]]:
    terms, ops = [], []
    rest = s
    while True:
        lhs, op, rhs = _split_relation(rest)
        terms.append(lhs)
        if op is None:
            return terms, ops
        ops.append(op)
        rest = rhs


def _chain_value(terms: list[str], ops: list[str]) -> str:
    """'x = 5+5+1 = 1/3 \\approx 0.33' -> '1/3': the last exact value, else the last one."""
    if "=" in ops and "\\approx" in ops:
        return terms[ops.index("\\approx")]
    return terms[-1]


def _label_value(item: str) -> str | None:
    """'x = 3' -> '3' when the left side is a name; None otherwise."""
    terms, ops = _relation_chain(item)
    if ops and all(op in ("=", "\\approx") for op in ops) and _LABEL.match(terms[0].strip()) and terms[-1]:
        return _chain_value(terms, ops)
    return None


# --------------------------------------------------------------------------------------------- numbers

_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_FRAC = re.compile(r"^([-+]?)\s*\\frac\s*\{\s*(-?\d+(?:\.\d+)?)\s*\}\s*\{\s*(-?\d+(?:\.\d+)?)\s*\}$|^([-+]?)\s*\\frac\s*(\d)(\d)$")
_SLASH = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$")
_MIXED = re.compile(r"^(-?\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}$")
_SCI = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d{1,3})\s*\}?$")


@dataclass(frozen=True)
class Number:
    value: Fraction
    decimals: int | None  # digits after the point when written as a decimal


_MIXED_SLASH = re.compile(r"^(-?\d+)\s+(\d+)\s*/\s*(\d+)$")
_REPEATING = re.compile(r"^(-?)(\d*)\.(\d*)\\overline\{(\d+)\}$")


def parse_number(s: str) -> Number | None:
    s = s.strip()
    m = _MIXED_SLASH.match(s)
    if m and int(m.group(3)) != 0 and int(m.group(2)) < int(m.group(3)):  # '2 1/4' is a mixed number
        whole, frac = int(m.group(1)), Fraction(int(m.group(2)), int(m.group(3)))
        return Number(whole - frac if m.group(1).startswith("-") else whole + frac, None)
    m = _REPEATING.match(s.replace(" ", ""))
    if m:  # 0.1\overline{6} = 1/6
        sign, whole, fixed, rep = m.groups()
        value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed)) + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return Number(-value if sign else value, None)
    s = s.replace(" ", "").strip().lstrip("+") if len(s) < 60 else s
    s = re.sub(r"^\((-?[\d.]+)\)$", r"\1", s)
    if _NUM.match(s):
        mantissa = s.lower().split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else None
        if "e" in s.lower() and abs(int(s.lower().split("e")[1])) > 400:
            return None
        return Number(Fraction(s), decimals)
    m = _FRAC.match(s)
    if m:
        if m.group(5):
            sign, num, den = m.group(4), m.group(5), m.group(6)
        else:
            sign, num, den = m.group(1), m.group(2), m.group(3)
        if Fraction(den) == 0:
            return None
        value = Fraction(num) / Fraction(den)
        return Number(-value if sign == "-" else value, None)
    m = _SLASH.match(s)
    if m and int(m.group(2)) != 0:
        return Number(Fraction(int(m.group(1)), int(m.group(2))), None)
    m = _MIXED.match(s)
    if m and int(m.group(3)) != 0:
        whole = int(m.group(1))
        frac = Fraction(int(m.group(2)), int(m.group(3)))
        return Number(whole - frac if m.group(1).startswith("-") else whole + frac, None)
    m = _SCI.match(s)
    if m:
        mantissa = Fraction(m.group(1))
        return Number(mantissa * Fraction(10) ** int(m.group(2)), None)
    return None


def numbers_equal(gold: Number, answer: Number) -> Outcome:
    if gold.value == answer.value:
        return Outcome(True, "exact number")
    rounding = current_policy().rounding
    if rounding is not None and gold.decimals is None:  # the prompt asks for a rounded answer to an exact gold
        return rounded_match(gold.value, answer.value, answer.decimals, rounding)
    # the side written with fewer decimals decides the precision
    decs = [d for d in (gold.decimals, answer.decimals) if d is not None]
    if not decs:
        return Outcome(False, "exact numbers differ")
    if gold.decimals is not None and answer.decimals is not None and answer.decimals < gold.decimals:
        # the gold states its precision: '3.14' is not '3.14159' (an answer rounded more coarsely)
        return Outcome(False, f"answer rounded to {answer.decimals} decimals, gold has {gold.decimals}")
    return close_decimal(gold.value, answer.value, min(decs))


def close_decimal(x: Fraction, y: Fraction, decimals: int) -> Outcome:
    diff = abs(x - y)
    half_ulp = Fraction(1, 2 * 10**decimals) * (1 + Fraction(1, 10**9))
    if diff <= half_ulp and diff <= REL_TOL * max(abs(x), abs(y)):
        return Outcome(True, f"decimal within half a unit of the {decimals}th decimal")
    return Outcome(False, "numbers differ")


# --------------------------------------------------------------------------------------------- leaves

_CHOICE = re.compile(r"^\(?\s*(?:\\text\{\s*\(?\s*([A-Ea-e])\s*\)?\s*\}|([A-E]))\s*\)?$")  # bare 'e' is Euler's number
_CHOICE_ANSWER = re.compile(r"^\(?\s*(?:\\text\{\s*\(?\s*([A-Ea-e])\s*\)?\s*\}|([A-Ea-e]))\s*\)?(?:\s*[.:)]\s.*|\s*[.:)])?$", re.S)
_CHOICE_WITH_TEXT = re.compile(r"^(?:\\text\{\s*\(([A-E])\)\s*\}|\\text\{\s*([A-E])\s*[.:)]\s*\}|\(([A-E])\)|([A-E])[.:)])\s*(?:\S.*)?$", re.S)
_TEXT = re.compile(r"^(?:\\text\{[^{}\\]*\}|\s)+$")
_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}$", re.S)
_BRACKETED = re.compile(r"^([(\[])(.*)([)\]])$", re.S)
_BASE = re.compile(r"^([0-9A-Fa-f]+)_\{?(\d+)\}?$")


def _choice(s: str) -> str | None:
    m = _CHOICE.match(s.strip())
    return (m.group(1) or m.group(2)).upper() if m else None


def _plain_text(s: str) -> str:
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


_NESTING = threading.local()
MAX_STRUCTURE_DEPTH = 16


def leaf_equal(gold: str, answer: str, leaf: Leaf) -> Outcome:
    """Compare one gold item with one answer item (recursing into tuples, unions, relations)."""
    depth = getattr(_NESTING, "depth", 0)
    if depth >= MAX_STRUCTURE_DEPTH:
        raise OverLimits("answer", f"structure nested deeper than {MAX_STRUCTURE_DEPTH}")
    _NESTING.depth = depth + 1
    try:
        return _leaf_equal(gold, answer, leaf)
    finally:
        _NESTING.depth = depth


def _leaf_equal(gold: str, answer: str, leaf: Leaf) -> Outcome:
    if gold == answer:
        return Outcome(True, "identical")
    gold, answer = _complement(gold), _complement(answer)
    if _choice(gold) is None and not _CHOICE_WITH_VALUE.match(gold):
        labelled = _LABELLED_CHOICE.match(answer.strip())
        if labelled:  # '(C) 12' for the gold '12': the value of the chosen option is the answer
            answer = labelled.group(1).strip()
    if re.fullmatch(r"[A-Za-z][A-Za-z ]+", gold) and _plain_text(gold) == _plain_text(answer) and len(gold) > 2:
        return Outcome(True, "same text")
    gold_choice = _choice(gold)
    if gold_choice is not None:
        answer = re.sub(r"^(?:option|choice)\s+", "", answer.strip(), flags=re.I)
        m = _CHOICE_ANSWER.match(answer.strip())
        letter = (m.group(1) or m.group(2)).upper() if m else None
        if letter is None:  # '(B) 12', '\\text{(C)} 24', 'D. 7': an upper-case option label with its value
            m = _CHOICE_WITH_TEXT.match(answer.strip())
            letter = next(g for g in m.groups() if g) if m else None
        if letter is None:  # '4 \\text{ (A)}', 'A (4)': the letter written after or before a bracketed value
            m = re.match(r"^(?:.+?)\s*(?:\\text\{\s*\(([A-E])\)\s*\}|\(([A-E])\))$|^([A-E])\s*\(.+\)$", answer.strip(), re.S)
            letter = next(g for g in m.groups() if g) if m else None
        return Outcome(letter == gold_choice, f"choice {gold_choice} vs {letter}")
    if _TEXT.match(gold) or _TEXT.match(answer):
        if _plain_text(gold) == _plain_text(answer):
            return Outcome(True, "same text")
        if _TEXT.match(gold) and not re.search(r"\d", gold):
            return Outcome(False, "different text")

    # relations
    g_terms, g_ops = _relation_chain(gold)
    a_terms, a_ops = _relation_chain(answer)
    if g_ops or a_ops:
        return _relations_equal(gold, answer, g_terms, g_ops, a_terms, a_ops, leaf)

    # unions and brackets
    if "\\cup" in gold or "\\cup" in answer:
        g_parts = [p.strip() for p in _top_level_split(gold, re.compile(r"\s*\\cup\s*"))]
        a_parts = [p.strip() for p in _top_level_split(answer, re.compile(r"\s*\\cup\s*"))]
        return _unordered(g_parts, a_parts, leaf, "union")
    g_br, a_br = _BRACKETED.match(gold), _BRACKETED.match(answer)
    if g_br and a_br and _balanced(g_br.group(2)) and _balanced(a_br.group(2)):
        g_items = _top_level_split(g_br.group(2), _TUPLE_SEP)
        a_items = _top_level_split(a_br.group(2), _TUPLE_SEP)
        if len(g_items) > 1 or len(a_items) > 1:
            if len(g_items) != len(a_items):
                return Outcome(False, "tuples of different length")
            if (g_br.group(1), g_br.group(3)) != (a_br.group(1), a_br.group(3)):
                return Outcome(False, "different brackets (open vs closed end)")
            for g, a in zip(g_items, a_items):
                sub = leaf_equal(_infinity(g), _infinity(a), leaf)
                if not sub.equal:
                    return Outcome(False, f"tuple element {g!r} vs {a!r}: {sub.how}")
            return Outcome(True, "tuple elementwise")
    g_inner = _unwrap_parens(gold)
    a_inner = _unwrap_parens(answer)
    if (g_inner, a_inner) != (gold, answer):
        return leaf_equal(g_inner, a_inner, leaf)

    # matrices (a column or row vector also equals the tuple of its entries)
    g_mat, a_mat = _MATRIX.match(gold), _MATRIX.match(answer)
    if bool(g_mat) != bool(a_mat) and (g_br or a_br):
        vec = _vector_as_tuple(g_mat or a_mat)
        if vec is not None:
            return leaf_equal(vec, answer, leaf) if g_mat else leaf_equal(gold, vec, leaf)
    if g_mat and a_mat and "\\begin" not in g_mat.group(2) + a_mat.group(2):
        g_rows = [_top_level_split(r, re.compile(r"\s*&\s*")) for r in _matrix_rows(g_mat.group(2))]
        a_rows = [_top_level_split(r, re.compile(r"\s*&\s*")) for r in _matrix_rows(a_mat.group(2))]
        if [len(r) for r in g_rows] != [len(r) for r in a_rows]:
            return Outcome(False, "matrices of different shape")
        for g_row, a_row in zip(g_rows, a_rows):
            for g, a in zip(g_row, a_row):
                sub = leaf_equal(g, a, leaf)
                if not sub.equal:
                    return Outcome(False, f"matrix entry {g!r} vs {a!r}: {sub.how}")
        return Outcome(True, "matrix elementwise")

    # ratios 'a:b' (also clock times '12:00')
    g_ratio, a_ratio = _RATIO.match(gold), _RATIO.match(answer)
    if g_ratio and a_ratio:
        g_nums = [parse_number(x.strip()) for x in g_ratio.groups()]
        a_nums = [parse_number(x.strip()) for x in a_ratio.groups()]
        if None not in g_nums and None not in a_nums:
            if [n.value for n in g_nums] == [n.value for n in a_nums]:
                return Outcome(True, "same ratio")
            if g_nums[1].value and a_nums[1].value and g_nums[0].value * a_nums[1].value == a_nums[0].value * g_nums[1].value:
                return Outcome(True, "proportional ratio")
            return Outcome(False, "different ratio")

    # quantities
    gq, aq = split_quantity(gold), split_quantity(answer)
    if gq.unit and aq.unit and gq.unit != aq.unit:
        return Outcome(False, f"units differ: {gq.unit} vs {aq.unit}")
    g_val, a_val = gq.value, aq.value
    if not g_val or not a_val:
        return Outcome(False, "empty value")
    if gq.degrees != aq.degrees and "\\pi" in (a_val if gq.degrees else g_val):
        # 45^\circ vs \frac{\pi}{4}: the degree side is converted to radians
        if gq.degrees:
            g_val = f"({g_val})\\cdot\\frac{{\\pi}}{{180}}"
        else:
            a_val = f"({a_val})\\cdot\\frac{{\\pi}}{{180}}"
    g_base, a_base = _BASE.match(g_val.replace(" ", "")), _BASE.match(a_val.replace(" ", ""))
    if g_base or a_base:
        same = bool(g_base and a_base and g_base.groups() == a_base.groups())
        return Outcome(same, "base-n digits")
    g_val, a_val = _cheap_structure(g_val), _cheap_structure(a_val)
    g_num, a_num = parse_number(g_val), parse_number(a_val)
    if g_num is not None and a_num is not None:
        result = numbers_equal(g_num, a_num)
        if not result.equal and gq.percent != aq.percent:
            scaled = Number(g_num.value / 100, None) if gq.percent else g_num
            other = Number(a_num.value / 100, None) if aq.percent else a_num
            alt = numbers_equal(Number(scaled.value, g_num.decimals), Number(other.value, a_num.decimals))
            if alt.equal:
                return Outcome(True, "percent as a fraction")
        return result
    if (g_num is None) != (a_num is None) and _is_simple_text(g_val if g_num is None else a_val):
        return Outcome(False, "number vs text")
    if g_num is not None and re.fullmatch(r"[A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*", a_val):
        return Outcome(False, "number vs letters")
    for side, value in (("gold", g_val), ("answer", a_val)):
        why = over_limits(value)
        if why:
            raise OverLimits(side, why)
    return leaf(g_val, a_val)


_LABELLED_CHOICE = re.compile(r"^(?:\\text\{\s*\(?[A-E]\)\s*\}|\\text\{\s*[A-E]\s*\}\s*[.:)]|\([A-E]\)|[A-E][.:)])\s*(\S.*)$", re.S)
_UNIVERSE = re.compile(r"^(?:\\mathbb\s*\{?\s*R\s*\}?|\\R(?![a-zA-Z])|\(\s*-\s*\\infty\s*,\s*\\infty\s*\))\s*(?:\\setminus|\\backslash|-)\s*(.+)$", re.S)


def _complement(s: str) -> str:
    """'\\mathbb{R} \\setminus [a, b]' -> '(-\\infty, a) \\cup (b, \\infty)'; a finite set of numbers
    '\\mathbb{R} \\setminus \\{1, -1\\}' -> the intervals between them. Anything else is left as written."""
    m = _UNIVERSE.match(s.strip()) if "\\" in s else None
    if m is None:
        return s
    removed = m.group(1).strip()
    interval = _BRACKETED.match(removed)
    if interval and _balanced(interval.group(2)):
        ends = _top_level_split(interval.group(2), _TUPLE_SEP)
        if len(ends) != 2:
            return s
        lo, hi = (_infinity(e) for e in ends)
        pieces = []
        if lo != "-\\infty":
            pieces.append(f"(-\\infty, {lo}" + (")" if interval.group(1) == "[" else "]"))
        if hi != "\\infty":
            pieces.append(("(" if interval.group(3) == "]" else "[") + f"{hi}, \\infty)")
        return " \\cup ".join(pieces) if pieces else "\\emptyset"
    if removed.startswith("\\{") and removed.endswith("\\}") and _balanced(removed[2:-2]):
        items = _top_level_split(removed[2:-2], _TUPLE_SEP)
        numbers = [parse_number(i) for i in items]
        if not items or any(n is None for n in numbers):
            return s
        points = [i for _, i in sorted(zip((n.value for n in numbers), items))]
        points = list(dict.fromkeys(points))
        ends = ["-\\infty", *points, "\\infty"]
        return " \\cup ".join(f"({a}, {b})" for a, b in zip(ends, ends[1:]))
    return s


_ADDEND = re.compile(r"\s*([-+])\s*")


def _cheap_structure(s: str) -> str:
    """An expression that looks expensive but is cheap to decide: top-level terms that cancel
    ('2^{100000} - 2^{100000}', '1000! - 1000!') or repeat ('1+1+...+1'), added as exact rationals when every
    term left is a number. Returns the value, or ``s`` unchanged (the caps then apply as before)."""
    if len(s) > MAX_INPUT_CHARS or ("+" not in s and "-" not in s):
        return s
    counts: dict[str, int] = {}
    terms = _signed_terms(s.strip())
    for term in terms:
        m = re.match(r"^([-+])\s*(.+)$", term, re.S)
        if m is None:
            return s
        factors = _top_level_split(re.sub(r"\s+", "", m.group(2)), _PRODUCT)
        body = "\\cdot".join(sorted(_unwrap_parens(f) for f in factors))  # '2\\cdot 3^{n}' is '3^{n}\\cdot 2'
        counts[body] = counts.get(body, 0) + (1 if m.group(1) == "+" else -1)
    if len(counts) == len(terms) and over_limits(s) is None:
        return s  # nothing cancels or repeats, and the caps allow it: the usual route
    total = Fraction(0)
    for body, count in counts.items():
        if count == 0:
            continue
        value = parse_number(body)
        if value is None:
            return s
        total += count * value.value
    return str(total.numerator) if total.denominator == 1 else f"{total.numerator}/{total.denominator}"


_PRODUCT = re.compile(r"\\cdot|\\times|\*")


def _signed_terms(s: str) -> list[str]:
    """'a - b + c' -> ['+a', '-b', '+c'], splitting only where no bracket is open."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in "+-" and depth == 0 and i > 0 and s[i - 1] not in "^_*/":
            terms.append(s[start:i])
            start = i
    terms.append(s[start:])
    return [t if t.lstrip()[:1] in ("+", "-") else "+" + t for t in (t.strip() for t in terms) if t]


def _is_simple_text(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z ]{2,}", s)) and len(s) > 3 and " " in s.strip() or bool(_TEXT.match(s))


def _infinity(s: str) -> str:
    return s.replace("+\\infty", "\\infty").replace("+ \\infty", "\\infty").replace("\\infin", "\\infty")


def _unwrap_parens(s: str) -> str:
    m = re.match(r"^[(\[]\s*(\\begin\{(\w+)\}.*\\end\{\2\})\s*[)\]]$", s, re.S)
    if m and s.count("\\begin") == 1:
        return m.group(1)  # '[\\begin{array}...\\end{array}]'

    while len(s) > 2 and s[0] == "(" and s[-1] == ")" and _balanced(s[1:-1]) and "," not in s:
        s = s[1:-1].strip()
    while len(s) > 2 and s[0] == "{" and s[-1] == "}" and _balanced(s[1:-1]):
        s = s[1:-1].strip()
    return s


def _vector_as_tuple(m: re.Match) -> str | None:
    if "\\begin" in m.group(2):
        return None
    rows = [_top_level_split(r, re.compile(r"\s*&\s*")) for r in _matrix_rows(m.group(2))]
    if len(rows) > 1 and all(len(r) == 1 for r in rows):
        return "(" + ", ".join(r[0] for r in rows) + ")"
    if len(rows) == 1 and len(rows[0]) > 1:
        return "(" + ", ".join(rows[0]) + ")"
    return None


def _matrix_rows(body: str) -> list[str]:
    rows = [r.strip() for r in re.split(r"\\\\", body)]
    return [r for r in rows if r and r != "\\hline"]


def _unordered(gold_items: list[str], answer_items: list[str], leaf: Leaf, what: str) -> Outcome:
    if len(gold_items) != len(answer_items):
        return Outcome(False, f"{what}: {len(answer_items)} answers for {len(gold_items)} gold items")
    remaining = list(answer_items)
    for g in gold_items:
        for j, a in enumerate(remaining):
            if leaf_equal(g, a, leaf).equal:
                del remaining[j]
                break
        else:
            return Outcome(False, f"{what}: no answer matches {g!r}")
    return Outcome(True, f"{what}: all {len(gold_items)} items match")


_FLIP = {"<": ">", ">": "<", "\\le": "\\ge", "\\ge": "\\le"}


def _as_interval(terms: list[str], ops: list[str]) -> tuple[str, str] | None:
    """'a < x \\le b' / 'x > a' / 'x \\in S' -> (variable, interval string)."""
    if ops == ["\\in"]:
        return terms[0], terms[1]
    if ops == ["\\ne"] and _LABEL.match(terms[0]) and not _LABEL.match(terms[1]):  # 'x \\ne 3': everything but 3
        return terms[0], f"(-\\infty, {terms[1]}) \\cup ({terms[1]}, \\infty)"
    if not ops or any(op not in _FLIP for op in ops):
        return None
    if len(ops) == 1:
        lhs, op, rhs = terms[0], ops[0], terms[1]
        if _LABEL.match(rhs) and not _LABEL.match(lhs):
            lhs, rhs, op = rhs, lhs, _FLIP[op]
        if not _LABEL.match(lhs):
            return None
        if op in (">", "\\ge"):
            return lhs, ("(" if op == ">" else "[") + rhs + ", \\infty)"
        return lhs, "(-\\infty, " + rhs + (")" if op == "<" else "]")
    if len(ops) == 2 and _LABEL.match(terms[1]):
        lo, var, hi = terms
        if ops[0] in (">", "\\ge") and ops[1] in (">", "\\ge"):
            lo, hi, ops = hi, lo, [_FLIP[ops[1]], _FLIP[ops[0]]]
        if ops[0] in ("<", "\\le") and ops[1] in ("<", "\\le"):
            return var, ("(" if ops[0] == "<" else "[") + lo + ", " + hi + (")" if ops[1] == "<" else "]")
    return None


def _relations_equal(gold, answer, g_terms, g_ops, a_terms, a_ops, leaf: Leaf) -> Outcome:
    g_eq = bool(g_ops) and all(op in ("=", "\\approx") for op in g_ops)
    a_eq = bool(a_ops) and all(op in ("=", "\\approx") for op in a_ops)
    g_label, a_label = _label_value(gold), _label_value(answer)
    if g_eq and a_eq:
        g_lhs, a_lhs = g_terms[0], a_terms[0]
        if g_label is not None and a_label is not None and (g_lhs.replace(" ", "") == a_lhs.replace(" ", "")):
            return leaf_equal(g_label, a_label, leaf)
        return leaf(f"{g_lhs} = {g_terms[-1]}", f"{a_lhs} = {a_terms[-1]}")
    if g_eq and not a_ops:
        if g_label is not None:
            return leaf_equal(g_label, answer, leaf)
        return Outcome(False, "gold is an equation, the answer is not")
    if a_eq and not g_ops:
        if a_label is not None:
            return leaf_equal(gold, a_label, leaf)
        if not re.search(r"[a-zA-Z]", re.sub(r"\\(?:frac|sqrt|cdot|times|pi)", "", a_terms[0])):
            # '1/2 + 1/3 = 5/6': a computation, whose value is its last exact term ('\\sqrt2 \\approx 1.414' is '\\sqrt2')
            exact = [t for t, op in zip(a_terms[1:], a_ops) if op == "="]
            return leaf_equal(gold, exact[-1] if exact else a_terms[0], leaf)
        return Outcome(False, "answer is an equation, the gold is not")
    g_int = _as_interval(g_terms, g_ops) if g_ops else (None, gold)
    a_int = _as_interval(a_terms, a_ops) if a_ops else (None, answer)
    if g_int is not None and a_int is not None:
        g_var, g_set = g_int
        a_var, a_set = a_int
        if g_var is not None and a_var is not None and g_var.replace(" ", "") != a_var.replace(" ", ""):
            bare = {v.replace(" ", "").strip("|") for v in (g_var, a_var)}
            if len(bare) == 1 and ("|" in g_var) != ("|" in a_var):
                # '1 <= |z| <= 3/2' vs 'z in [-3/2,-1] U [1,3/2]': SymPy solves the one-variable condition
                g_side = gold if "|" in g_var else g_set
                a_side = answer if "|" in a_var else a_set
                return leaf(g_side, _infinity(a_side))
            return Outcome(False, f"different variables {g_var} vs {a_var}")
        return leaf_equal(_infinity(g_set), _infinity(a_set), leaf)
    if g_ops and a_ops:
        if len(g_ops) == 1 and len(a_ops) == 1:
            return leaf(gold, answer)
        if [o for o in g_ops] == [o for o in a_ops] and len(g_terms) == len(a_terms):
            for g, a in zip(g_terms, a_terms):
                if not leaf_equal(g, a, leaf).equal:
                    return Outcome(False, "chained relations differ")
            return Outcome(True, "chained relations termwise")
        return leaf(gold, answer)
    return Outcome(False, "relation vs value")


# --------------------------------------------------------------------------------------------- entry


def _dedupe(items: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for item in items:
        seen.setdefault(re.sub(r"\s+", "", item), item)
    return list(seen.values())


def _set_membership(item: str) -> list[str]:
    """'x \\in \\{4, -1\\}' -> '\\{4, -1\\}' (a solution set written as membership)."""
    lhs, op, rhs = _split_relation(item)
    if op == "\\in" and rhs.startswith("\\{") and _LABEL.match(lhs) and _strip_set_braces(rhs) != rhs:
        return split_items(rhs)
    return [item]


def _as_union(items: list[str], source: str) -> list[str]:
    """'x < -1 or x > 2' (one-variable inequalities in the same variable joined by 'or') -> one union of
    intervals. Joined by 'and' (an intersection) or by commas (ambiguous) they stay a list."""
    if len(items) == 2 and re.search(r"\band\b", source) and not re.search(r"\bor\b|,", source):
        return _as_intersection(items)
    if len(items) < 2 or not re.search(r"\bor\b", source) or re.search(r"\band\b|,", source):
        return items
    intervals = []
    for item in items:
        terms, ops = _relation_chain(item)
        found = _as_interval(terms, ops) if ops and "\\in" not in ops else None
        if found is None:
            return items
        intervals.append(found)
    if len({var.replace(" ", "") for var, _ in intervals}) != 1:
        return items
    return [f"{intervals[0][0]} \\in " + " \\cup ".join(_infinity(i) for _, i in intervals)]


def _as_intersection(items: list[str]) -> list[str]:
    """'x < 3 and x > -2' (a lower and an upper bound on one variable) -> 'x \\in (-2, 3)'."""
    found = []
    for item in items:
        terms, ops = _relation_chain(item)
        interval = _as_interval(terms, ops) if len(ops) == 1 and ops[0] in _FLIP else None
        if interval is None:
            return items
        found.append(interval)
    if found[0][0].replace(" ", "") != found[1][0].replace(" ", ""):
        return items
    lower = [i for _, i in found if i.endswith("\\infty)") and not i.startswith("(-\\infty")]
    upper = [i for _, i in found if i.startswith("(-\\infty") and not i.endswith("\\infty)")]
    if len(lower) != 1 or len(upper) != 1:
        return items
    lo = lower[0][: lower[0].rindex(",")]  # '(a' or '[a'
    hi = upper[0][upper[0].index(",") + 1 :]  # ' b)' or ' b]'
    return [f"{found[0][0]} \\in {lo},{hi}"]


def compare(gold_raw: str, answers: tuple[str, ...], leaf: Leaf, policy: Policy = DEFAULT_POLICY, forms: bool = False) -> Outcome:
    """Compare gold with the extracted answer(s). Raises NeedSympy (cheap pass) or OverLimits.

    ``answers`` are the parts of one answer, or with ``forms`` several equal forms of one answer
    (``\\boxed{\\frac12} = \\boxed{0.5}``): then every form must match the gold."""
    token = _POLICY.set(policy)
    try:
        if forms and len(answers) > 1:
            for form in answers:
                outcome = _compare(gold_raw, (form,), leaf, policy)
                if not outcome.equal:
                    return Outcome(False, f"equal forms: {form[:40]!r} does not match ({outcome.how})")
            return Outcome(True, f"all {len(answers)} equal forms match")
        return _compare(gold_raw, answers, leaf, policy)
    finally:
        _POLICY.reset(token)


def _compare(gold_raw: str, answers: tuple[str, ...], leaf: Leaf, policy: Policy) -> Outcome:
    if len(gold_raw) > MAX_INPUT_CHARS:
        raise OverLimits("gold", f"longer than {MAX_INPUT_CHARS} characters")
    if sum(len(a) for a in answers) > MAX_INPUT_CHARS or len(answers) > MAX_PARTS:
        raise OverLimits("answer", f"longer than {MAX_INPUT_CHARS} characters or more than {MAX_PARTS} parts")
    if "boxed" in gold_raw or "fbox" in gold_raw:  # a gold written as '\\boxed{...}'
        boxes = find_boxes(gold_raw)
        gold_raw = ", ".join(b[2] for b in boxes) if boxes else gold_raw
    if policy.decimal_comma == "always":
        gold_raw, answers = _decimal_commas(gold_raw), tuple(_decimal_commas(a) for a in answers)
    gold = _set_builder(normalize(gold_raw))
    if policy.decimal_comma == "auto" and len(answers) == 1 and _is_decimal(gold):
        answers = (_decimal_comma_auto(answers[0]),)
    parts = [_set_builder(_space_joiners(_APPROX_LEAD.sub("", normalize(a)))) for a in answers]
    if len(parts) == 1 and parts[0] == gold:
        return Outcome(True, "identical after normalisation")
    labelled_choice = _CHOICE_WITH_VALUE.match(gold)
    if labelled_choice:  # an AMC-style gold '\textbf{(C) }\frac{5}{7}': the letter, the value, or both
        return _choice_with_value(labelled_choice.group(1) or labelled_choice.group(2), labelled_choice.group(3), parts, leaf)
    g_items = _as_union(_dedupe([m for i in split_items(gold) for m in _set_membership(i)]), gold)
    a_items = _as_union(_dedupe([m for p in parts for i in split_items(p) for m in _set_membership(i)]), " or ".join(parts))
    if not g_items:
        raise OverLimits("gold", "is empty")
    if not a_items:
        return Outcome(False, "empty answer")
    if len(g_items) > MAX_PARTS or len(a_items) > MAX_PARTS:
        raise OverLimits("answer" if len(a_items) > MAX_PARTS else "gold", f"more than {MAX_PARTS} items")
    if len(g_items) == 1 and len(a_items) == 1:
        return leaf_equal(g_items[0], a_items[0], leaf)
    if len(g_items) == 1 and len(a_items) > 1 and all(_label_value(a) is not None for a in a_items):
        g_br = _BRACKETED.match(g_items[0])
        labels = [_relation_chain(a)[0][0].replace(" ", "") for a in a_items]
        if g_br and g_br.group(1) == "(" and len(set(labels)) == len(labels):
            # '(1, 2)' vs 'x = 1, y = 2': the labelled values, in the order written, form the tuple
            return leaf_equal(g_items[0], "(" + ", ".join(_label_value(a) for a in a_items) + ")", leaf)
    if len(a_items) == 1 and len(g_items) > 1 and all(_label_value(g) is not None for g in g_items):
        a_br = _BRACKETED.match(a_items[0])
        labels = [_relation_chain(g)[0][0].replace(" ", "") for g in g_items]
        if a_br and a_br.group(1) == "(" and len(set(labels)) == len(labels):
            return leaf_equal("(" + ", ".join(_label_value(g) for g in g_items) + ")", a_items[0], leaf)
    g_named, a_named = _named_values(g_items), _named_values(a_items)
    if g_named is not None and a_named is not None:  # 'p = 3, q = 5' vs 'p = 5, q = 3': the names matter
        if set(g_named) != set(a_named):
            return Outcome(False, f"named values differ: {sorted(g_named)} vs {sorted(a_named)}")
        for name, value in g_named.items():
            if not leaf_equal(value, a_named[name], leaf).equal:
                return Outcome(False, f"{name} differs")
        return Outcome(True, "named values match")
    g_labels = [_label_value(g) or g for g in g_items]
    a_labels = [_label_value(a) or a for a in a_items]
    return _unordered(g_labels, a_labels, leaf, "list")


_APPROX_LEAD = re.compile(r"^(?:\\approx|\\sim|~)\s*(?=\S)")  # '\\approx 3.162': an approximate value, judged as that decimal
_DIGIT_COMMA = re.compile(r"(?<=\d)(?:\{,\}|,)(?=\d)")
_ONE_COMMA_NUMBER = re.compile(r"^[\s$]*([-+−]?)(\d+)(?:\{,\}|,)(\d+)((?:\s|\\[,;: ]|~)*(?:\\(?:text|mathrm)\s*\{[^{}]*\}(?:\^\{?\d\}?)?|[a-zA-Z]{1,6}(?:\^\{?\d\}?)?)?)[\s$]*\.?\s*$")


def _is_decimal(s: str) -> bool:
    number = parse_number(s)
    return number is not None and number.decimals is not None


def _decimal_commas(s: str) -> str:
    """``decimal_comma=always``: every comma between two digits is a decimal point."""
    return _DIGIT_COMMA.sub(".", s)


def _decimal_comma_auto(answer: str) -> str:
    """``decimal_comma=auto``: '2,74' / '0,125' / '2{,}74' is a decimal when it is the whole answer and the
    comma cannot be a thousands separator (called only when the gold is one decimal number)."""
    m = _ONE_COMMA_NUMBER.match(answer)
    if m is None:
        return answer
    sign, whole, frac, unit = m.groups()
    if len(frac) == 3 and whole.lstrip("0"):
        return answer  # '2,740': a thousands separator
    return f"{sign}{whole}.{frac}{unit or ''}"


_JOINER = re.compile(r"(?:(?<=[\d})\],\s])|(?<=[=+\-*/^][a-zA-Z]))(or|and)(?=\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=)")


def _space_joiners(s: str) -> str:
    """'x=2orx=3' / 'x=1andy=2': 'or' / 'and' written without spaces between equations."""
    if s.count("=") < 2 or ("or" not in s and "and" not in s):
        return s
    return _JOINER.sub(r" \1 ", s)


def _named_values(items: list[str]) -> dict[str, str] | None:
    """{'p': '3', 'q': '5'} when every item is 'name = value' with distinct names; None otherwise."""
    named = {}
    for item in items:
        value = _label_value(item)
        if value is None:
            return None
        named[_relation_chain(item)[0][0].replace(" ", "")] = value
    if len({re.sub(r"_\{?\w+\}?$", "", name) for name in named}) == 1 and all("_" in name for name in named):
        return None  # 'x_1 = 2, x_2 = 3': numbered roots are an unordered list
    return named if len(named) == len(items) > 1 else None


_SET_BUILDER = re.compile(r"^\\\{\s*([a-zA-Z])\s*(?:\\in\s*\\mathbb\s*\{?R\}?\s*)?(?:\\mid|\||:)\s*(.+?)\s*\\\}$")
_CHOICE_WITH_VALUE = re.compile(r"^(?:\\text\{\s*\(([A-E])\)\s*\}|\(([A-E])\))\s*(\S.*)$", re.S)


def _set_builder(s: str) -> str:
    """'\\{x \\mid x > 2\\}' -> 'x > 2' (the condition of a set written in set-builder notation)."""
    m = _SET_BUILDER.match(s)
    return m.group(2) if m and m.group(1) in m.group(2) else s


def _choice_with_value(letter: str, value: str, parts: list[str], leaf: Leaf) -> Outcome:
    if len(parts) != 1:
        return Outcome(False, "several answers for one choice")
    answer = parts[0].strip()
    m = _CHOICE_ANSWER.match(answer) or _CHOICE_WITH_TEXT.match(answer)
    if m:  # the answer names a letter: it must be this one (and a value written with it must be this value)
        named = next(g for g in m.groups() if g).upper()
        if named != letter:
            return Outcome(False, f"choice {letter} vs {named}")
        rest = _CHOICE_WITH_VALUE.match(answer)
        if rest and not leaf_equal(value, rest.group(3), leaf).equal:
            return Outcome(False, f"choice {letter} with a different value")
        return Outcome(True, f"choice {letter}")
    return leaf_equal(value, answer, leaf)
