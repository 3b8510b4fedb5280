"""Plain-string splitting shared by every kind of answer: top-level lists, brackets, relations, labels.

Nothing here decides equality; it finds structure without opening brackets (``(1, 2), (3, 4)`` is two
items, ``f(x, y) = 3`` is one relation). See :mod:`verifiers.math.compare` for the policies.
"""

from __future__ import annotations

import re

LIST_SEP = re.compile(r"\s*(?:,\s*(?:\\text\{\s*(?:and|or)\s*\}|and\b|or\b)?|;|\\text\{\s*,?\s*(?:and|or)\s*\}|\band\b|\bor\b)\s*")
SEMI = re.compile(r"\s*;\s*")
TUPLE_SEP = re.compile(r"\s*[,;]\s*")
CELL_SEP = re.compile(r"\s*&\s*")
UNION_SEP = re.compile(r"\s*\\cup\s*")
PRODUCT = re.compile(r"\\cdot|\\times|\*")
BRACKETED = re.compile(r"^([(\[])(.*)([)\]])$", re.S)
_REL = re.compile(r"\\le |\\ge |\\ne |\\in |\\approx |\\equiv |<|>|=")
LABEL = re.compile(
    r"^(?:[a-zA-Z](?:_\{?[\w,]+\}?)?'*|\\[a-zA-Z]+(?:_\{?[\w,]+\}?)?|[a-zA-Z](?:\^\{?-1\}?|'+)?\s*\([a-zA-Z0-9, ]*\)|\([a-zA-Z ,_{}0-9]+\)"
    r"|\|[a-zA-Z]+\||[A-Z]{1,4}|\\text\{[^{}]*\}|\\frac\{[A-Za-z]+\}\{[A-Za-z]+\}|[A-Za-z_{}0-9]+\s*:\s*[A-Za-z_{}0-9]+"
    r"|\\angle\s*[A-Z]+|[a-zA-Z]\s*\(\s*[-\d./]+\s*\))$"
)


def top_level_split(s: str, seps: re.Pattern) -> list[str]:
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


def balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0


def strip_set_braces(s: str) -> str:
    for opener, closer in (("\\{", "\\}"), ("{", "}")):
        if s.startswith(opener) and s.endswith(closer) and balanced(s[len(opener) : -len(closer)]):
            return s[len(opener) : -len(closer)].strip()
    return s


def unwrap_parens(s: str) -> str:
    m = re.match(r"^[(\[]\s*(\\begin\{(\w+)\}.*\\end\{\2\})\s*[)\]]$", s, re.S)
    if m and s.count("\\begin") == 1:
        return m.group(1)  # '[\\begin{array}...\\end{array}]'

    while len(s) > 2 and s[0] == "(" and s[-1] == ")" and balanced(s[1:-1]) and "," not in s:
        s = s[1:-1].strip()
    while len(s) > 2 and s[0] == "{" and s[-1] == "}" and balanced(s[1:-1]):
        s = s[1:-1].strip()
    return s


def infinity(s: str) -> str:
    return s.replace("+\\infty", "\\infty").replace("+ \\infty", "\\infty").replace("\\infin", "\\infty")


def squeeze(s: str) -> str:
    """``s`` without spaces (names and variables compare this way)."""
    return s.replace(" ", "")


def dedupe(items: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for item in items:
        seen.setdefault(re.sub(r"\s+", "", item), item)
    return list(seen.values())


# ------------------------------------------------------------------------------------------ relations


def split_relation(s: str) -> tuple[str, str | None, str]:
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


def relation_chain(s: str) -> tuple[list[str], list[str]]:
    """'a < x \\le b' -> (['a', 'x', 'b'], ['<', '\\le']); no relation: ([s], [])."""
    terms, ops = [], []
    rest = s
    while True:
        lhs, op, rhs = split_relation(rest)
        terms.append(lhs)
        if op is None:
            return terms, ops
        ops.append(op)
        rest = rhs


def is_equation(ops: list[str]) -> bool:
    return bool(ops) and all(op in ("=", "\\approx") for op in ops)


def _chain_value(terms: list[str], ops: list[str]) -> str:
    """'x = 5+5+1 = 1/3 \\approx 0.33' -> '1/3': the last exact value, else the last one."""
    if "=" in ops and "\\approx" in ops:
        return terms[ops.index("\\approx")]
    return terms[-1]


def label_value(item: str) -> str | None:
    """'x = 3' -> '3' when the left side is a name; None otherwise."""
    terms, ops = relation_chain(item)
    if is_equation(ops) and LABEL.match(terms[0].strip()) and terms[-1]:
        return _chain_value(terms, ops)
    return None


def label_name(item: str) -> str:
    """'x = 3' -> 'x' (the left side, without spaces)."""
    return squeeze(relation_chain(item)[0][0])


# ------------------------------------------------------------------------------------------ lists


def split_items(s: str) -> list[str]:
    """Top-level answers of one string: '1, 2', '1 and 2', '{1,2}', 'p=5,q=2;p=7,q=2', '1 \\pm 2'."""
    s = s.strip().rstrip(".").strip()
    inner = strip_set_braces(s)
    groups = top_level_split(inner, SEMI)
    items: list[str] = []
    for group in groups:
        parts = top_level_split(group, LIST_SEP)
        if len(groups) > 1 and len(parts) > 1 and all(label_value(p) is not None for p in parts):
            items.append("(" + ", ".join(label_value(p) for p in parts) + ")")
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
    lhs, rel, rhs = split_relation(item)
    if rel == "=" and LABEL.match(lhs):
        item = rhs
    plus = item.replace("\\pm", "+").strip()
    minus = item.replace("\\pm", "-").strip()
    return [plus.lstrip("+").strip() if plus.startswith("+") else plus, minus]
