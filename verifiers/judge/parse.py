"""Reading a text judge's reply: a verdict word, a score, or a pairwise letter. Pure.

Each parser returns ``(value, shown)`` where ``value`` is in [0, 1] (the reward, or for pairwise the
probability that A wins) and ``shown`` is the part of the reply it read (for ``detail``); a reply it
cannot read raises :class:`Unparseable`, which the verifier reports as VERIFIER_ERROR (the judge's
failure, masked), never as a 0 for the policy.

>>> parse_verdict("**Yes.** The answer matches.")
(1.0, 'Yes')
>>> parse_score("The response is mostly right.\\nScore: 7", 10)
(0.7, 'Score: 7')
>>> parse_pair("[[B]]")
(0.0, 'B')
"""

from __future__ import annotations

import re

VERDICT_WORDS = {"yes": 1.0, "no": 0.0, "correct": 1.0, "incorrect": 0.0, "pass": 1.0, "fail": 0.0,
                 "true": 1.0, "false": 0.0, "right": 1.0, "wrong": 0.0}
_VERDICT_RE = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b", re.IGNORECASE)
_SCORE_RE = re.compile(r"\b(?:score|rating|grade)\s*(?:[:=]\s*)?(?:\*+\s*)?(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+))?", re.IGNORECASE)
_BARE_SCORE_RE = re.compile(r"^\W*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?\W*$")
_PAIR_RES = (re.compile(r"\[\[\s*([AB])\s*\]\]"), re.compile(r"\bresponse\s+([AB])\b", re.IGNORECASE),
             re.compile(r"^\W*([AB])\b"))


class Unparseable(ValueError):
    """The judge's reply holds no verdict, score or letter of the expected kind."""


def _snippet(text: str) -> str:
    return repr(text.strip()[:80])


def parse_verdict(text: str) -> tuple[float, str]:
    """The first verdict word (yes/no, correct/incorrect, pass/fail, true/false, right/wrong)."""
    m = _VERDICT_RE.search(text)
    if m is None:
        raise Unparseable(f"no verdict word (yes/no, correct/incorrect, ...) in the judge's reply {_snippet(text)}")
    return VERDICT_WORDS[m.group(1).lower()], m.group(1)


def parse_score(text: str, max_score: float) -> tuple[float, str]:
    """The last 'Score: N' (or 'N/M', or a reply that is just a number), scaled by ``max_score`` (or M)."""
    found = list(_SCORE_RE.finditer(text))
    m = found[-1] if found else _BARE_SCORE_RE.match(text)
    if m is None:
        raise Unparseable(f"no 'Score: N' in the judge's reply {_snippet(text)}")
    value = float(m.group(1))
    scale = float(m.group(2)) if m.group(2) else max_score
    if scale <= 0 or not 0 <= value <= scale:
        raise Unparseable(f"score {m.group(0).strip()!r} is outside 0..{scale:g}")
    return value / scale, m.group(0).strip()


def parse_pair(text: str) -> tuple[float, str]:
    """'A' -> 1.0 (A wins), 'B' -> 0.0: a '[[A]]', 'Response A', or a reply that starts with the letter."""
    for pattern in _PAIR_RES:
        m = pattern.search(text)
        if m is not None:
            letter = m.group(1).upper()
            return (1.0 if letter == "A" else 0.0), letter
    raise Unparseable(f"no 'A' or 'B' in the judge's reply {_snippet(text)}")
