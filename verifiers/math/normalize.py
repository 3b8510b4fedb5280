"""String normalisation of answers (no SymPy): LaTeX noise, unicode, units, percent, thousands separators.

The normaliser never parses mathematics; it only removes presentation so that the structure
(:mod:`verifiers.math.structure`) and latex2sympy see a canonical string.

>>> normalize("$\\\\dfrac{1}{2}\\\\,\\\\text{m}$")
'\\\\frac{1}{2}\\\\text{m}'
>>> normalize("12{,}000")
'12000'

Over 400 lines on purpose: an ordered list of small rewrite passes, each tested alone; splitting it
would split the order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Inputs beyond these are never given to SymPy.
MAX_LEAF_CHARS = 400
MAX_NESTING = 24
MAX_EXPONENT_DIGITS = 4  # integer exponents above 9999 (with a non-trivial base)
MAX_FACTORIAL_ARG = 2_000
MAX_BINOM_DIGITS = 4
MAX_POWER_TOWER = 2
MAX_SUM_TERMS = 200  # a^{b^{c}} is already two levels

_UNICODE = {
    "−": "-", "–": "-", "—": "-", "×": "\\times ", "·": "\\cdot ", "÷": "\\div ", "≤": "\\le ", "≥": "\\ge ",
    "≠": "\\ne ", "π": "\\pi ", "∞": "\\infty ", "√": "\\sqrt", "°": "^\\circ",
    "∪": "\\cup ", "∩": "\\cap ", "∈": "\\in ", "±": "\\pm ", "⁄": "/",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "：": ":", "，": ",", "θ": "\\theta ", "α": "\\alpha ",
    "β": "\\beta ", "∅": "\\emptyset ", "ℝ": "\\mathbb{R}", "≈": "\\approx ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))

_NOISE = [
    (re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)[lr]?(?![a-zA-Z])\.?"), ""),
    (re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)\b"), ""),
    (re.compile(r"\\[dtc]frac"), r"\\frac"),
    (re.compile(r"(?<!\\)\\(?:!|,|;|:|quad|qquad|enspace|thinspace)"), " "),
    (re.compile(r"(?<!\\)\\ "), " "),
    (re.compile(r"~"), " "),
    (re.compile(r"\\(?:lt)\b"), "<"),
    (re.compile(r"\\(?:gt)\b"), ">"),
    (re.compile(r"\\(?:leq|leqslant|le)\b"), r"\\le "),
    (re.compile(r"\\(?:geq|geqslant|ge)\b"), r"\\ge "),
    (re.compile(r"\\(?:neq|ne)\b|!="), r"\\ne "),
    (re.compile(r"\\(approx|in|equiv|cup|cap)(?![a-zA-Z])\s*"), r"\\\1 "),
    (re.compile(r"<="), r"\\le "),
    (re.compile(r">="), r"\\ge "),
    (re.compile(r"\\(?:textnormal|textrm|mbox|mathrm|textup|textbf|mathbf|textit|mathit|text)\s*\{"), r"\\text{"),
    (re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree"), r"^\\circ"),
    (re.compile(r"\\operatorname\s*\{(\w+)\}"), r"\\\1"),
    (re.compile(r"\\text\{\s*(?:all real numbers|all reals)\s*\}|^(?:all real numbers|all reals)$", re.I), r"\\mathbb{R}"),
    (re.compile(r"\\(?:bm|boldsymbol)\s*\{"), "{"),  # bold maths is the same maths
    (re.compile(r"\\varnothing(?![a-zA-Z])|\\\{\s*\\\}"), r"\\emptyset "),  # one spelling of the empty set
    (re.compile(r"\\(?:lor|vee)(?![a-zA-Z])|∨"), " or "),  # 'x = 1 \\lor x = 2'
    (re.compile(r"\\langle(?![a-zA-Z])|⟨"), "("),  # a vector <1, 2> is the tuple (1, 2)
    (re.compile(r"\\rangle(?![a-zA-Z])|⟩"), ")"),
]


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_VULGAR = {"½": "1/2", "¼": "1/4", "¾": "3/4", "⅓": "1/3", "⅔": "2/3", "⅕": "1/5", "⅖": "2/5", "⅗": "3/5", "⅘": "4/5", "⅙": "1/6", "⅚": "5/6", "⅛": "1/8",
           "⅜": "3/8", "⅝": "5/8", "⅞": "7/8"}


def _sqrt_parens(s: str) -> str:
    """'\\sqrt(3)' -> '\\sqrt{3}' (parenthesised radicand, as written with the unicode root sign)."""
    out, i = [], 0
    while True:
        j = s.find("\\sqrt(", i)
        if j < 0:
            return "".join(out) + s[i:]
        depth, k = 0, j + 5
        while k < len(s):
            depth += s[k] == "("
            depth -= s[k] == ")"
            if depth == 0:
                break
            k += 1
        if k >= len(s):
            return "".join(out) + s[i:]
        out.append(s[i:j] + "\\sqrt{" + s[j + 6 : k] + "}")
        i = k + 1


_PLAIN_FUNCTION = re.compile(r"(?<![\\A-Za-z])(sqrt|pi|ln|sin|cos|tan)(?![A-Za-z])(?=\s*\(|(?<=pi))")


def normalize(text: str) -> str:
    """Presentation-free LaTeX (deterministic, idempotent in practice)."""
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    s = re.sub("(\\d?)(" + "|".join(_VULGAR) + ")", lambda m: (m.group(1) + " " if m.group(1) else "") + _VULGAR[m.group(2)], s)  # 1⅓ = 1 1/3
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    if _PLAIN_FUNCTION.search(s):  # plain-text maths: '3*sqrt(2)', 'pi/2', '2pi'
        s = _PLAIN_FUNCTION.sub(lambda m: "\\" + m.group(1), s)
    s = _sqrt_parens(s) if "\\sqrt(" in s else s
    s = undouble_backslashes(s)
    if "\\begin" not in s and _DOUBLED_COMMAND.search(s):
        s = re.sub(r"\\\\(?=[a-zA-Z])", r"\\", s)  # doubly escaped LaTeX: '\\\\frac' -> '\\frac'
    if "brace" in s:
        s = _drop_brace_notes(s)
    s = re.sub(r",\\!\s*", ",", s).replace("{,}", ",")
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"\\[()\[\]]", " ", s)
    for pattern, repl in _NOISE:
        s = pattern.sub(repl, s)
    s = _single_char_args(s)
    s = re.sub(r"(\d)\s*,\s*!?\s*(?=\d{3}(?!\d))", _thousands, s)
    s = re.sub(r"\b(\d{1,3})((?: \d{3})+)(?![\d.,]| ?\d)", lambda m: m.group(1) + m.group(2).replace(" ", ""), s)
    s = re.sub(r"\\text\{\s*(\\?%)\s*\}", r"\\%", s)  # '50\\text{\\%}'
    s = re.sub(r"\\text\{\s*[.,;]?\s*\}", "", s)  # '\\text{}', a full stop written as '\\text{.}'
    s = re.sub(r"\s+", " ", s).strip()
    s = s.rstrip(".").strip()
    s = re.sub(r"^\\text\{(.*)\}$", lambda m: _unwrap_text(m.group(1)), s) if _single_group(s, "\\text{") else s
    return s


_DOUBLED_COMMAND = re.compile(
    r"\\\\(?:left|right|[dt]?frac|sqrt|pi|boxed|text|mathrm|mathbb|cdot|times|infty|le|ge|leq|geq|neq|ne|lt|gt|in|cup|cap|pm|mp|setminus|"
    r"circ|theta|alpha|beta|ln|log|sin|cos|tan|emptyset|varnothing)(?![a-zA-Z])"
)
_BACKSLASH_RUN = re.compile(r"\\+")


def undouble_backslashes(s: str) -> str:
    """LaTeX escaped once more, as in JSON-escaped data (a doubled ``\\le``, ``\\frac``, a row break of four
    backslashes): when every run of backslashes has even length and one of them starts a command or a
    delimiter, each pair is one backslash. Mixed text (a real row break next to single commands) is left."""
    if "\\\\" not in s:
        return s
    runs = _BACKSLASH_RUN.findall(s)
    if any(len(r) % 2 for r in runs) or not re.search(r"\\\\[a-zA-Z({\[]", s):
        return s
    return s.replace("\\\\", "\\")


def _drop_brace_notes(s: str) -> str:
    """'\\underbrace{42}_{\\text{...}}' -> '42' and '\\overbrace{x}^{...}' -> 'x': the note is no part of the value."""
    for _ in range(20):
        m = re.search(r"\\(?:underbrace|overbrace)\s*\{", s)
        if m is None:
            return s
        close = _close_brace(s, m.end() - 1)
        if close < 0:
            return s
        body, rest = s[m.end() : close], s[close + 1 :]
        note = re.match(r"\s*[_^]\s*", rest)
        if note:
            after = note.end()
            if rest[after : after + 1] == "{":
                end = _close_brace(rest, after)
                after = end + 1 if end >= 0 else len(rest)
            else:
                token = re.match(r"\\[a-zA-Z]+|\S", rest[after:])
                after += token.end() if token else 0
            rest = rest[after:]
        s = s[: m.start()] + "{" + body + "}" + rest
    return s


def _close_brace(s: str, open_pos: int) -> int:
    depth = 0
    for i in range(open_pos, len(s)):
        if s[i] == "{" and (i == 0 or s[i - 1] != "\\"):
            depth += 1
        elif s[i] == "}" and (i == 0 or s[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return i
    return -1


def _single_char_args(s: str) -> str:
    """'\\frac34' -> '\\frac{3}{4}', '\\sqrt3' -> '\\sqrt{3}' (TeX reads one token as an argument)."""
    tok = r"(\w|\\(?!frac|dfrac|tfrac|sqrt|left|right|text|math|begin|end)[a-zA-Z]+(?![a-zA-Z]))"  # one TeX token: '3' or '\\pi'
    s = re.sub(r"\\frac\s*" + tok + r"\s*" + tok, r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*" + tok + r"\s*(?=\{)", r"\\frac{\1}", s)
    s = re.sub(r"\\frac\s*(\{[^{}]*\})\s*" + tok, r"\\frac\1{\2}", s)
    s = re.sub(r"\\sqrt\s*" + tok, r"\\sqrt{\1}", s)
    return s


def _thousands(m: re.Match) -> str:
    """'12,000' -> '12000' when the comma is a thousands separator (no space after it)."""
    full = m.string
    comma = full.find(",", m.start())
    if comma + 1 < len(full) and full[comma + 1] == " ":
        return m.group(0)  # "32, 349" is a list
    # the run of digits before must be at most 3 long ("1234,567" is a list)
    start = m.start(1)
    while start > 0 and full[start - 1].isdigit():
        start -= 1
    if m.start(1) - start >= 3:
        return m.group(0)
    # "(12,102)" and "[1,100]" are pairs, not numbers
    before = full[:start].rstrip(" -")
    after = re.match(r"\d{3}(?:,\d{3})*(?:\.\d+)?\s*(.)?", full[comma + 1 :])
    if before.endswith(("(", "[")) and after and after.group(1) in (")", "]"):
        return m.group(0)
    return m.group(1)


def _unwrap_text(inner: str) -> str:
    return "\\text{" + inner + "}" if re.search(r"\d", inner) else inner.strip()


def _single_group(s: str, opener: str) -> bool:
    """Is ``s`` exactly one ``opener...}`` group?"""
    if not s.startswith(opener) or not s.endswith("}"):
        return False
    depth = 0
    for i, c in enumerate(s):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return False
    return True


# --------------------------------------------------------------------------------------------- units, %

_UNIT_ALIASES = {
    "centimeter": "cm", "centimetre": "cm", "cm": "cm", "millimeter": "mm", "millimetre": "mm", "mm": "mm",
    "meter": "m", "metre": "m", "m": "m", "kilometer": "km", "kilometre": "km", "km": "km",
    "inch": "in", "inches": "in", "in": "in", "foot": "ft", "feet": "ft", "ft": "ft", "yard": "yd", "yd": "yd",
    "mile": "mi", "mi": "mi", "second": "s", "sec": "s", "s": "s", "minute": "min", "min": "min",
    "hour": "h", "hr": "h", "h": "h", "day": "day", "week": "week", "year": "year", "yr": "year",
    "gram": "g", "g": "g", "kilogram": "kg", "kg": "kg", "liter": "l", "litre": "l", "l": "l",
    "milliliter": "ml", "ml": "ml", "degree": "deg", "deg": "deg", "radian": "rad", "rad": "rad",
    "mph": "mi per h", "kph": "km per h",
    "dollar": "usd", "cent": "cent", "yuan": "cny", "euro": "eur", "pound": "gbp",
}
_CURRENCY = re.compile(r"(?:\\\$|\$|€|£|¥|\\euro|\\pounds|\bUSD\b|\bEUR\b|\bdollars?\b|\bcents?\b)")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*(?:percent|pct|percentage)\s*\}|\b(?:percent|pct|percentage)\b)\s*$", re.I)
_TEXT_TAIL = re.compile(r"^(.*?\d[^a-zA-Z]*?)\s*\\text\{\s*([a-zA-Z][a-zA-Z .]*?)\s*\}\s*(\^\s*\{?[23]\}?)?\s*$")
_PLAIN_TAIL = re.compile(r"^([-+]?[\d.,/\\{}\s]+?|.*?\d\s*)\s+([a-zA-Z]{1,12}(?:\s[a-zA-Z]{1,12})?)(\^\s*\{?[23]\}?|²|³)?$")


_GLUED_UNIT = re.compile(r"^([-+]?[\d.]+)(cm|mm|km|m|kg|g|ml|mi|ft|in|s|h|min)(\^\s*\{?[23]\}?)?$")


_QUALIFIER = re.compile(r"\b(?:or|and|more|less|least|most|than|not|about|approximately|around|nearly|almost|over|under|fewer|greater|smaller|between|to|plus|minus)\b", re.I)


@dataclass(frozen=True)
class Quantity:
    """An answer split into a value and its decorations."""

    value: str
    unit: str | None = None  # canonical unit name, or the lowercased text
    percent: bool = False
    degrees: bool = False
    currency: bool = False


def canonical_unit(raw: str) -> str:
    words = raw.strip().lower().rstrip(".").split()
    out = []
    for word in words:
        base = _UNIT_ALIASES.get(word) or (_UNIT_ALIASES.get(word[:-1]) if word.endswith("s") else None)
        base = base or (_UNIT_ALIASES.get(word[:-2]) if word.endswith("es") else None)
        out.append(base or word)
    return " ".join(out)


def split_quantity(s: str) -> Quantity:
    """Separate %, degrees, currency and a trailing unit from the value."""
    percent = degrees = currency = False
    unit = None
    if re.search(r"\\(?:sin|cos|tan|cot|sec|csc)", s):
        return Quantity(s)  # '\\sin 30^\\circ': the degree sign belongs to the argument
    if _CURRENCY.search(s):
        stripped = _CURRENCY.sub(" ", s).strip()
        if stripped != s and re.search(r"\d", stripped):
            s, currency = stripped, True
    m = _PERCENT.search(s)
    if m and m.start() > 0:
        s, percent = s[: m.start()].strip(), True
    if s.endswith("^\\circ"):
        s, degrees = s[: -len("^\\circ")].strip(), True
    peeled = _peel_text_units(s)
    if peeled is not None:
        s, unit = peeled
        if unit == "deg":
            unit, degrees = None, True
        return Quantity(s, unit, percent, degrees, currency)
    m = _TEXT_TAIL.match(s)
    if m and (_QUALIFIER.search(m.group(2)) or _NOT_UNITS.search(m.group(2))):
        return Quantity(s)  # '5 \\text{ or more}' qualifies the number, '3 \\text{ million}' scales it: not a unit
    m = _PLAIN_TAIL.match(s) if m is None else m
    if m and m.re is _PLAIN_TAIL and _QUALIFIER.search(m.group(2)):
        return Quantity(s)
    m = _TEXT_TAIL.match(s)
    if m:
        s, unit = m.group(1).strip(), canonical_unit(m.group(2)) + (m.group(3) or "").replace("{", "").replace("}", "").replace(" ", "")
    else:
        m = _PLAIN_TAIL.match(s)
        if m and re.search(r"\d", m.group(1)) and not re.search(r"\\[a-zA-Z]+\s*$", m.group(1)):
            word = m.group(2)
            if canonical_unit(word) != word.lower() or len(word) > 1:
                s, unit = m.group(1).strip(), canonical_unit(word) + (m.group(3) or "").replace("{", "").replace("}", "").replace("²", "^2").replace("³", "^3")
    m = _GLUED_UNIT.match(s) if unit is None else None
    if m:
        s, unit = m.group(1), canonical_unit(m.group(2)) + (m.group(3) or "").replace("{", "").replace("}", "")
    if s.endswith("^\\circ"):
        s, degrees = s[: -len("^\\circ")].strip(), True
    if unit in ("deg",):
        unit, degrees = None, True
    return Quantity(s, unit, percent, degrees, currency)


_UNIT_WORDS = r"[A-Za-z][A-Za-z.]*(?:\s+[A-Za-z][A-Za-z.]*){0,2}"
_UNIT_TEXT = re.compile(r"^\s*(" + _UNIT_WORDS + r")(?:\s*(/)\s*(" + _UNIT_WORDS + r"))?"
                        r"(?:\s*\^\s*(?:\{\s*)?(-?\d)(?:\s*\})?)?\s*$")  # blanks match one way only: linear
_UNIT_PIECE = re.compile(
    r"(?:\\text\{((?:[^{}]|\{[^{}]*\})*)\}|\\frac\s*\{\s*\\text\{([^{}]*)\}\s*\}\s*\{\s*\\text\{([^{}]*)\}\s*\})\s*(?:\^\s*\{?\s*(-?\d)\s*\}?)?\s*$"
)
_UNIT_SEP = re.compile(r"(?:/|\\cdot|\*)\s*$")


_NOT_UNITS = re.compile(r"\b(?:million|billion|trillion|thousand|hundred|dozen|times|squared|cubed|percent|pct)\b", re.I)


def _unit_words(text: str) -> str | None:
    """'km/h' -> 'km per h', 'square units' -> 'unit^2', 'cm^2' -> 'cm^2'; None when ``text`` is not a unit
    (words that change the value, 'million', 'squared', are not units)."""
    power = re.match(r"^\s*([A-Za-z].*?)\s+(squared|cubed)\s*$", text)
    if power:  # 'units squared': a power of the unit (a bare 'squared' scales the number: no unit)
        base = _unit_words(power.group(1))
        return f"{base}^{2 if power.group(2) == 'squared' else 3}" if base else None
    m = _UNIT_TEXT.match(text)
    if m is None or _QUALIFIER.search(text) or _NOT_UNITS.search(text):
        return None
    unit = _powered(m.group(1)) + (" per " + _powered(m.group(3)) if m.group(2) else "")
    return unit + (f"^{m.group(4)}" if m.group(4) else "")


def _powered(words: str) -> str:
    """'square feet' / 'sq. ft' -> 'ft^2', 'cubic meters' -> 'm^3' (the same unit as ``\\text{ft}^2``)."""
    m = re.match(r"^(square|sq\.?|cubic|cu\.?)\s+(.+)$", words.strip(), re.I)
    if m is None:
        return canonical_unit(words)
    return canonical_unit(m.group(2)) + ("^3" if m.group(1).lower().startswith("cu") else "^2")


def _peel_text_units(s: str) -> tuple[str, str] | None:
    """A value followed by units written in ``\\text{}`` (``\\mathrm{}`` is normalised to it), possibly several
    joined by ``/`` or ``\\cdot`` or as ``\\frac{\\text{m}}{\\text{s}}``: (value, canonical unit), or None."""
    if "\\text{" not in s:
        return None
    rest, pieces = s.rstrip(), []
    while True:
        m = _UNIT_PIECE.search(rest)
        if m is None or not m.group(0).strip():
            break
        if m.group(1) is not None:
            unit = _unit_words(m.group(1))
        else:
            top, bottom = _unit_words(m.group(2)), _unit_words(m.group(3))
            unit = f"{top} per {bottom}" if top and bottom else None
        if unit is None:
            return None
        if m.group(4):
            unit = f"per {unit}" if m.group(4) == "-1" else f"{unit}^{m.group(4)}"
        pieces.insert(0, unit)
        rest = rest[: m.start()].rstrip()
        sep = _UNIT_SEP.search(rest)
        if sep is not None and _UNIT_PIECE.search(rest[: sep.start()].rstrip()):
            pieces[0] = ("per " if "/" in sep.group(0) else "") + pieces[0]
            rest = rest[: sep.start()].rstrip()
        elif not _UNIT_PIECE.search(rest):
            break  # otherwise 'km h^{-1}': units side by side multiply
    if not pieces or not rest or not re.search(r"\d|\\pi|\\sqrt|\\frac", rest) or re.search(r"(?:[-+=<>,(\[{^_]|\\[a-zA-Z]+\s*)$", rest.replace("\\pi", "")):
        return None
    return rest, " ".join(pieces)


# --------------------------------------------------------------------------------------------- caps


def bracket_depth(s: str) -> int:
    """The deepest nesting of ``([{`` brackets in ``s`` (linear time)."""
    depth = deepest = 0
    for c in s:
        if c in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "})]":
            depth -= 1
    return deepest


def over_limits(s: str) -> str | None:
    """Why ``s`` must not reach SymPy, or None. Cheap, linear-time checks."""
    if len(s) > MAX_LEAF_CHARS:
        return f"longer than {MAX_LEAF_CHARS} characters"
    if bracket_depth(s) > MAX_NESTING:
        return f"nesting deeper than {MAX_NESTING}"
    if s.count("\\frac") > 40:
        return "more than 40 fractions"
    for m in re.finditer(r"\^\s*\{?\s*([\d\s.,]+)", s):
        digits = re.sub(r"\D", "", m.group(1).split(".")[0])
        if len(digits) > MAX_EXPONENT_DIGITS:
            return f"exponent {digits[:12]}... larger than 10^{MAX_EXPONENT_DIGITS}"
    if _power_tower_height(s) > MAX_POWER_TOWER:
        return "power tower"
    for m in re.finditer(r"(\d+)\s*!", s):
        if int(m.group(1)[:8]) > MAX_FACTORIAL_ARG:
            return f"factorial of {m.group(1)[:12]}"
    if re.search(r"!\s*\)?\s*!|\)\s*!\s*!|!\s*!", s) and re.search(r"\d{3,}\s*!|\)\s*!", s):
        return "nested factorial"
    if re.search(r"\\(?:d|t)?binom\s*\{[^}]*(?:\d{%d,}|\^)" % (MAX_BINOM_DIGITS + 1), s):
        return "binomial of a huge number"
    if re.search(r"\\(?:int|iint|iiint|oint|lim|prod)(?![a-zA-Z])", s):
        return "integrals, limits and products are not evaluated"
    for m in re.finditer(r"\\sum\s*_\{[^}]*\}\s*\^\s*\{?\s*(\d+)", s):
        if int(m.group(1)[:9]) > MAX_SUM_TERMS:
            return f"sum of more than {MAX_SUM_TERMS} terms"
    if s.count("+") + s.count("-") > 2 * MAX_SUM_TERMS:
        return f"more than {2 * MAX_SUM_TERMS} terms"
    if re.search(r"\\(?:det|begin\{vmatrix\})", s) and len(s) > 120:
        return "large determinant"
    return None


def _power_tower_height(s: str) -> int:
    """How many ``^`` are nested inside each other's exponents."""
    worst = 0
    stack: list[bool] = []  # per open brace: is it an exponent group?
    height = 0
    pending = False
    i = 0
    while i < len(s):
        c = s[i]
        if c == "^":
            pending = True
            if i + 1 < len(s) and s[i + 1] not in "{ ":
                worst = max(worst, height + 1)
        elif c == "{":
            stack.append(pending)
            if pending:
                height += 1
                worst = max(worst, height)
            pending = False
        elif c == "}":
            if stack and stack.pop():
                height -= 1
        elif not c.isspace():
            pending = False
        i += 1
    # a^b^c without braces also counts
    bare = max((len(m.group(0).split("^")) - 1 for m in re.finditer(r"\w+(?:\s*\^\s*\w+){2,}", s)), default=0)
    return max(worst, bare)
