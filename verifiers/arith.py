"""The ``arith`` verifier: integer answers to short arithmetic, the reward of the embedded task and of
the TRL comparison workload (``shared/bench/trl_workload/WORKLOAD.md`` section 4).

It is served like every verifier (``cohort serve arith``); the learner never scores anything itself.

Components (each 0 or 1), on the completion as decoded (special tokens dropped):

- ``correct``: the **first** integer in the completion (regex ``-?\\d+``) equals the reference answer;
  with the option ``pick=last``, the **last** one (for chat models that restate the question before the
  answer: "The sum of 7 and 12 is 19."; an echoed expression such as "7 + 12" is not the answer).
- ``bare``: the whole completion, whitespace-stripped, is one integer (``-?\\d+``); with the option
  ``require_eos=1``, a truncated completion (no EOS) never counts as bare.

Reward = ``correct_weight * correct + format_weight * bare`` (options; defaults 1.0 and 0.1 are the
workload's ``correct + format_bonus``). A reference that is not an integer is INVALID_REFERENCE
(masked by the learner), never a reward of 0. The policy cannot cause a mask: an answer of more than
64 digits is no answer (NO_ANSWER, reward 0 for ``correct``) and carries the flag ``candidate_limit``.

>>> v = ArithVerifier()
>>> g = GroupRequest("arith", (Rollout(0, "47"), Rollout(1, "47+1"), Rollout(2, "x")), Reference(answer="47"))
>>> [r.reward for r in v.verify_group(g, VerifyContext())]
[1.1, 1.0, 0.0]
"""

from __future__ import annotations

import re

from cohort.verifiers.base import (
    CANDIDATE_LIMIT,
    GroupRequest,
    RolloutResult,
    RolloutStatus,
    Verdict,
    VerifierBase,
    VerifyContext,
    Reference,  # noqa: F401  (doctest)
    Rollout,  # noqa: F401  (doctest)
    float_option,
    option,
)

INT_RE = re.compile(r"-?\d+")
MAX_DIGITS = 64  # longer "integers" are not answers (and int() of huge strings is slow)


def first_int(text: str) -> int | None:
    m = INT_RE.search(text)
    if m is None or _over_limit(m.group()):
        return None
    return int(m.group())


def last_int(text: str) -> int | None:
    found = INT_RE.findall(text)
    if not found or _over_limit(found[-1]):
        return None
    return int(found[-1])


def _over_limit(literal: str) -> bool:
    return len(literal.lstrip("-")) > MAX_DIGITS


def _picked_over_limit(text: str, pick: str) -> bool:
    """Did the pick land on an integer too long to be an answer (the candidate's doing, flagged)?"""
    if pick == "first":
        m = INT_RE.search(text)
        return m is not None and _over_limit(m.group())
    found = INT_RE.findall(text)
    return bool(found) and _over_limit(found[-1])


class ArithVerifier(VerifierBase):
    """No server-side options: every setting is a request option (above)."""

    name = "arith"
    version = "1.0.0"
    description = "integer answer checks: first integer equals the answer (correct), bare integer (format)"
    reference_kinds = ("answer",)

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        w_correct = float_option(group, "correct_weight", 1.0)
        w_format = float_option(group, "format_weight", 0.1)
        require_eos = option(group, "require_eos", "0", ("0", "1")) == "1"
        pick_name = option(group, "pick", "first", ("first", "last"))
        pick = first_int if pick_name == "first" else last_int
        raw = (group.reference.answer or "").strip()
        if not re.fullmatch(r"-?\d{1,64}", raw):
            detail = f"reference {raw[:40]!r} is not an integer"
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, detail) for r in group.rollouts]
        gold = int(raw)
        out = []
        for r in group.rollouts:
            got = pick(r.completion)
            correct = float(got == gold)
            bare = float(INT_RE.fullmatch(r.completion.strip()) is not None and not (require_eos and r.truncated))
            verdict = Verdict.NO_ANSWER if got is None else Verdict.CORRECT if correct else Verdict.INCORRECT
            detail = f"{pick_name} integer {got}"
            flags: tuple[str, ...] = ()
            if got is None and _picked_over_limit(r.completion, pick_name):
                detail, flags = f"{pick_name} integer has more than {MAX_DIGITS} digits (candidate limit)", (CANDIDATE_LIMIT,)
            out.append(RolloutResult.ok(r.index, w_correct * correct + w_format * bare, verdict,
                                        {"correct": correct, "bare": bare}, detail=detail, flags=flags))
        return out
