"""Find the final answer in a model response. Pure string code: no SymPy, no regex backtracking traps.

Order of precedence (the first that applies wins):

1. Everything before ``</think>`` is reasoning and never scored.
2. ``<answer>...</answer>``: the last block is the answer. An empty block is NO_ANSWER (flag
   ``empty_answer_tag``); it never borrows a number from the reasoning.
3. An answer marker ("Final Answer:", "the answer is", "Answer:", GSM8K ``####``) that comes after the
   last ``\\boxed{}``: the text after the last such marker.
4. ``\\boxed{}`` / ``\\fbox{}`` (nested braces): the last *cluster* of boxes (boxes separated by short
   connecting text such as ``\\quad\\text{and}\\quad``). The text between two boxes decides how they
   relate (:func:`_gap_kind`): a self-correction ("wait", "that's wrong", "actually", "mistake") starts the
   cluster afresh, so the corrected final answer is judged (flag ``self_corrected``); a negation right
   before a box ("not \\boxed{-2}", "rather than") drops that box; a hedge ("or maybe", "perhaps", "I'm
   not sure", "could", a question mark), also in the sentence around the boxes, makes the boxes
   candidates (``kind="hedge"``, flag ``hedged``: INCORRECT whatever the gold, never a multi-part answer),
   and so does a bare "or" (``\\boxed{2} or \\boxed{3}``) unless the sentence says there are several
   ("the roots are ...") or each box is labelled (``x = \\boxed{2} or x = \\boxed{3}``); words that reject
   or doubt the earlier box ("no", "nope", "not quite", "isn't right", "is false", "I doubt it", "rather",
   "never mind", a double negation "not not \\boxed{5}") make the boxes a sequence of self-corrections, judged
   like a hedge (issue 29: a list answer must be stated as a list), and so does a list followed only by a
   bare rejection ("\\boxed{3}, \\boxed{5}. Hmm, no.", also after a marker); a negation right before the
   first box of the cluster ("not \\boxed{1} but \\boxed{7}") drops that box;
   boxes joined only by ``=`` are equal forms of one answer (``kind="forms"``: every form must match;
   a form after ``\\approx`` is not a claim and is dropped); anything else is a list, returned as several
   answers (flag ``multiple_answers``) that the comparison matches against a gold with that many parts.
5. A short response (a bare answer) is its own answer; a long one without any marker is scored from its
   last concluding sentence ("Therefore ... is 12.") and flagged ``bare_answer``; if there is none, NO_ANSWER.

A bare, marker or ``<answer>`` text that only says there is no answer ("I am not sure.", "I don't know",
"cannot determine") is flagged ``no_answer_phrase``: the verdict is NO_ANSWER, not INCORRECT. A response
escaped once more (every backslash doubled, as in JSON-escaped data) is read with single backslashes.

>>> extract_answer("so $x=2$ and the answer is $\\\\boxed{\\\\frac{1}{2}}$.").answers
('\\\\frac{1}{2}',)

Over 400 lines on purpose: one precedence list of answer forms, each a small pure function, read
in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cohort.verifiers.math.normalize import undouble_backslashes

MAX_RESPONSE_CHARS = 200_000  # the tail is kept: the answer is at the end
MAX_ANSWER_CHARS = 2_000
SHORT_RESPONSE_CHARS = 160
BOX_CLUSTER_GAP = 80


@dataclass(frozen=True)
class Extraction:
    answers: tuple[str, ...]  # empty: no answer found
    source: str  # answer_tag | marker | boxed | bare | none
    flags: tuple[str, ...] = ()
    kind: str = "parts"
    """How several answers relate: ``parts`` of one answer (``\\boxed{2}`` and ``\\boxed{3}``), equal ``forms``
    of one answer (``\\boxed{\\frac12} = \\boxed{0.5}``: each must match), or a ``hedge`` between candidates
    (``\\boxed{2}, or maybe \\boxed{3}``: never correct)."""


_MARKER = re.compile(
    r"(final\s+answer\s*(?:is)?\s*[:：]?|the\s+(?:final\s+)?answer\s+is\s*[:：]?|\banswer\s*[:：]|^[ \t]*answer\b(?!\s*[:：])|####)",
    re.I | re.M,
)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{|\\boxed\s+(?=[^\s{])")
_CHAT_TAIL = re.compile(r"<\|im_(?:start|end)\|>.*$", re.S)
_HOPE = re.compile(r"(?<!\s)\.?\s*I hope it is correct\.?.*$", re.S | re.I)
_CONCLUDE = re.compile(r"\b(therefore|thus|hence|so|finally|in conclusion|the result is)\b", re.I)
_NUMBER = re.compile(r"(?<![A-Za-z\d])(?:[-+−]?\$?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?\s*%?|[-+−]?\.\d+)(?![A-Za-z\d])")


def _matching_brace(text: str, open_pos: int) -> int:
    """Index of the brace closing ``text[open_pos] == '{'``, or -1."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def find_boxes(text: str) -> list[tuple[int, int, str]]:
    """All ``\\boxed{...}`` as (start, end, content), outermost only."""
    boxes: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        m = _BOX.search(text, pos)
        if m is None:
            return boxes
        if m.group(0).endswith("{"):
            close = _matching_brace(text, m.end() - 1)
            if close < 0:  # unbalanced: take the rest of the line
                end = text.find("\n", m.end())
                end = len(text) if end < 0 else end
                boxes.append((m.start(), end, text[m.end() : end]))
                return boxes
            boxes.append((m.start(), close + 1, text[m.end() : close]))
            pos = close + 1
        else:  # "\boxed 5"
            tok = re.match(r"[^\s$.,]+", text[m.end() :])
            end = m.end() + (tok.end() if tok else 0)
            boxes.append((m.start(), end, text[m.end() : end]))
            pos = end


