"""Numbers written in the usual ways, compared exactly (rationals), with the decimal and rounding policies
of :mod:`verifiers.math.compare`: integers, decimals, fractions, mixed numbers, repeating decimals,
scientific notation, ratios, base-n digits, decimal commas, and sums whose terms cancel or repeat.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from cohort.verifiers.math.normalize import over_limits
from cohort.verifiers.math.outcome import MAX_INPUT_CHARS, Outcome
from cohort.verifiers.math.policy import Rounding, current_policy
from cohort.verifiers.math.syntax import PRODUCT, top_level_split, unwrap_parens

REL_TOL = Fraction(1, 1000)

_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_FRAC = re.compile(r"^([-+]?)\s*\\frac\s*\{\s*(-?\d+(?:\.\d+)?)\s*\}\s*\{\s*(-?\d+(?:\.\d+)?)\s*\}$|^([-+]?)\s*\\frac\s*(\d)(\d)$")
_SLASH = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$")
_MIXED = re.compile(r"^(-?\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}$")
_SCI = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d{1,3})\s*\}?$")
_MIXED_SLASH = re.compile(r"^(-?\d+)\s+(\d+)\s*/\s*(\d+)$")
_REPEATING = re.compile(r"^(-?)(\d*)\.(\d*)\\overline\{(\d+)\}$")
_RATIO = re.compile(r"^([^:=<>]+):([^:=<>]+)$")
_BASE = re.compile(r"^([0-9A-Fa-f]+)_\{?(\d+)\}?$")


@dataclass(frozen=True)
class Number:
    value: Fraction
    decimals: int | None  # digits after the point when written as a decimal


# ------------------------------------------------------------------------------------------ parsing


def parse_number(s: str) -> Number | None:
    s = s.strip()
    number = _mixed_slash(s) or _repeating(s.replace(" ", ""))
    if number is not None:
        return number
    s = s.replace(" ", "").strip().lstrip("+") if len(s) < 60 else s
    s = re.sub(r"^\((-?[\d.]+)\)$", r"\1", s)
    if _NUM.match(s):
        return _decimal(s)
    return _latex_fraction(s) or _slash(s) or _mixed(s) or _scientific(s)


def _mixed_slash(s: str) -> Number | None:
    return _mixed(s, _MIXED_SLASH, proper=True)  # '2 1/4' is a mixed number


def _repeating(s: str) -> Number | None:
    m = _REPEATING.match(s)
    if m:  # 0.1\overline{6} = 1/6
        sign, whole, fixed, rep = m.groups()
        value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed)) + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return Number(-value if sign else value, None)
    return None


def _decimal(s: str) -> Number | None:
    mantissa = s.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else None
    if "e" in s.lower() and abs(int(s.lower().split("e")[1])) > 400:
        return None
    return Number(Fraction(s), decimals)


def _latex_fraction(s: str) -> Number | None:
    m = _FRAC.match(s)
    if not m:
        return None
    if m.group(5):
        sign, num, den = m.group(4), m.group(5), m.group(6)
    else:
        sign, num, den = m.group(1), m.group(2), m.group(3)
    if Fraction(den) == 0:
        return None
    value = Fraction(num) / Fraction(den)
    return Number(-value if sign == "-" else value, None)


def _slash(s: str) -> Number | None:
    m = _SLASH.match(s)
    if m and int(m.group(2)) != 0:
        return Number(Fraction(int(m.group(1)), int(m.group(2))), None)
    return None


def _mixed(s: str, pattern: re.Pattern = _MIXED, proper: bool = False) -> Number | None:
    """A whole number and a fraction (``proper``: only a fraction below 1)."""
    m = pattern.match(s)
    if m and int(m.group(3)) != 0 and not (proper and int(m.group(2)) >= int(m.group(3))):
        whole, frac = int(m.group(1)), Fraction(int(m.group(2)), int(m.group(3)))
        return Number(whole - frac if m.group(1).startswith("-") else whole + frac, None)
    return None


def _scientific(s: str) -> Number | None:
    m = _SCI.match(s)
    if m:
        mantissa = Fraction(m.group(1))
        return Number(mantissa * Fraction(10) ** int(m.group(2)), None)
    return None


def is_decimal(s: str) -> bool:
    number = parse_number(s)
    return number is not None and number.decimals is not None


# ------------------------------------------------------------------------------------------ equality


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


def percent_equal(gold: Number, answer: Number, gold_percent: bool, answer_percent: bool) -> Outcome:
    """Two numbers, either written with a percent sign: ``28\\%`` is ``28`` and also ``0.28``."""
    result = numbers_equal(gold, answer)
    if not result.equal and gold_percent != answer_percent:
        scaled = Number(gold.value / 100, None) if gold_percent else gold
        other = Number(answer.value / 100, None) if answer_percent else answer
        alt = numbers_equal(Number(scaled.value, gold.decimals), Number(other.value, answer.decimals))
        if alt.equal:
            return Outcome(True, "percent as a fraction")
    return result


def ratio_equal(gold: str, answer: str) -> Outcome | None:
    """'a:b' (also clock times '12:00') on both sides, with numbers: same or proportional; None otherwise."""
    g_ratio, a_ratio = _RATIO.match(gold), _RATIO.match(answer)
    if not (g_ratio and a_ratio):
        return None
    g_nums = [parse_number(x.strip()) for x in g_ratio.groups()]
    a_nums = [parse_number(x.strip()) for x in a_ratio.groups()]
    if None in g_nums or None in a_nums:
        return None
    if [n.value for n in g_nums] == [n.value for n in a_nums]:
        return Outcome(True, "same ratio")
    if g_nums[1].value and a_nums[1].value and g_nums[0].value * a_nums[1].value == a_nums[0].value * g_nums[1].value:
        return Outcome(True, "proportional ratio")
    return Outcome(False, "different ratio")


def base_digits_equal(gold: str, answer: str) -> Outcome | None:
    """'12_{8}' (digits in base n) on either side: equal only when written the same; None otherwise."""
    g_base, a_base = _BASE.match(gold.replace(" ", "")), _BASE.match(answer.replace(" ", ""))
    if g_base or a_base:
        return Outcome(bool(g_base and a_base and g_base.groups() == a_base.groups()), "base-n digits")
    return None


# ------------------------------------------------------------------------------------------ cheap sums


def cheap_structure(s: str) -> str:
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
        factors = top_level_split(re.sub(r"\s+", "", m.group(2)), PRODUCT)
        body = "\\cdot".join(sorted(unwrap_parens(f) for f in factors))  # '2\\cdot 3^{n}' is '3^{n}\\cdot 2'
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


# ------------------------------------------------------------------------------------------ decimal commas

_DIGIT_COMMA = re.compile(r"(?<=\d)(?:\{,\}|,)(?=\d)")
_ONE_COMMA_NUMBER = re.compile(r"^[\s$]*([-+−]?)(\d+)(?:\{,\}|,)(\d+)((?:\s|\\[,;: ]|~)*(?:\\(?:text|mathrm)\s*\{[^{}]*\}(?:\^\{?\d\}?)?|[a-zA-Z]{1,6}(?:\^\{?\d\}?)?)?)[\s$]*\.?\s*$")


def decimal_commas(s: str) -> str:
    """``decimal_comma=always``: every comma between two digits is a decimal point."""
    return _DIGIT_COMMA.sub(".", s)


def decimal_comma_auto(answer: str) -> str:
    """``decimal_comma=auto``: '2,74' / '0,125' / '2{,}74' is a decimal when it is the whole answer and the
    comma cannot be a thousands separator (called only when the gold is one decimal number)."""
    m = _ONE_COMMA_NUMBER.match(answer)
    if m is None:
        return answer
    sign, whole, frac, unit = m.groups()
    if len(frac) == 3 and whole.lstrip("0"):
        return answer  # '2,740': a thousands separator
    return f"{sign}{whole}.{frac}{unit or ''}"
