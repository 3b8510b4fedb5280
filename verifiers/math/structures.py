"""Answers with parts: lists and sets (unordered), tuples and intervals (ordered, brackets must match),
unions, matrices and vectors, complements of sets (``\\mathbb{R} \\setminus [a, b]``), set-builder
notation, and named values (``p = 3, q = 5``). Each part is compared with ``eq`` (the caller's
recursive comparison), so this module never imports the dispatcher.
"""

from __future__ import annotations

import re

from cohort.verifiers.math.numbers import parse_number
from cohort.verifiers.math.outcome import ItemEqual, Outcome
from cohort.verifiers.math.syntax import (
    BRACKETED, CELL_SEP, LABEL, TUPLE_SEP, UNION_SEP, balanced, infinity, label_name, label_value, split_items,
    split_relation, strip_set_braces, top_level_split,
)

_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}$", re.S)
_UNIVERSE = re.compile(r"^(?:\\mathbb\s*\{?\s*R\s*\}?|\\R(?![a-zA-Z])|\(\s*-\s*\\infty\s*,\s*\\infty\s*\))\s*(?:\\setminus|\\backslash|-)\s*(.+)$", re.S)
_SET_BUILDER = re.compile(r"^\\\{\s*([a-zA-Z])\s*(?:\\in\s*\\mathbb\s*\{?R\}?\s*)?(?:\\mid|\||:)(.+)\\\}$")  # body stripped by the caller (linear)


def unordered(gold_items: list[str], answer_items: list[str], eq: ItemEqual, what: str) -> Outcome:
    if len(gold_items) != len(answer_items):
        return Outcome(False, f"{what}: {len(answer_items)} answers for {len(gold_items)} gold items")
    remaining = list(answer_items)
    for g in gold_items:
        for j, a in enumerate(remaining):
            if eq(g, a).equal:
                del remaining[j]
                break
        else:
            return Outcome(False, f"{what}: no answer matches {g!r}")
    return Outcome(True, f"{what}: all {len(gold_items)} items match")


# ------------------------------------------------------------------------------------------ sets


def complement(s: str) -> str:
    """'\\mathbb{R} \\setminus [a, b]' -> '(-\\infty, a) \\cup (b, \\infty)'; a finite set of numbers
    '\\mathbb{R} \\setminus \\{1, -1\\}' -> the intervals between them. Anything else is left as written."""
    m = _UNIVERSE.match(s.strip()) if "\\" in s else None
    if m is None:
        return s
    removed = m.group(1).strip()
    interval = BRACKETED.match(removed)
    if interval and balanced(interval.group(2)):
        return _without_interval(interval) or s
    if removed.startswith("\\{") and removed.endswith("\\}") and balanced(removed[2:-2]):
        return _without_points(removed[2:-2]) or s
    return s


def _without_interval(interval: re.Match) -> str | None:
    ends = top_level_split(interval.group(2), TUPLE_SEP)
    if len(ends) != 2:
        return None
    lo, hi = (infinity(e) for e in ends)
    pieces = []
    if lo != "-\\infty":
        pieces.append(f"(-\\infty, {lo}" + (")" if interval.group(1) == "[" else "]"))
    if hi != "\\infty":
        pieces.append(("(" if interval.group(3) == "]" else "[") + f"{hi}, \\infty)")
    return " \\cup ".join(pieces) if pieces else "\\emptyset"


def _without_points(body: str) -> str | None:
    items = top_level_split(body, TUPLE_SEP)
    numbers = [parse_number(i) for i in items]
    if not items or any(n is None for n in numbers):
        return None
    points = [i for _, i in sorted(zip((n.value for n in numbers), items))]
    points = list(dict.fromkeys(points))
    ends = ["-\\infty", *points, "\\infty"]
    return " \\cup ".join(f"({a}, {b})" for a, b in zip(ends, ends[1:]))


def set_builder(s: str) -> str:
    """'\\{x \\mid x > 2\\}' -> 'x > 2' (the condition of a set written in set-builder notation)."""
    m = _SET_BUILDER.match(s)
    body = m.group(2).strip() if m else ""
    return body if m and m.group(1) in body else s


def set_membership(item: str) -> list[str]:
    """'x \\in \\{4, -1\\}' -> '\\{4, -1\\}' (a solution set written as membership)."""
    lhs, op, rhs = split_relation(item)
    if op == "\\in" and rhs.startswith("\\{") and LABEL.match(lhs) and strip_set_braces(rhs) != rhs:
        return split_items(rhs)
    return [item]


# ------------------------------------------------------------------------------------------ unions, tuples


def union_equal(gold: str, answer: str, eq: ItemEqual) -> Outcome | None:
    """A union on either side: an unordered list of its parts; None when neither is a union."""
    if "\\cup" not in gold and "\\cup" not in answer:
        return None
    g_parts = [p.strip() for p in top_level_split(gold, UNION_SEP)]
    a_parts = [p.strip() for p in top_level_split(answer, UNION_SEP)]
    return unordered(g_parts, a_parts, eq, "union")