def _math_spans(text: str) -> list[str]:
    """Contents of $..$, $$..$$, \\(..\\), \\[..\\] in order."""
    spans = []
    for m in re.finditer(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", text, re.S):
        content = next(g for g in m.groups() if g is not None)
        if content.strip():
            spans.append(content.strip())
    return spans


def _first_sentence(text: str) -> str:
    """Cut at the first newline-paragraph or sentence end outside math."""
    text = _HOPE.sub("", text)
    out = []
    in_math = False
    seen_text = False  # anything but blanks in `out` yet (kept as we go: joining `out` at each newline was quadratic)
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] in "([":
                in_math = True
            elif text[i + 1] in ")]":
                in_math = False
            out.append(text[i : i + 2])
            seen_text = True
            i += 2
            continue
        if c == "$":
            in_math = not in_math
            if text.startswith("$$", i):
                out.append("$")
                i += 1
        elif not in_math and c == "\n" and seen_text:
            break
        elif not in_math and c == "." and (i + 1 == n or text[i + 1].isspace()) and not (out and out[-1][-1:].isdigit() and i + 1 < n and text[i + 1 : i + 2].isdigit()):
            break
        out.append(c)
        seen_text = seen_text or not c.isspace()
        i += 1
    return "".join(out).strip()


def answer_from_phrase(phrase: str, after_marker: bool = False) -> str:
    """The answer inside a sentence such as 'The largest $n$ is 34' or 'the answer is $\\frac12$'.
    ``after_marker``: the phrase follows 'the answer is' / 'Final answer:', so a trailing explanation
    ('12, which is 3 times 4') is cut off."""
    phrase = re.sub(r"\*\*(.+?)\*\*", r"\1", phrase)  # markdown bold: 'the answer is **5** apples'
    phrase = phrase.strip().lstrip(":：*").strip().strip('"“”*').strip()
    if after_marker:
        phrase = _cut_explanation(phrase)
    boxes = find_boxes(phrase)
    if boxes:
        return boxes[-1][2]
    if _CHOICE_LABEL.match(phrase):
        return phrase  # '(B) $2\\sqrt{3}$': the letter and the value of a multiple-choice answer
    spans = _math_spans(phrase)
    if not spans and _PLAIN_MATH.match(phrase):
        return phrase  # plain-text maths: 'sqrt(3)/2', '2*pi', 'x^2 + 2*x + 1'
    if not spans and (not _WORDS.search(_strip_commands(phrase)) or _MATH_START.match(phrase)):
        return phrase  # the phrase is the answer: '-\\frac{8x^2}{9} + 1', '3 hours', 'C. x = 42'
    lowered = phrase.lower()
    cut = max(lowered.rfind(" is "), lowered.rfind(" are "), lowered.rfind(" be "))
    if cut >= 0:
        tail = _cut_explanation(phrase[cut:].split(" ", 2)[-1].strip().strip('"“”').strip())
        if _CHOICE_LABEL.match(tail):
            return tail  # 'The correct choice is (A) $x=4$'
        tail_spans = _math_spans(tail)
        if tail_spans:
            return _join_spans(tail, tail_spans)
        if tail and "$" not in tail and (re.search(r"\d", tail) or not spans):
            if not re.search(r"\d", tail) or not _WORDS.search(_strip_commands(tail)):
                return tail
            return _numbers_in(tail)
    if spans:
        return _join_spans(phrase, spans)
    if not re.search(r"\d", phrase) or not _NUMBER.search(phrase):
        return phrase
    return _numbers_in(phrase)


