"""Quantities: a value with a unit, a percent sign or degrees, and the last step of every leaf.

Different units on the two sides differ (``5 cm`` vs ``5 m``); a unit on one side only is ignored
(``10\\text{ units}`` = ``10``); ``28\\%`` matches ``28`` and ``0.28``; ``45^\\circ`` against a value with
``\\pi`` is converted to radians. The values then compare as numbers when both parse, else go to the leaf
(SymPy) once within the input caps. Splitting a quantity is :func:`verifiers.math.normalize.split_quantity`.
"""

from __future__ import annotations

import re

from cohort.verifiers.math.choices import is_simple_text
from cohort.verifiers.math.normalize import over_limits, split_quantity
from cohort.verifiers.math.numbers import base_digits_equal, cheap_structure, parse_number, percent_equal
from cohort.verifiers.math.outcome import Leaf, Outcome, OverLimits

_LETTERS = re.compile(r"[A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*")


def quantities_equal(gold: str, answer: str, leaf: Leaf) -> Outcome:
    gq, aq = split_quantity(gold), split_quantity(answer)
    if gq.unit and aq.unit and gq.unit != aq.unit:
        return Outcome(False, f"units differ: {gq.unit} vs {aq.unit}")
    g_val, a_val = gq.value, aq.value
    if not g_val or not a_val:
        return Outcome(False, "empty value")
    g_val, a_val = _degrees_as_radians(g_val, gq.degrees, a_val, aq.degrees)
    base = base_digits_equal(g_val, a_val)
    if base is not None:
        return base
    g_val, a_val = cheap_structure(g_val), cheap_structure(a_val)
    g_num, a_num = parse_number(g_val), parse_number(a_val)
    if g_num is not None and a_num is not None:
        return percent_equal(g_num, a_num, gq.percent, aq.percent)
    if (g_num is None) != (a_num is None) and is_simple_text(g_val if g_num is None else a_val):
        return Outcome(False, "number vs text")
    if g_num is not None and _LETTERS.fullmatch(a_val):
        return Outcome(False, "number vs letters")
    for side, value in (("gold", g_val), ("answer", a_val)):
        why = over_limits(value)
        if why:
            raise OverLimits(side, why)
    return leaf(g_val, a_val)


def _degrees_as_radians(g_val: str, g_degrees: bool, a_val: str, a_degrees: bool) -> tuple[str, str]:
    """45^\\circ vs \\frac{\\pi}{4}: the degree side is converted to radians."""
    if g_degrees != a_degrees and "\\pi" in (a_val if g_degrees else g_val):
        if g_degrees:
            g_val = f"({g_val})\\cdot\\frac{{\\pi}}{{180}}"
        else:
            a_val = f"({a_val})\\cdot\\frac{{\\pi}}{{180}}"
    return g_val, a_val
