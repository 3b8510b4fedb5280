"""Answers that are relations: equations (``x = 3``, ``y = 2x + 1``, ``1/2 + 1/3 = 5/6``), inequalities in one
variable (as the interval they denote: ``-2 \\le x \\le 7`` is ``[-2, 7]``), membership (``x \\in S``),
``x \\ne a``, chains of relations, and several inequalities joined by "or" (a union) or "and" (an
intersection). Values are compared with ``eq`` (the caller's recursive comparison); what only SymPy can
decide (two equations, two inequalities) goes to ``leaf``.
"""

from __future__ import annotations

import re

from cohort.verifiers.math.outcome import ItemEqual, Leaf, Outcome
from cohort.verifiers.math.syntax import LABEL, infinity, is_equation, label_value, relation_chain, squeeze

_FLIP = {"<": ">", ">": "<", "\\le": "\\ge", "\\ge": "\\le"}
_LOWER = (">", "\\ge")
_UPPER = ("<", "\\le")


def as_interval(terms: list[str], ops: list[str]) -> tuple[str, str] | None:
    """'a < x \\le b' / 'x > a' / 'x \\in S' -> (variable, interval string)."""
    if ops == ["\\in"]:
        return terms[0], terms[1]
    if ops == ["\\ne"] and LABEL.match(terms[0]) and not LABEL.match(terms[1]):  # 'x \\ne 3': everything but 3
        return terms[0], f"(-\\infty, {terms[1]}) \\cup ({terms[1]}, \\infty)"
    if not ops or any(op not in _FLIP for op in ops):
        return None
    if len(ops) == 1:
        return _one_bound(terms[0], ops[0], terms[1])
    if len(ops) == 2 and LABEL.match(terms[1]):
        return _two_bounds(terms, ops)
    return None


def _one_bound(lhs: str, op: str, rhs: str) -> tuple[str, str] | None:
    if LABEL.match(rhs) and not LABEL.match(lhs):
        lhs, rhs, op = rhs, lhs, _FLIP[op]
    if not LABEL.match(lhs):
        return None
    if op in _LOWER:
        return lhs, ("(" if op == ">" else "[") + rhs + ", \\infty)"
    return lhs, "(-\\infty, " + rhs + (")" if op == "<" else "]")


def _two_bounds(terms: list[str], ops: list[str]) -> tuple[str, str] | None:
    lo, var, hi = terms
    if ops[0] in _LOWER and ops[1] in _LOWER:
        lo, hi, ops = hi, lo, [_FLIP[ops[1]], _FLIP[ops[0]]]
    if ops[0] in _UPPER and ops[1] in _UPPER:
        return var, ("(" if ops[0] == "<" else "[") + lo + ", " + hi + (")" if ops[1] == "<" else "]")
    return None


def relations_equal(gold: str, answer: str, eq: ItemEqual, leaf: Leaf) -> Outcome | None:
    """Either side a relation: equal or not; None when neither is one."""
    g_terms, g_ops = relation_chain(gold)
    a_terms, a_ops = relation_chain(answer)
    if not g_ops and not a_ops:
        return None
    g_eq, a_eq = is_equation(g_ops), is_equation(a_ops)
    if g_eq and a_eq:
        return _equations_equal(gold, answer, g_terms, a_terms, eq, leaf)
    if g_eq and not a_ops:
        g_label = label_value(gold)
        if g_label is not None:
            return eq(g_label, answer)
        return Outcome(False, "gold is an equation, the answer is not")
    if a_eq and not g_ops:
        return _value_vs_equation(gold, answer, a_terms, a_ops, eq)
    g_int = as_interval(g_terms, g_ops) if g_ops else (None, gold)
    a_int = as_interval(a_terms, a_ops) if a_ops else (None, answer)
    if g_int is not None and a_int is not None:
        return _intervals_equal(gold, answer, g_int, a_int, eq, leaf)
    if g_ops and a_ops:
        return _relations_otherwise(gold, answer, g_terms, g_ops, a_terms, a_ops, eq, leaf)
    return Outcome(False, "relation vs value")


def _equations_equal(gold: str, answer: str, g_terms: list[str], a_terms: list[str], eq: ItemEqual, leaf: Leaf) -> Outcome:
    g_label, a_label = label_value(gold), label_value(answer)
    g_lhs, a_lhs = g_terms[0], a_terms[0]
    if g_label is not None and a_label is not None and squeeze(g_lhs) == squeeze(a_lhs):
        return eq(g_label, a_label)
    return leaf(f"{g_lhs} = {g_terms[-1]}", f"{a_lhs} = {a_terms[-1]}")