_EXPLANATION = re.compile(r"(?<!\s)(?:\s*,\s*|\s+|\s*\(\s*)(?:because|since|which|where|as|given|due to|for|from|when|if|using|by|with|so|not|rather than|instead of)\b", re.I)


_PAREN_WORDS = re.compile(r"(?<!\s)\s+\([A-Za-z][A-Za-z\s,.'-]{2,}\)\s*$")


def _cut_explanation(phrase: str) -> str:
    """'12, which is 3 times 4' / '5 because 2 + 3 = 5' / '7 (since 3 + 4 = 7)' / '15 (fifteen)': the
    answer is what comes before the explanation (outside math only; never the whole phrase)."""
    m = _PAREN_WORDS.search(phrase)
    if m and m.start() > 0:
        phrase = phrase[: m.start()]
    for m in _EXPLANATION.finditer(phrase):
        head = phrase[: m.start()]
        if m.start() > 0 and head.count("$") % 2 == 0 and head.count("\\(") <= head.count("\\)") and head.strip():
            return head.strip().rstrip(",;:").strip()
    return phrase


_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|cannot|can't|isn't|won't|without)\b", re.I)


def _numbers_in(words: str) -> str:
    """The number in a sentence ('16 dollars'); several different numbers ('either 2, 3, or 4') are kept
    as a list, which the comparison treats as a hedge unless the gold has exactly those values."""
    if words.count("=") and _NUMBER.search(words.rsplit("=", 1)[1]):
        words = words.rsplit("=", 1)[1]  # '2 x 12 = 24 apples': the value of the computation
    numbers = [n.strip().rstrip(",").strip() for n in _NUMBER.findall(words)]
    numbers = [n for n in numbers if n]
    if not numbers or _NEGATION.search(words[: _NUMBER.search(words).start()]):
        return words  # 'not 4': a number that is denied is no answer
    if len(set(numbers)) > 1:
        return ", ".join(numbers)
    return numbers[0]


_WORDS = re.compile(r"[A-Za-z]{3,}")
# The patterns run on model output in the server's threads, where a match holds the GIL to its end: each is
# written so that a string can match in one way only (no two quantifiers competing for the same characters),
# which keeps matching linear. `_PLAIN_MATH` once read numbers as `\d+(?:\.\d+)?` inside the `+`: a run of
# 40 digits then had about 2**39 ways to split and froze the whole server (tests/verifiers/test_redos.py).
_CHOICE_LABEL = re.compile(r"^(?:\([A-E]\)|[A-E][.:)])\s*\$[^$]+\$(?:\s*\.)?\s*$"
                           r"|^\\text(?:bf)?\{\s*\(?[A-E]\)\s*\}(?:\s*\$)?[^$]+(?:\$(?:\s*\.)?\s*)?$")
