"""Is an extracted answer equivalent to the gold answer? Structure first, SymPy only for leaves.

This module is the entry point and the dispatcher; each kind of answer has its module:
:mod:`~verifiers.math.numbers` (numbers, decimal and rounding rules, decimal commas),
:mod:`~verifiers.math.structures` (lists, sets, tuples, intervals, unions, matrices, named values),
:mod:`~verifiers.math.relations` (equations, inequalities, membership), :mod:`~verifiers.math.choices`
(multiple choice, text), :mod:`~verifiers.math.units` (quantities: units, percent, degrees), over the shared
:mod:`~verifiers.math.syntax` (splitting), :mod:`~verifiers.math.outcome` (result types) and
:mod:`~verifiers.math.policy` (the request policy).

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

import re
import threading

from cohort.verifiers.math.choices import (choice_equal, choice_with_value_equal, gold_choice_with_value,
                                           labelled_value, text_equal, words_equal)
from cohort.verifiers.math.extract import find_boxes
from cohort.verifiers.math.normalize import bracket_depth, normalize
from cohort.verifiers.math.numbers import decimal_comma_auto, decimal_commas, is_decimal, ratio_equal
from cohort.verifiers.math.outcome import MAX_INPUT_CHARS, MAX_PARTS, Leaf, NeedSympy, Outcome, OverLimits, cheap_leaf
from cohort.verifiers.math.policy import (DECIMAL_COMMA_CHOICES, DEFAULT_POLICY, Policy, Rounding, current_policy,
                                          policy_in_force, rounding_request)
from cohort.verifiers.math.relations import as_union, relations_equal
from cohort.verifiers.math.structures import (complement, labelled_tuple, matrix_equal, named_values_equal,
                                              set_builder, set_membership, tuple_equal, union_equal, unordered)
from cohort.verifiers.math.syntax import dedupe, label_value, relation_chain, split_items, unwrap_parens
from cohort.verifiers.math.units import quantities_equal

__all__ = [
    "DECIMAL_COMMA_CHOICES", "DEFAULT_POLICY", "MAX_INPUT_CHARS", "MAX_PARTS", "MAX_STRUCTURE_DEPTH", "Leaf", "NeedSympy",
    "Outcome", "OverLimits", "Policy", "Rounding", "cheap_leaf", "compare", "current_policy", "leaf_equal", "rounding_request",
    "side_terms",
]

MAX_STRUCTURE_DEPTH = 16
_NESTING = threading.local()


def compare(gold_raw: str, answers: tuple[str, ...], leaf: Leaf, policy: Policy = DEFAULT_POLICY, forms: bool = False) -> Outcome:
    """Compare gold with the extracted answer(s). Raises NeedSympy (cheap pass) or OverLimits.

    ``answers`` are the parts of one answer, or with ``forms`` several equal forms of one answer
    (``\\boxed{\\frac12} = \\boxed{0.5}``): then every form must match the gold."""
    with policy_in_force(policy):
        if forms and len(answers) > 1:
            for form in answers:
                outcome = _compare(gold_raw, (form,), leaf, policy)
                if not outcome.equal:
                    return Outcome(False, f"equal forms: {form[:40]!r} does not match ({outcome.how})")
            return Outcome(True, f"all {len(answers)} equal forms match")
        return _compare(gold_raw, answers, leaf, policy)


class _TooDeep(OverLimits):
    """The structure recursion reached MAX_STRUCTURE_DEPTH: the answer's doing unless the gold is that deep."""


def _compare(gold_raw: str, answers: tuple[str, ...], leaf: Leaf, policy: Policy) -> Outcome:
    try:
        return _compare_items(gold_raw, answers, leaf, policy)
    except _TooDeep as exc:
        if bracket_depth(gold_raw) >= MAX_STRUCTURE_DEPTH:  # a matching answer must not be blamed for the depth
            raise OverLimits("gold", f"structure nested deeper than {MAX_STRUCTURE_DEPTH}") from None
        raise OverLimits("answer", exc.why) from None


def _compare_items(gold_raw: str, answers: tuple[str, ...], leaf: Leaf, policy: Policy) -> Outcome:
    _check_input_caps(gold_raw, answers)
    gold, parts = _normalized(gold_raw, answers, policy)
    if len(parts) == 1 and parts[0] == gold:
        return Outcome(True, "identical after normalisation")
    eq = _item_equal(leaf)
    labelled_choice = gold_choice_with_value(gold)
    if labelled_choice:  # an AMC-style gold '\textbf{(C) }\frac{5}{7}': the letter, the value, or both
        return choice_with_value_equal(*labelled_choice, parts, eq)
    g_items = _items([gold], gold)
    a_items = _items(parts, " or ".join(parts))
    if not g_items:
        raise OverLimits("gold", "is empty")
    if not a_items:
        return Outcome(False, "empty answer")
    if len(g_items) > MAX_PARTS or len(a_items) > MAX_PARTS:
        raise OverLimits("answer" if len(a_items) > MAX_PARTS else "gold", f"more than {MAX_PARTS} items")
    if len(g_items) == 1 and len(a_items) == 1:
        return eq(g_items[0], a_items[0])
    decided = labelled_tuple(g_items, a_items, eq) or named_values_equal(g_items, a_items, eq)
    if decided is not None:
        return decided
    g_labels = [label_value(g) or g for g in g_items]
    a_labels = [label_value(a) or a for a in a_items]
    return unordered(g_labels, a_labels, eq, "list")