def _value_vs_equation(gold: str, answer: str, a_terms: list[str], a_ops: list[str], eq: ItemEqual) -> Outcome:
    a_label = label_value(answer)
    if a_label is not None:
        return eq(gold, a_label)
    if not re.search(r"[a-zA-Z]", re.sub(r"\\(?:frac|sqrt|cdot|times|pi)", "", a_terms[0])):
        # '1/2 + 1/3 = 5/6': a computation, whose value is its last exact term ('\\sqrt2 \\approx 1.414' is '\\sqrt2')
        exact = [t for t, op in zip(a_terms[1:], a_ops) if op == "="]
        return eq(gold, exact[-1] if exact else a_terms[0])
    return Outcome(False, "answer is an equation, the gold is not")


def _intervals_equal(gold: str, answer: str, g_int: tuple, a_int: tuple, eq: ItemEqual, leaf: Leaf) -> Outcome:
    g_var, g_set = g_int
    a_var, a_set = a_int
    if g_var is not None and a_var is not None and squeeze(g_var) != squeeze(a_var):
        bare = {squeeze(v).strip("|") for v in (g_var, a_var)}
        if len(bare) == 1 and ("|" in g_var) != ("|" in a_var):
            # '1 <= |z| <= 3/2' vs 'z in [-3/2,-1] U [1,3/2]': SymPy solves the one-variable condition
            g_side = gold if "|" in g_var else g_set
            a_side = answer if "|" in a_var else a_set
            return leaf(g_side, infinity(a_side))
        return Outcome(False, f"different variables {g_var} vs {a_var}")
    return eq(infinity(g_set), infinity(a_set))


def _relations_otherwise(gold, answer, g_terms, g_ops, a_terms, a_ops, eq: ItemEqual, leaf: Leaf) -> Outcome:
    if len(g_ops) == 1 and len(a_ops) == 1:
        return leaf(gold, answer)
    if g_ops == a_ops and len(g_terms) == len(a_terms):
        for g, a in zip(g_terms, a_terms):
            if not eq(g, a).equal:
                return Outcome(False, "chained relations differ")
        return Outcome(True, "chained relations termwise")
    return leaf(gold, answer)


# ------------------------------------------------------------------------------------------ joined inequalities


def as_union(items: list[str], source: str) -> list[str]:
    """'x < -1 or x > 2' (one-variable inequalities in the same variable joined by 'or') -> one union of
    intervals. Joined by 'and' (an intersection) or by commas (ambiguous) they stay a list."""
    if len(items) == 2 and re.search(r"\band\b", source) and not re.search(r"\bor\b|,", source):
        return _as_intersection(items)
    if len(items) < 2 or not re.search(r"\bor\b", source) or re.search(r"\band\b|,", source):
        return items
    intervals = []
    for item in items:
        terms, ops = relation_chain(item)
        found = as_interval(terms, ops) if ops and "\\in" not in ops else None
        if found is None:
            return items
        intervals.append(found)
    if len({squeeze(var) for var, _ in intervals}) != 1:
        return items
    return [f"{intervals[0][0]} \\in " + " \\cup ".join(infinity(i) for _, i in intervals)]


def _as_intersection(items: list[str]) -> list[str]:
    """'x < 3 and x > -2' (a lower and an upper bound on one variable) -> 'x \\in (-2, 3)'."""
    found = []
    for item in items:
        terms, ops = relation_chain(item)
        interval = as_interval(terms, ops) if len(ops) == 1 and ops[0] in _FLIP else None
        if interval is None:
            return items
        found.append(interval)
    if squeeze(found[0][0]) != squeeze(found[1][0]):
        return items
    lower = [i for _, i in found if i.endswith("\\infty)") and not i.startswith("(-\\infty")]
    upper = [i for _, i in found if i.startswith("(-\\infty") and not i.endswith("\\infty)")]
    if len(lower) != 1 or len(upper) != 1:
        return items
    lo = lower[0][: lower[0].rindex(",")]  # '(a' or '[a'
    hi = upper[0][upper[0].index(",") + 1 :]  # ' b)' or ' b]'
    return [f"{found[0][0]} \\in {lo},{hi}"]