_PLAIN_MATH = re.compile(r"^(?:[-+*/^().,=\s\d]|(?:sqrt|pi|ln|sin|cos|tan)(?![A-Za-z])|[A-Za-z](?![A-Za-z]))+$")


_MATH_START = re.compile(r"[-+−\d.(\[{\\]|[A-Za-z](?:[\s=<>.,:)_^]|$)")


def _strip_commands(s: str) -> str:
    s = re.sub(r"\\(?:begin|end|text|textbf|textnormal|mathrm|mbox)\s*\{[^{}]*\}", " ", s)
    return re.sub(r"\\[a-zA-Z]+", " ", s)


def _join_spans(text: str, spans: list[str]) -> str:
    """Several math spans joined by words ('$12$ and $13$') become one answer text."""
    if len(spans) == 1:
        return spans[0]
    first = text.find("$")
    last = text.rfind("$")
    if first >= 0 and last > first:
        return text[first : last + 1].replace("$", " ")
    return spans[-1]


def _strip_reasoning(text: str) -> str | None:
    """The part after the reasoning; None when a ``<think>`` block is never closed (the response
    stopped while still reasoning: nothing in it is a final answer)."""
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :]
    if "<think>" in text:
        return None
    return text


_NO_ANSWER = re.compile(
    r"\b(?:i\s*(?:am|'m)\s+(?:still\s+)?(?:not|un)\s*(?:sure|certain)|not\s+sure|i\s+(?:do\s+not|don'?t)\s+know|no\s+idea|"
    r"(?:can\s*not|can'?t|could\s+not|couldn'?t|unable\s+to|impossible\s+to|not\s+able\s+to)\s+(?:be\s+)?(?:determine|determined|solve|solved|answer|answered|find|found|compute|computed|say)"
    r"|(?:cannot|can'?t)\s+be\s+(?:determined|solved|found)|(?:not\s+enough|insufficient)\s+information)",
    re.I,
)


def _no_answer(ex: Extraction, said: str) -> Extraction:
    """A completion that only says it has no answer ('I am not sure.', 'cannot determine'): flagged, so that
    the verdict is NO_ANSWER unless the gold itself is such a text ('\\text{cannot be determined}')."""
    if ex.answers and _NO_ANSWER.search(said) and not re.search(r"\d|\$|\\[a-zA-Z(\[]|=", said):
        return Extraction(ex.answers, ex.source, (*ex.flags, "no_answer_phrase"), ex.kind)
    return ex


