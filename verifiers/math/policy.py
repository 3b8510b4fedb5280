"""The request policy: how answers to one request may be written (rounding asked by the prompt, decimal
commas). Built once per request, passed to :func:`verifiers.math.compare.compare`, which makes it the
*current* policy for the comparison in progress (read by the number rules and the SymPy leaf), and part of
the verdict cache key. The rules themselves are in :mod:`verifiers.math.compare`'s docstring.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

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
    """Is ``2,74`` the decimal 2.74? See :mod:`verifiers.math.compare`'s docstring."""


DEFAULT_POLICY = Policy()
_POLICY: contextvars.ContextVar[Policy] = contextvars.ContextVar("math_policy", default=DEFAULT_POLICY)


def current_policy() -> Policy:
    """The policy of the :func:`compare` call in progress (read by the SymPy leaf in the worker)."""
    return _POLICY.get()


@contextmanager
def policy_in_force(policy: Policy) -> Iterator[None]:
    """Make ``policy`` the current policy for the duration of one comparison."""
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


# ----------------------------------------------------------------------- the prompt's rounding request

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
_R_NEAREST_POWER = re.compile(r"\b(?:to|round(?:ed|ing)?)\s+(?:the\s+)?nearest\s+0?(\.0*1)(?!\d)")
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
    text = _closing_sentences(prompt)
    found = [(m.start(), Rounding(decimals=_NEAREST[_nearest_key(m.group(1))])) for m in _R_NEAREST.finditer(text)]
    found += [(m.start(), Rounding(decimals=_count(m.group(1)))) for m in _R_DECIMALS.finditer(text)]
    found += [(m.start(), Rounding(decimals=len(m.group(1)) - 1)) for m in _R_NEAREST_POWER.finditer(text)]
    found += [(m.start(), Rounding(significant=_count(m.group(1)))) for m in _R_SIGNIFICANT.finditer(text)]
    if found:
        return max(found, key=lambda f: f[0])[1]  # the last request in the prompt is the one that applies
    return Rounding() if _R_ANY.search(text) else None


def _closing_sentences(prompt: str) -> str:
    """The last four sentences. The instruction is at the end ('... Express your answer to the nearest
    tenth.'); 'a frog jumps to the nearest integer' earlier in the problem is no request."""
    return " ".join([c for c in re.split(r"(?<=[.?!])\s+|\n+", prompt[-4000:]) if c.strip()][-4:])


def _nearest_key(word: str) -> str:
    word = re.sub(r"\s+", " ", word.lower())
    return word if word in _NEAREST else word.replace(" ", "-")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _WORD_NUMBERS[word.lower()]
