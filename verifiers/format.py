"""The ``format`` verifier: reasoning-then-answer layout, with reward-hack flags.

Components (each 0 or 1):

- ``think``: the think rule holds. ``think=required`` (default): exactly one non-empty
  ``<think>…</think>`` block, at the very start in strict mode, anywhere before the answer in
  soft mode. ``optional``: zero or one well-formed block. ``forbidden``: no think tags at all.
- ``answer``: exactly one non-empty final answer in the chosen form: ``answer=tag``
  (``<answer>…</answer>``, the default), ``boxed`` (``\\boxed{…}`` / ``\\fbox{…}``) or ``either``.
- ``clean``: an answer was found and no reward-hack flag was raised.

Flags: ``multiple_answers`` (several answer blocks or boxes), ``empty_answer``, ``text_after_answer``
(strict mode only; soft mode tolerates a closing sentence), ``nested_tags`` (a tag inside
itself, or the answer inside the think block), ``unbalanced_tags`` (open/close counts differ
or a close tag comes first).

Reward: ``mode=strict`` (default) gives 1 only when every component is 1, else 0; ``mode=soft``
gives the mean of the components. A rollout with flags never gets the ``answer`` or ``clean``
points, so spamming answers cannot pay.

>>> v = FormatVerifier()
>>> g = GroupRequest("format", (Rollout(0, "<think>2+2</think><answer>4</answer>"), Rollout(1, "<answer>4</answer><answer>5</answer>")))
>>> [r.reward for r in v.verify_group(g, VerifyContext())]
[1.0, 0.0]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cohort.verifiers.base import GroupRequest, Rollout, RolloutResult, Verdict, VerifierBase, VerifyContext, option

TAG_RE = re.compile(r"</?(think|answer)\s*>", re.IGNORECASE)
BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


@dataclass(frozen=True)
class Span:
    start: int  # index of the opening tag
    end: int  # index just after the closing tag
    content: str


def scan_tags(text: str, name: str) -> tuple[list[Span], list[str]]:
    """Well-formed ``<name>…</name>`` blocks and structural flags for that tag."""
    flags: list[str] = []
    spans: list[Span] = []
    depth, open_at, open_end = 0, -1, -1
    for m in TAG_RE.finditer(text):
        if m.group(1).lower() != name:
            continue
        closing = m.group(0).startswith("</")
        if not closing:
            if depth > 0:
                flags.append("nested_tags")
            else:
                open_at, open_end = m.start(), m.end()
            depth += 1
        elif depth == 0:
            flags.append("unbalanced_tags")
        else:
            depth -= 1
            if depth == 0:
                spans.append(Span(open_at, m.end(), text[open_end : m.start()]))
    if depth != 0:
        flags.append("unbalanced_tags")
    return spans, flags


def scan_boxes(text: str) -> tuple[list[Span], list[str]]:
    """``\\boxed{…}`` / ``\\fbox{…}`` with nested braces; an unclosed box is unbalanced."""
    spans: list[Span] = []
    flags: list[str] = []
    pos = 0
    while (m := BOX_RE.search(text, pos)) is not None:
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            flags.append("unbalanced_tags")
            break
        spans.append(Span(m.start(), i, text[m.end() : i - 1]))
        pos = i
    return spans, flags


@dataclass(frozen=True)
class FormatRules:
    mode: str = "strict"
    think: str = "required"
    answer: str = "tag"

    @classmethod
    def from_group(cls, group: GroupRequest) -> FormatRules:
        return cls(
            mode=option(group, "mode", "strict", ("strict", "soft")),
            think=option(group, "think", "required", ("required", "optional", "forbidden")),
            answer=option(group, "answer", "tag", ("tag", "boxed", "either")),
        )


def check(text: str, rules: FormatRules) -> tuple[dict[str, float], list[str], str]:
    """Components, flags and a one-line explanation for one completion."""
    strict = rules.mode == "strict"
    thinks, think_flags = scan_tags(text, "think")
    tags, tag_flags = scan_tags(text, "answer")
    boxes, box_flags = scan_boxes(text)
    flags = set(think_flags) | set(tag_flags)

    answers: list[Span] = []
    if rules.answer in ("tag", "either"):
        answers += tags
    if rules.answer in ("boxed", "either") and not (rules.answer == "either" and tags):
        answers += boxes
        flags |= set(box_flags)
    elif rules.answer == "tag" and len(boxes) > 1:
        flags.add("multiple_answers")  # box spam inside a single answer tag
    if len(answers) > 1:
        flags.add("multiple_answers")
    if any(not a.content.strip() for a in answers):
        flags.add("empty_answer")
    final = answers[-1] if answers else None
    if final is not None and any(t.start < final.start < t.end for t in thinks):
        flags.add("nested_tags")  # the answer sits inside the reasoning
    if strict and final is not None and text[final.end :].strip():
        flags.add("text_after_answer")

    if rules.think == "forbidden":
        think_ok = not thinks and not think_flags
    elif rules.think == "optional" and not thinks:
        think_ok = not think_flags
    else:
        think_ok = len(thinks) == 1 and bool(thinks[0].content.strip()) and not think_flags
        if think_ok and final is not None:
            think_ok = thinks[0].end <= final.start
        if think_ok and strict:
            think_ok = not text[: thinks[0].start].strip()
    answer_ok = len(answers) == 1 and not ({"multiple_answers", "empty_answer"} & flags)
    clean = not flags and final is not None
    components = {"think": float(think_ok), "answer": float(answer_ok), "clean": float(clean)}
    found = "no answer" if final is None else f"answer {final.content.strip()[:60]!r}"
    detail = f"{found}; {len(thinks)} think block(s); flags: {', '.join(sorted(flags)) or 'none'}"
    return components, sorted(flags), detail


class FormatVerifier(VerifierBase):
    """No server-side options: every setting is a request option (above)."""

    name = "format"
    version = "1.0.0"
    description = "think-then-answer layout rules (<think>, <answer>, \\boxed{}) with reward-hack flags"
    reference_kinds: tuple[str, ...] = ()
    max_concurrency = 1  # pure Python, microseconds per rollout: threads would only contend for the GIL

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        rules = FormatRules.from_group(group)
        return [self._one(r, rules) for r in group.rollouts]

    @staticmethod
    def _one(rollout: Rollout, rules: FormatRules) -> RolloutResult:
        components, flags, detail = check(rollout.completion, rules)
        values = list(components.values())
        reward = float(all(v == 1.0 for v in values)) if rules.mode == "strict" else sum(values) / len(values)
        if reward == 1.0:
            verdict = Verdict.CORRECT
        elif components["answer"] == 0.0 and "multiple_answers" not in flags and "empty_answer" not in flags:
            verdict = Verdict.NO_ANSWER
        else:
            verdict = Verdict.PARTIAL if reward > 0 else Verdict.INCORRECT
        return RolloutResult.ok(rollout.index, reward, verdict, components, detail, flags)