def extract_answer(response: str) -> Extraction:
    text = undouble_backslashes(response[-MAX_RESPONSE_CHARS:]).replace("\\\\boxed", "\\boxed")
    flags: list[str] = []
    after = _strip_reasoning(text)
    if after is None:
        return Extraction((), "none", ("unterminated_think",))
    text = _CHAT_TAIL.sub("", after)
    if len(response) > MAX_RESPONSE_CHARS:
        flags.append("response_truncated_for_extraction")

    lowered = text.lower()
    tag = lowered.rfind("<answer>")
    if tag >= 0:
        end = lowered.find("</answer>", tag)
        content = text[tag + len("<answer>") : end if end >= 0 else len(text)].strip()
        if not content:
            return Extraction((), "answer_tag", (*flags, "empty_answer_tag"))
        inner = extract_answer(content) if (find_boxes(content) or _MARKER.search(content)) else None
        if inner and inner.answers:
            return Extraction(inner.answers, "answer_tag", (*flags, *inner.flags))
        if "\n" not in content and len(content) <= SHORT_RESPONSE_CHARS:  # 'The value is 9.', 'approximately 9'
            return _no_answer(Extraction((_clip(answer_from_phrase(content, after_marker=True)),), "answer_tag", tuple(flags)), content)
        return _no_answer(Extraction((_clip(content),), "answer_tag", tuple(flags)), content)

    boxes = find_boxes(text)
    markers = list(_MARKER.finditer(text))
    last_box_end = boxes[-1][1] if boxes else -1
    if markers and markers[-1].end() > last_box_end:
        phrase = _first_sentence(text[markers[-1].end() :])
        if phrase:
            answer = _clip(answer_from_phrase(phrase, after_marker=True))
            rest = text.find(phrase, markers[-1].end())
            if "," in answer and rest >= 0 and _rejected_after(text, rest + len(phrase)):  # 'The answer is 3, 5... no.'
                return Extraction((answer,), "marker", (*flags, "hedged"), "hedge")
            return _no_answer(Extraction((answer,), "marker", tuple(flags)), phrase)

    if boxes:
        return _from_boxes(text, boxes, flags)

    # no box, and no marker with an answer after it on its line: a bare answer
    stripped = text.strip()
    if not stripped:
        return Extraction((), "none", tuple(flags))
    if len(stripped) <= SHORT_RESPONSE_CHARS:
        spans = _math_spans(stripped)
        if len(spans) == 1 and stripped.startswith(("$", "\\(", "\\[")):
            return Extraction((_clip(spans[0]),), "bare", tuple(flags))
        return _no_answer(Extraction((_clip(answer_from_phrase(stripped)),), "bare", tuple(flags)), stripped)
    sentence = _last_concluding_sentence(stripped)
    if sentence is None:
        return Extraction((), "none", tuple(flags))
    return _no_answer(Extraction((_clip(answer_from_phrase(sentence)),), "bare", (*flags, "bare_answer")), sentence)


_CORRECTION = re.compile(
    r"\b(?:wait|actually|oops|mistakes?|mistaken|wrong|incorrect|errors?|erred|correct(?:ion|ing|ed)|re-?(?:check|compute|calculate|consider|do|evaluate)|"
    r"let me (?:re)?check|on second thought|scratch that|no,|i mis[a-z]*|should (?:be|have been)|not (?:right|correct)|hold on|"
    r"revis(?:e|ed|ing|ion)|upon (?:further )?reflection|on (?:closer|further) (?:inspection|thought)|can(?:not|'t) be right|"
    r"does(?:n't| not) (?:work|satisfy|check out)|mis(?:calculat|read|count|typ|took)\w*|slip|typo)",
    re.I,
)
_NEGATION_BEFORE = re.compile(r"\b(?:not|rather than|instead of|excluding|except|never)\s*[$(\\(\s]*$", re.I)
_HEDGE = re.compile(
    r"\?|\b(?:maybe|perhaps|possibly|probably|alternatively|not (?:sure|certain)|unsure|uncertain|might|could|guess|either|hmm+|"
    r"or is it|i think|i believe|torn|between|undecided|can(?:not|'t) decide)\b",
    re.I,
)
_DOUBT = re.compile(
    r"\b(?:no|not|nope|nah|never|none|nor|neither|wrong|false|incorrect|invalid|doubt\w*|dubious|unlikely|rather|instead|"
    r"scratch|never\s*mind|nevermind|discard\w*|reject\w*|ignore|disregard|retract\w*|cannot|impossible|fails?|failed|"
    r"contradict\w*|absurd|nonsense|bogus|erase|crossed\s+out|cross\s+(?:it|that)\s+out|undo|ugh|argh|on\s+reflection)\b|n't\b",
    re.I,
)  # words that reject or doubt what came before: between two boxes they make no list (issue 29)
_NEGATIONS = re.compile(r"\b(?:not|no|never|nope|none)\b|n't\b", re.I)
_CHAIN_GAP = re.compile(r"^(?:=|\\approx|≈)$")
_BARE_OR = re.compile(r"\bor\b", re.I)
_PLURAL = re.compile(r"\b(?:are|solutions|roots|values|zeros|zeroes|answers|both|all|pairs?|x-intercepts|numbers)\b", re.I)