def tuple_equal(gold: str, answer: str, eq: ItemEqual) -> Outcome | None:
    """Tuples and intervals on both sides: same length, same brackets, elementwise; None otherwise."""
    g_br, a_br = BRACKETED.match(gold), BRACKETED.match(answer)
    if not (g_br and a_br and balanced(g_br.group(2)) and balanced(a_br.group(2))):
        return None
    g_items = top_level_split(g_br.group(2), TUPLE_SEP)
    a_items = top_level_split(a_br.group(2), TUPLE_SEP)
    if len(g_items) <= 1 and len(a_items) <= 1:
        return None
    if len(g_items) != len(a_items):
        return Outcome(False, "tuples of different length")
    if (g_br.group(1), g_br.group(3)) != (a_br.group(1), a_br.group(3)):
        return Outcome(False, "different brackets (open vs closed end)")
    for g, a in zip(g_items, a_items):
        sub = eq(infinity(g), infinity(a))
        if not sub.equal:
            return Outcome(False, f"tuple element {g!r} vs {a!r}: {sub.how}")
    return Outcome(True, "tuple elementwise")


# ------------------------------------------------------------------------------------------ matrices


def matrix_equal(gold: str, answer: str, eq: ItemEqual) -> Outcome | None:
    """Matrices entrywise; a column or row vector also equals the tuple of its entries. None when this
    is no matrix comparison."""
    g_mat, a_mat = _MATRIX.match(gold), _MATRIX.match(answer)
    if bool(g_mat) != bool(a_mat) and (BRACKETED.match(gold) or BRACKETED.match(answer)):
        vec = _vector_as_tuple(g_mat or a_mat)
        if vec is not None:
            return eq(vec, answer) if g_mat else eq(gold, vec)
    if not (g_mat and a_mat) or "\\begin" in g_mat.group(2) + a_mat.group(2):
        return None
    g_rows = [top_level_split(r, CELL_SEP) for r in _matrix_rows(g_mat.group(2))]
    a_rows = [top_level_split(r, CELL_SEP) for r in _matrix_rows(a_mat.group(2))]
    if [len(r) for r in g_rows] != [len(r) for r in a_rows]:
        return Outcome(False, "matrices of different shape")
    for g_row, a_row in zip(g_rows, a_rows):
        for g, a in zip(g_row, a_row):
            sub = eq(g, a)
            if not sub.equal:
                return Outcome(False, f"matrix entry {g!r} vs {a!r}: {sub.how}")
    return Outcome(True, "matrix elementwise")


def _vector_as_tuple(m: re.Match) -> str | None:
    if "\\begin" in m.group(2):
        return None
    rows = [top_level_split(r, CELL_SEP) for r in _matrix_rows(m.group(2))]
    if len(rows) > 1 and all(len(r) == 1 for r in rows):
        return "(" + ", ".join(r[0] for r in rows) + ")"
    if len(rows) == 1 and len(rows[0]) > 1:
        return "(" + ", ".join(rows[0]) + ")"
    return None


def _matrix_rows(body: str) -> list[str]:
    rows = [r.strip() for r in re.split(r"\\\\", body)]
    return [r for r in rows if r and r != "\\hline"]


# ------------------------------------------------------------------------------------------ named values


def labelled_tuple(gold_items: list[str], answer_items: list[str], eq: ItemEqual) -> Outcome | None:
    """'(1, 2)' vs 'x = 1, y = 2' (either way round): the labelled values, in the order written, form the
    tuple; None when the items are not of that shape."""
    if len(gold_items) == 1 and len(answer_items) > 1:
        tupled = _as_tuple(gold_items[0], answer_items)
        if tupled is not None:
            return eq(gold_items[0], tupled)
    if len(answer_items) == 1 and len(gold_items) > 1:
        tupled = _as_tuple(answer_items[0], gold_items)
        if tupled is not None:
            return eq(tupled, answer_items[0])
    return None


def _as_tuple(other: str, labelled: list[str]) -> str | None:
    if not all(label_value(item) is not None for item in labelled):
        return None
    br = BRACKETED.match(other)
    labels = [label_name(item) for item in labelled]
    if br and br.group(1) == "(" and len(set(labels)) == len(labels):
        return "(" + ", ".join(label_value(item) for item in labelled) + ")"
    return None


def named_values_equal(gold_items: list[str], answer_items: list[str], eq: ItemEqual) -> Outcome | None:
    """'p = 3, q = 5' vs 'p = 5, q = 3': the names matter. None unless both sides are named values."""
    g_named, a_named = _named_values(gold_items), _named_values(answer_items)
    if g_named is None or a_named is None:
        return None
    if set(g_named) != set(a_named):
        return Outcome(False, f"named values differ: {sorted(g_named)} vs {sorted(a_named)}")
    for name, value in g_named.items():
        if not eq(value, a_named[name]).equal:
            return Outcome(False, f"{name} differs")
    return Outcome(True, "named values match")


def _named_values(items: list[str]) -> dict[str, str] | None:
    """{'p': '3', 'q': '5'} when every item is 'name = value' with distinct names; None otherwise."""
    named = {}
    for item in items:
        value = label_value(item)
        if value is None:
            return None
        named[label_name(item)] = value
    if len({re.sub(r"_\{?\w+\}?$", "", name) for name in named}) == 1 and all("_" in name for name in named):
        return None  # 'x_1 = 2, x_2 = 3': numbered roots are an unordered list
    return named if len(named) == len(items) > 1 else None
