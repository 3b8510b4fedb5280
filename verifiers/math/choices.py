"""Multiple choice and text answers.

A multiple-choice gold (a single letter A-E) needs exactly that letter (``(C)``, ``\\text{C}``,
``C. x = 42``, ``(C) 12``, ``option C``); a value gold accepts a labelled choice with that value (``(C) 12``
for ``12``); an AMC-style gold with both (``\\textbf{(C) }\\frac{5}{7}``) accepts the letter, the value, or
both when they agree. Text answers compare as lower-case words (``\\text{Yes}`` = ``yes``).
"""

from __future__ import annotations

import re

from cohort.verifiers.math.outcome import ItemEqual, Outcome

_CHOICE = re.compile(r"^\(?\s*(?:\\text\{\s*\(?\s*([A-Ea-e])\s*\)?\s*\}|([A-E]))\s*\)?$")  # bare 'e' is Euler's number
_CHOICE_ANSWER = re.compile(r"^\(?\s*(?:\\text\{\s*\(?\s*([A-Ea-e])\s*\)?\s*\}|([A-Ea-e]))\s*\)?(?:\s*[.:)]\s.*|\s*[.:)])?$", re.S)
_CHOICE_WITH_TEXT = re.compile(r"^(?:\\text\{\s*\(([A-E])\)\s*\}|\\text\{\s*([A-E])\s*[.:)]\s*\}|\(([A-E])\)|([A-E])[.:)])\s*(?:\S.*)?$", re.S)
_CHOICE_AROUND_VALUE = re.compile(r"^(?:.+?)\s*(?:\\text\{\s*\(([A-E])\)\s*\}|\(([A-E])\))$|^([A-E])\s*\(.+\)$", re.S)
_CHOICE_WITH_VALUE = re.compile(r"^(?:\\text\{\s*\(([A-E])\)\s*\}|\(([A-E])\))\s*(\S.*)$", re.S)
_LABELLED_CHOICE = re.compile(r"^(?:\\text\{\s*\(?[A-E]\)\s*\}|\\text\{\s*[A-E]\s*\}\s*[.:)]|\([A-E]\)|[A-E][.:)])\s*(\S.*)$", re.S)
_TEXT = re.compile(r"^(?:\\text\{[^{}\\]*\}|\s)+$")


def choice(s: str) -> str | None:
    """The letter of a multiple-choice answer written alone ('C', '(C)', '\\text{C}'), or None."""
    m = _CHOICE.match(s.strip())
    return (m.group(1) or m.group(2)).upper() if m else None


def _first(m: re.Match | None) -> str | None:
    return next(g for g in m.groups() if g) if m else None


def gold_choice_with_value(gold: str) -> tuple[str, str] | None:
    """An AMC-style gold '\\textbf{(C) }\\frac{5}{7}' (normalised) -> ('C', '\\frac{5}{7}'); None otherwise."""
    m = _CHOICE_WITH_VALUE.match(gold)
    return (m.group(1) or m.group(2), m.group(3)) if m else None


def labelled_value(gold: str, answer: str) -> str:
    """'(C) 12' for the gold '12': the value of the chosen option is the answer (when the gold is no choice)."""
    if choice(gold) is None and not _CHOICE_WITH_VALUE.match(gold):
        labelled = _LABELLED_CHOICE.match(answer.strip())
        if labelled:
            return labelled.group(1).strip()
    return answer


def choice_equal(gold: str, answer: str) -> Outcome | None:
    """A single-letter gold: the answer must name that letter. None when the gold is no letter."""
    gold_choice = choice(gold)
    if gold_choice is None:
        return None
    answer = re.sub(r"^(?:option|choice)\s+", "", answer.strip(), flags=re.I)
    m = _CHOICE_ANSWER.match(answer.strip())
    letter = (m.group(1) or m.group(2)).upper() if m else None
    if letter is None:  # '(B) 12', '\\text{(C)} 24', 'D. 7': an upper-case option label with its value
        letter = _first(_CHOICE_WITH_TEXT.match(answer.strip()))
    if letter is None:  # '4 \\text{ (A)}', 'A (4)': the letter written after or before a bracketed value
        letter = _first(_CHOICE_AROUND_VALUE.match(answer.strip()))
    return Outcome(letter == gold_choice, f"choice {gold_choice} vs {letter}")


def choice_with_value_equal(letter: str, value: str, parts: list[str], eq: ItemEqual) -> Outcome:
    """The gold is option ``letter`` with ``value``: the answer names the letter (and, if it also writes a
    value, that value), or is the value."""
    if len(parts) != 1:
        return Outcome(False, "several answers for one choice")
    answer = parts[0].strip()
    named = _first(_CHOICE_ANSWER.match(answer) or _CHOICE_WITH_TEXT.match(answer))
    if named is None:
        return eq(value, answer)
    named = named.upper()  # the answer names a letter: it must be this one (and a value written with it must be this value)
    if named != letter:
        return Outcome(False, f"choice {letter} vs {named}")
    rest = _CHOICE_WITH_VALUE.match(answer)
    if rest and not eq(value, rest.group(3)).equal:
        return Outcome(False, f"choice {letter} with a different value")
    return Outcome(True, f"choice {letter}")


# ------------------------------------------------------------------------------------------ text


def plain_text(s: str) -> str:
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def words_equal(gold: str, answer: str) -> Outcome | None:
    """A gold of words ('Monday', 'even') written the same way; None otherwise."""
    if re.fullmatch(r"[A-Za-z][A-Za-z ]+", gold) and plain_text(gold) == plain_text(answer) and len(gold) > 2:
        return Outcome(True, "same text")
    return None


def text_equal(gold: str, answer: str) -> Outcome | None:
    """Either side in ``\\text{}``: same words, or a text gold without digits that differs; None otherwise."""
    if _TEXT.match(gold) or _TEXT.match(answer):
        if plain_text(gold) == plain_text(answer):
            return Outcome(True, "same text")
        if _TEXT.match(gold) and not re.search(r"\d", gold):
            return Outcome(False, "different text")
    return None


def is_simple_text(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z ]{2,}", s)) and len(s) > 3 and " " in s.strip() or bool(_TEXT.match(s))