def _gap_kind(gap: str) -> str:
    """What the text between two boxes says: ``negation`` (the later box is ruled out: 'not \\boxed{-2}'),
    ``correction`` (the later box replaces the earlier one), ``hedge`` (candidates), ``doubt`` (words that
    reject or doubt the earlier box, or a double negation: the boxes are a sequence of self-corrections,
    not a list; judged like a hedge), ``=`` / ``approx`` (equal forms of one answer), or ``list`` (parts)."""
    words = _strip_math_text(gap)
    if _NEGATION_BEFORE.search(gap):
        # 'not not \boxed{5}', "isn't not": a double negation asserts nothing clearly
        return "doubt" if len(_NEGATIONS.findall(words)) > 1 else "negation"
    if _CORRECTION.search(gap):
        return "correction"
    if _HEDGE.search(words):
        return "hedge"
    if _DOUBT.search(words):  # '\boxed{3}, no \boxed{5}', '\boxed{3} is false; \boxed{5}', 'nope', "isn't right"
        return "doubt"
    core = re.sub(r"[\s$]|\\[()\[\]]|\\(?:quad|qquad|,|;|!)", "", gap)
    if _CHAIN_GAP.match(core):
        return "=" if core == "=" else "approx"
    return "list"


def _strip_math_text(gap: str) -> str:
    return re.sub(r"\\text\{([^{}]*)\}", r" \1 ", gap)


def _from_boxes(text: str, boxes: list[tuple[int, int, str]], flags: list[str]) -> Extraction:
    """The last cluster of boxes: a correction between two boxes starts the cluster afresh, a hedge makes
    the candidates a hedge, boxes joined by '=' are equal forms of one answer, anything else a list."""
    cluster = [boxes[-1]]
    gaps: list[str] = []  # gaps[i] is the kind of text between cluster[i] and cluster[i + 1]
    concluded = _concludes(text[: boxes[-1][0]])
    for box in reversed(boxes[:-1]):
        gap = text[box[1] : cluster[0][0]]
        if len(_strip_connectors(gap)) > BOX_CLUSTER_GAP or (concluded and "\n\n" in gap):
            break  # far apart, or an intermediate result in an earlier paragraph ('... so the total is \boxed{24}')
        kind = _gap_kind(gap)
        if kind == "negation":  # '\\boxed{2} (not \\boxed{-2})': the later box is what the response rules out
            flags.append("negated_box")
            cluster[0] = box
            continue
        if kind == "correction":
            flags.append("self_corrected")
            break  # '\boxed{5}. Wait, that is wrong: \boxed{6}': the answer is the one after the correction
        cluster.insert(0, box)
        gaps.insert(0, "or" if kind == "list" and _BARE_OR.search(_strip_math_text(gap)) and "=" not in gap else kind)
    if len(cluster) > 1 and _NEGATION_BEFORE.search(_lead_in(text, cluster[0][0])):
        flags.append("negated_box")  # 'not \boxed{1} but \boxed{7}': the first box is ruled out too
        cluster, gaps = cluster[1:], gaps[1:]
    doubted = "doubt" in gaps
    contents = [_unbox(b[2].strip()) for b in cluster]
    keep = [c for c, after in zip(contents, ["="] + gaps) if c and after != "approx"]  # '\approx 0.707' is no claim
    if not keep:
        keep = [c for c in contents if c]
    if not keep:
        return Extraction((), "boxed", (*flags, "empty_box"))
    distinct = list(dict.fromkeys(keep))
    if len(distinct) == 1:
        return Extraction((_clip(distinct[0]),), "boxed", tuple(flags))
    flags.append("multiple_answers")
    answers = tuple(_clip(c) for c in distinct)
    start = max(text.rfind(sep, 0, cluster[0][0]) + len(sep) for sep in ("\n", ". ", "? ", "! "))
    after = re.split(r"[.\n]", text[cluster[-1][1] : cluster[-1][1] + BOX_CLUSTER_GAP], maxsplit=1)[0]
    around = text[max(start, 0) : cluster[0][0]] + " " + after
    plural = _PLURAL.search(_strip_math_text(text[max(start, 0) : cluster[0][0]]))
    if doubted or _rejected_after(text, cluster[-1][1]):
        # a list must be stated as a list, not as a sequence of answers rejected or doubted in turn, nor
        # as one the response takes back at once ('\\boxed{3}, \\boxed{5}. Hmm, no.')
        return Extraction(answers, "boxed", (*flags, "hedged"), "hedge")
    if "hedge" in gaps or _HEDGE.search(_strip_math_text(around)) or ("or" in gaps and not plural):
        # '\\boxed{2} or \\boxed{3}' offers two candidates unless it says there are several ('the roots are
        # \\boxed{2} or \\boxed{3}') or labels each ('x = \\boxed{2} or x = \\boxed{3}')
        return Extraction(answers, "boxed", (*flags, "hedged"), "hedge")
    if gaps and all(g in ("=", "approx") for g in gaps):
        return Extraction(answers, "boxed", tuple(flags), "forms")
    return Extraction(answers, "boxed", tuple(flags))