def side_terms(text: str) -> list[str]:
    """The leaf terms of one side alone (items split, labels and relations opened), for the attribution
    probes (:func:`verifiers.math._worker.probe`): what SymPy would parse on that side."""
    norm = set_builder(_space_joiners(_APPROX_LEAD.sub("", normalize(text))))
    terms: list[str] = []
    for item in _items([norm], norm)[:MAX_PARTS]:
        value = label_value(item) or item
        terms.extend(t for t in relation_chain(value)[0] if t.strip())
    return terms


def _check_input_caps(gold_raw: str, answers: tuple[str, ...]) -> None:
    if len(gold_raw) > MAX_INPUT_CHARS:
        raise OverLimits("gold", f"longer than {MAX_INPUT_CHARS} characters")
    if sum(len(a) for a in answers) > MAX_INPUT_CHARS or len(answers) > MAX_PARTS:
        raise OverLimits("answer", f"longer than {MAX_INPUT_CHARS} characters or more than {MAX_PARTS} parts")


_APPROX_LEAD = re.compile(r"^(?:\\approx|\\sim|~)\s*(?=\S)")  # '\\approx 3.162': an approximate value, judged as that decimal
_JOINER = re.compile(r"(?:(?<=[\d})\],\s])|(?<=[=+\-*/^][a-zA-Z]))(or|and)(?=\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=)")


def _normalized(gold_raw: str, answers: tuple[str, ...], policy: Policy) -> tuple[str, list[str]]:
    """The gold and the answer parts, normalised, with boxes in the gold and decimal commas resolved."""
    if "boxed" in gold_raw or "fbox" in gold_raw:  # a gold written as '\\boxed{...}'
        boxes = find_boxes(gold_raw)
        gold_raw = ", ".join(b[2] for b in boxes) if boxes else gold_raw
    if policy.decimal_comma == "always":
        gold_raw, answers = decimal_commas(gold_raw), tuple(decimal_commas(a) for a in answers)
    gold = set_builder(normalize(gold_raw))
    if policy.decimal_comma == "auto" and len(answers) == 1 and is_decimal(gold):
        answers = (decimal_comma_auto(answers[0]),)
    parts = [set_builder(_space_joiners(_APPROX_LEAD.sub("", normalize(a)))) for a in answers]
    return gold, parts


def _space_joiners(s: str) -> str:
    """'x=2orx=3' / 'x=1andy=2': 'or' / 'and' written without spaces between equations."""
    if s.count("=") < 2 or ("or" not in s and "and" not in s):
        return s
    return _JOINER.sub(r" \1 ", s)


def _items(parts: list[str], source: str) -> list[str]:
    """The top-level items of one side: lists split, solution sets opened, duplicates dropped, and
    one-variable inequalities joined by 'or' / 'and' made one union / interval."""
    items = [m for p in parts for i in split_items(p) for m in set_membership(i)]
    return as_union(dedupe(items), source)


# ------------------------------------------------------------------------------------------ items


def _item_equal(leaf: Leaf):
    """``leaf_equal`` with ``leaf`` bound: the recursion every kind of answer compares its parts with."""

    def eq(gold: str, answer: str) -> Outcome:
        return leaf_equal(gold, answer, leaf)

    return eq


def leaf_equal(gold: str, answer: str, leaf: Leaf) -> Outcome:
    """Compare one gold item with one answer item (recursing into tuples, unions, relations)."""
    depth = getattr(_NESTING, "depth", 0)
    if depth >= MAX_STRUCTURE_DEPTH:
        raise _TooDeep("answer", f"structure nested deeper than {MAX_STRUCTURE_DEPTH}")
    _NESTING.depth = depth + 1
    try:
        return _leaf_equal(gold, answer, leaf)
    finally:
        _NESTING.depth = depth


def _leaf_equal(gold: str, answer: str, leaf: Leaf) -> Outcome:
    """The rules in order; the first that applies decides (each returns None when it does not apply)."""
    if gold == answer:
        return Outcome(True, "identical")
    gold, answer = complement(gold), complement(answer)
    answer = labelled_value(gold, answer)
    eq = _item_equal(leaf)
    decided = (
        words_equal(gold, answer)
        or choice_equal(gold, answer)
        or text_equal(gold, answer)
        or relations_equal(gold, answer, eq, leaf)
        or union_equal(gold, answer, eq)
        or tuple_equal(gold, answer, eq)
        or _unwrapped_equal(gold, answer, eq)
        or matrix_equal(gold, answer, eq)
        or ratio_equal(gold, answer)
    )
    return decided if decided is not None else quantities_equal(gold, answer, leaf)


def _unwrapped_equal(gold: str, answer: str, eq) -> Outcome | None:
    """'(x)' / '{x}' around either side: compare what is inside."""
    g_inner, a_inner = unwrap_parens(gold), unwrap_parens(answer)
    if (g_inner, a_inner) != (gold, answer):
        return eq(g_inner, a_inner)
    return None