_BARE_REJECTION = re.compile(
    r"[\s$.,;:!?)\]]*(?:(?:hmm+|wait|well|oh|ah|uh)[\s,.!]*)?"
    r"(?:no|nope|nah|wrong|not quite|not right|not really|never ?mind|that'?s wrong|scratch that)[\s.!]*",
    re.I,
)


def _rejected_after(text: str, end: int) -> bool:
    """Is everything after the answer, up to the end of its paragraph, a bare rejection ('. Hmm, no.')?"""
    paragraph = text[end : end + 200].split("\n\n", 1)[0]
    return bool(paragraph.strip()) and _BARE_REJECTION.fullmatch(paragraph) is not None


def _lead_in(text: str, box_start: int) -> str:
    """The words of the box's own sentence before it ('The answer is not ' in 'The answer is not \\boxed{1}')."""
    start = max((at + len(sep) for sep in ("\n", ". ", "? ", "! ") if (at := text.rfind(sep, 0, box_start)) >= 0), default=0)
    return text[start:box_start]


def _unbox(content: str) -> str:
    """'\\boxed{\\boxed{x=3}}': the inner box when it is the whole content."""
    for _ in range(4):
        inner = find_boxes(content)
        if len(inner) != 1 or inner[0][0] != 0 or inner[0][1] != len(content):
            return content
        content = inner[0][2].strip()
    return content


_CONCLUSION = re.compile(r"\b(?:therefore|thus|hence|so|finally|in conclusion|in total|the (?:final )?answer|the total|the result)\b", re.I)


def _concludes(before_box: str) -> bool:
    """Does the sentence that holds the last box conclude ('..., so the total is $\\boxed{24}$')?"""
    start = max(before_box.rfind("\n"), before_box.rfind(". "))
    return bool(_CONCLUSION.search(before_box[start + 1 :]))


def _strip_connectors(gap: str) -> str:
    gap = re.sub(r"\\(?:quad|qquad|text|textbf|mathrm|\(|\)|\[|\]|,|;)", "", gap)
    return re.sub(r"[\s${}().,;:&\\]|and|or", "", gap)


def _last_concluding_sentence(text: str) -> str | None:
    tail = text[-1500:]
    sentences = [x for x in re.split(r"(?<=[^\d\s])\.\s+|\n\s*\n", _HOPE.sub("", tail)) if x.strip()]
    for sentence in reversed(sentences[-2:]):  # only the closing sentences: the rest is reasoning
        if _CONCLUDE.search(sentence) and (_NUMBER.search(sentence) or "$" in sentence):
            start = _CONCLUDE.search(sentence).start()
            return _first_sentence(sentence[start:] + ".")
    return None


def _clip(answer: str) -> str:
    return answer.strip()[:MAX_ANSWER_CHARS + 1]
