"""The ``steps`` verifier: one reward per arithmetic step of a chain of thought (process supervision).

A *step* is a statement ``<expression> = <number>`` anywhere in the completion, with words around it
(``She has 16 - 3 - 4 = 9 eggs``, ``9 * 2 = 18``, ``$1,200 / 4 = $300``). Each step ends right after
its result and scores 1 when the result is right, else 0. When the request carries a reference
answer, a *final step* ends after the last number of the completion (GSM8K's ``#### 18`` or
``The answer is $18``) and scores 1 when that number equals the reference; when the last number is
the result of the last equation, the two are one step and score 1 only if both hold.

Arithmetic is exact (``fractions.Fraction``, a small recursive-descent parser: ``+ - * / × ÷ ·``,
``^`` / ``**`` powers, parentheses, unary minus; never ``eval``). Numbers may carry thousands commas
and a currency sign (``$ € £``). A result written with d decimals is right when the exact value rounds
to it (``10 / 3 = 3.33``). A division by zero is a wrong step. The left side must hold an operator:
``x = 5`` or ``18 = 18`` are not steps.

Bounds (the parser is linear in its input and every number is size-checked, so no input can hang it):
literals of more than 40 digits, exponents above 64, intermediate values above 4096 bits and
expressions longer than 200 characters are *refused*. The policy wrote them, so a refusal is never a
mask (a masked rollout loses its negative gradient, and a policy would learn to write ``9^99 = 123``
to escape a wrong step): the refused step is a *wrong* step (reward 0) and the rollout carries the flag
``candidate_limit`` (the one flag of every candidate-caused limit, counted by the trainer). A completion
with more than 256 steps, or more than 200,000 characters of candidate expressions, is scored 0 as a
whole (one step over the whole completion, reward 0, flag ``candidate_limit``). Only what the policy
cannot cause is masked: a rollout reached after the call's deadline is VERIFIER_TIMEOUT, and a reference
that is not a number (or is over the bounds) is INVALID_REFERENCE. See ``docs/integrity-verifiers.md``.

A step it *cannot check* counts against the chain: an ``=`` with a number after it whose clause computes in
notation the parser does not read (a factorial ``100000! = 1``, scientific notation ``1e308 * 1e308 = 1``,
LaTeX ``\\frac{1}{2} = 3``, braces, radicals, big operators) is a wrong step (reward 0) and the rollout is
flagged ``unchecked_step``. Skipping it would let a chain hide a wrong step there and keep a reward of 1; a
right one in such notation (``3! = 6``) loses its credit, the price of paying only for what was checked.
Plain words before an ``=`` (``x = 5``) are still no step.

Reward (the outcome view of the same judgement): the mean of the step rewards (0 without steps); with option
``solution``, the share of the solution's steps written in place (``solution_frac``).
Components: ``steps`` (how many), ``step_frac`` (share right), with a reference ``answer``, and with option
``complete`` ``unused`` (the question's numbers no right step used).

Options (strings, per verifier in the config or per row): ``grounded: "true"`` credits a step only when
every number it computes with is in the question (the request's ``prompt``; its multiplier words count:
``twice`` is 2) or is the result of an earlier right step, so arithmetic that is right but unrelated to the
problem (``1 + 2 = 3``) is a wrong step, and a wrong or ungrounded result grounds nothing after it
(the prompt must hold the question: an empty one is refused); ``answer_step: "false"`` leaves the final
answer out of the steps when an outcome verifier already judges it (a completion without any step is
then one wrong step); ``complete: "true"`` pays for finishing the chain: a last step ends with the
completion and scores the share of the distinct numbers written in the question (its literals, not its
words) that some right step computes with, so one right step and a stop on a problem of 4, 1 and 2 scores
(1 + 2/3) / 2, not 1 (when the completion ends on a step, that step and this one are one step and score the
product). A heuristic for problems that use all their numbers, as generated ones do: a GSM8K question with
a number it does not need makes every chain pay for it. ``connected: "true"``: a right step whose result
no later right step computes with is a wrong step (the last step aside), so side sums that lead nowhere
(``6 + 4 = 10. 4 + 3 = 7. 3 + 3 = 6.``, which uses every number) earn nothing; results that meet later
(``2 * 3 = 6. 4 * 5 = 20. 6 + 20 = 26.``) keep their credit, and with ``complete`` only the numbers of
steps that keep it count as used. ``solution: "<a worked solution>"`` (per row, from a data row's
``options``; ``7 + 5 = 12. 12 - 3 = 9. The answer is 9.``): the k-th step is right only when it is also the
solution's k-th step, the same result from the same numbers in any order (``5 + 7 = 12`` matches), so
a right step is one of *this* problem's chain, in its place: side sums, repeats and steps past the
solution's end are wrong, and a completion with fewer steps than the solution ends on a wrong step
(stopping early does not pay); the reward (the outcome view, as ``kind: outcome``) is then
``solution_frac``, the share of the solution's steps written in place: partial credit that only this
problem's chain can earn, out of the steps written when there are more than the solution's (since 1.5.0: going
on past the chain's end costs). A solution without steps, or with a wrong step, is INVALID_REFERENCE (masked). All default to
the behaviour above.

>>> v = StepsVerifier()
>>> g = GroupRequest("steps", (Rollout(0, "16 - 3 - 4 = 9 eggs, 9 * 2 = 18. #### 18"),
...                            Rollout(1, "16 - 3 - 4 = 10, so 10 * 2 = 20")), Reference(answer="18"))
>>> [[(s.end, s.reward) for s in r.steps] for r in v.verify_group(g, VerifyContext())]
[[(14, 1.0), (31, 1.0), (40, 1.0)], [(15, 0.0), (31, 0.0)]]

Over 400 lines on purpose: the step grammar, its refusals and the verifier are read top to bottom as one
parser; no piece is used elsewhere.
"""

from __future__ import annotations

import re
from fractions import Fraction

from cohort.verifiers.base import (
    CANDIDATE_LIMIT,
    GroupRequest,
    InvalidRequest,
    Reference,  # noqa: F401  (doctest)
    Rollout,
    RolloutResult,
    RolloutStatus,
    StepReward,
    Verdict,
    VerifierBase,
    VerifyContext,
    option,
)

MAX_DIGITS = 40  # digits of one literal
MAX_EXPONENT = 64
MAX_BITS = 4096  # numerator or denominator of any intermediate value
MAX_STEPS = 256  # per rollout
MAX_LHS_CHARS = 200  # an expression is looked for this far before its '='
MAX_PARSED_CHARS = 200_000  # characters tokenised per rollout, over all candidate expressions

# a number: thousands groups or plain digits, optional decimals (no sign: signs are operators)
NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(NUMBER)
# Each optional part carries its own trailing blanks, so blanks match one way only (three `[ \t]*` in a row
# made the time cubic in the blanks after an `=`: minutes for 3,000 of them, extrapolated; tests/verifiers/test_redos.py).
_RESULT_RE = re.compile(r"[ \t]*(?:[$€£][ \t]*)?(?:(-)[ \t]*)?[$€£]?(" + NUMBER + ")")
_TOKEN_RE = re.compile(r"\s*(?:(" + NUMBER + r")|(\*\*|[-+*/×÷·^()]|[$€£]))")
_EXPR_CHARS = frozenset("0123456789 \t.,+-*/×÷·^()$€£")
_MUL = frozenset("*×·")
_DIV = frozenset("/÷")


class Refused(Exception):
    """A number beyond the bounds: the verifier will not spend the time on it (a wrong step, flagged)."""


class _TooMuch(Refused):
    """The completion as a whole is beyond the bounds (too many steps or expressions): scored 0, flagged."""


class _NotArithmetic(Exception):
    """Text that does not parse as an expression (the candidate is not a step)."""


def number(text: str) -> Fraction:
    """A literal such as ``1,234.50`` as an exact fraction; Refused above MAX_DIGITS digits."""
    digits = text.replace(",", "")
    if sum(c.isdigit() for c in digits) > MAX_DIGITS:
        raise Refused(f"a number of more than {MAX_DIGITS} digits")
    return Fraction(digits)


def _literal(text: str) -> Fraction | None:
    try:
        return number(text)
    except Refused:
        return None


def _check(x: Fraction) -> Fraction:
    if x.numerator.bit_length() > MAX_BITS or x.denominator.bit_length() > MAX_BITS:
        raise Refused(f"an intermediate value above {MAX_BITS} bits")
    return x


class _Parser:
    """expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*; unary := ('-'|'+') unary | power;
    power := atom (('^'|'**') unary)?; atom := number | '(' expr ')'. Currency signs are skipped."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []  # (kind, text): ("num", "1,000") or ("op", "*")
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                raise _NotArithmetic(text[pos:pos + 10])
            if m.group(1) is not None:
                self.tokens.append(("num", m.group(1)))
            elif m.group(2) not in "$€£":
                self.tokens.append(("op", m.group(2)))
            pos = m.end()
        self.i = 0
        self.depth = 0
        self.operators = sum(k == "op" and t not in "()" for k, t in self.tokens)

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) and self.tokens[self.i][0] == "op" else None

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.tokens):
            raise _NotArithmetic("trailing tokens")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while (op := self.peek()) in ("+", "-"):
            self.i += 1
            value = _check(value + self.term() if op == "+" else value - self.term())
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while (op := self.peek()) is not None and (op in _MUL or op in _DIV):
            self.i += 1
            right = self.unary()
            if op in _DIV:
                if right == 0:
                    raise ZeroDivisionError
                value = _check(value / right)
            else:
                value = _check(value * right)
        return value

    def unary(self) -> Fraction:
        op = self.peek()
        if op in ("-", "+"):
            self.i += 1
            self._enter()
            value = self.unary()
            self.depth -= 1
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.i += 1
            self._enter()
            exponent = self.unary()
            self.depth -= 1
            if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
                raise Refused(f"an exponent {exponent} (integers up to {MAX_EXPONENT} only)")
            bits = max(base.numerator.bit_length(), base.denominator.bit_length())
            if bits * abs(int(exponent)) > MAX_BITS:
                raise Refused(f"a power above {MAX_BITS} bits")
            if base == 0 and exponent < 0:
                raise ZeroDivisionError
            return _check(base ** int(exponent))
        return base

    def atom(self) -> Fraction:
        if self.i >= len(self.tokens):
            raise _NotArithmetic("expression ends early")
        kind, text = self.tokens[self.i]
        self.i += 1
        if kind == "num":
            return number(text)
        if text == "(":
            self._enter()
            value = self.expr()
            self.depth -= 1
            if self.peek() != ")":
                raise _NotArithmetic("unclosed parenthesis")
            self.i += 1
            return value
        raise _NotArithmetic(f"unexpected {text!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > 32:
            raise _NotArithmetic("nested too deep")


def evaluate(expression: str) -> tuple[Fraction, int]:
    """The exact value of an expression and its number of operators (raises _NotArithmetic, Refused,
    ZeroDivisionError)."""
    parser = _Parser(expression)
    return parser.parse(), parser.operators


_START_RE = re.compile(r"(?:^|(?<=[^\d.,]))(?:[\d$€£(]|-(?=\s*[\d$€£(]))")


def _left_sides(text: str, eq: int, floor: int) -> list[str]:
    """Candidate expressions ending just before the '=' at ``eq`` (not before ``floor``), longest first:
    the run of arithmetic characters before it, then that run cut at each later token start
    ("has 3, 16 - 3 = 13" -> "3, 16 - 3", "16 - 3", "3")."""
    start = eq
    lo = max(floor, eq - MAX_LHS_CHARS)
    while start > lo and text[start - 1] in _EXPR_CHARS:
        start -= 1
    if start == lo > floor and text[lo - 1] in _EXPR_CHARS:  # cut by the limit: its true start is unknown
        raise Refused(f"an expression of more than {MAX_LHS_CHARS} characters")
    run = text[start:eq]
    return [run[m.start():] for m in _START_RE.finditer(run)]


def _steps_of(text: str) -> list[tuple[int, Fraction, Fraction | None, int, str | None, str]]:
    """Candidate steps: (end offset, claimed result, computed value, decimals, why refused or None, the
    expression computed: "" when refused).

    ``computed`` is None for a division by zero and for a refused step (both are wrong steps).
    _TooMuch propagates (the completion as a whole is beyond the bounds).
    """
    out = []
    floor = 0
    parsed = 0
    for m in re.finditer(r"=", text):
        eq = m.start()
        if (eq and text[eq - 1] in "<>!=") or text[eq + 1 : eq + 2] == "=":
            floor = eq + 1
            continue
        result = _RESULT_RE.match(text, eq + 1)
        lo, floor = floor, eq + 1
        if result is None:
            continue
        refused: str | None = None
        try:
            lhs_options = _left_sides(text, eq, lo)
        except Refused as exc:
            lhs_options, refused = [], str(exc)
        found, value, expression = refused is not None, None, ""
        for lhs in lhs_options:
            parsed += len(lhs)
            if parsed > MAX_PARSED_CHARS:
                raise _TooMuch(f"more than {MAX_PARSED_CHARS} characters of candidate expressions")
            try:
                value, operators = evaluate(lhs)
            except ZeroDivisionError:
                found, value = True, None
                break
            except _NotArithmetic:
                continue
            except Refused as exc:  # '9^99 = 123': the policy's own step is beyond the bounds: a wrong step
                found, value, refused = True, None, str(exc)
                break
            found = operators > 0  # "x = 5", "18 = 18": not a step
            expression = lhs
            break
        if not found:
            unchecked = _unchecked(text, eq, lo)
            if unchecked is None:
                continue
            value, refused, expression = None, UNCHECKED + unchecked, ""  # a claim it cannot check: a wrong step
        try:
            claimed = number(result.group(2))
        except Refused as exc:  # '2 + 2 = 4000...0' (45 digits): a wrong step
            claimed, value, refused = Fraction(0), None, refused or f"a result: {exc}"
        if result.group(1):
            claimed = -claimed
        decimals = len(result.group(2).partition(".")[2])
        out.append((result.end(), claimed, value, decimals, refused, expression))
        if len(out) > MAX_STEPS:
            raise _TooMuch(f"more than {MAX_STEPS} steps")
    return out


UNCHECKED = "unchecked: "
"""The ``why`` of a step written in notation the parser does not read (see :func:`_unchecked`)."""
UNCHECKED_STEP = "unchecked_step"
"""The flag of a rollout with a step the verifier could not check (scored as a wrong step)."""
# notation that computes but that the parser does not read: a factorial, scientific notation, LaTeX
# (\frac{1}{2}, \cdot, \sqrt), braces, radicals and big operators. Plain words before an '=' ("x = 5", "the
# total = 9") are not claims of arithmetic and stay out of the steps.
_UNCHECKED_RE = re.compile(r"[\d)]\s*!(?!=)|\d(?:\.\d+)?[eE][+-]?\d|\\[A-Za-z]+|[{}]|[√∑∏∫]")
_CLAUSE_RE = re.compile(r"[.;:,]\s|\n")


def _unchecked(text: str, eq: int, floor: int) -> str | None:
    """The notation, when the clause before the '=' at ``eq`` computes something the parser cannot read
    (``100000! = 1``, ``1e308 * 1e308 = 1``, ``\\frac{1}{2} = 3``), else None. Such a step cannot be
    checked, so it cannot be credited: a wrong step, flagged ``unchecked_step`` (else a policy could hide
    a wrong step in notation the parser skips and keep a reward of 1)."""
    start = max(floor, eq - MAX_LHS_CHARS)
    clause = text[start:eq]
    breaks = list(_CLAUSE_RE.finditer(clause))
    if breaks:
        clause = clause[breaks[-1].end():]
    m = _UNCHECKED_RE.search(clause)
    return None if m is None else f"{clause.strip()[:40]!r} ({m.group().strip()!r} is not read)"


def _right(claimed: Fraction, value: Fraction | None, decimals: int) -> bool:
    if value is None:
        return False
    if decimals == 0:
        return value == claimed
    return abs(value - claimed) * 2 * 10**decimals <= 1  # the exact value rounds to what was written


def final_number(text: str) -> tuple[int, Fraction | None] | None:
    """(end offset, value) of the completion's final answer: the number after the last ``####``, else the
    last number (a leading minus sign counts). The value is None for a literal too long to be any
    reference (a wrong answer, not a refusal: writing huge numbers must not escape the gradient)."""
    at = text.rfind("####")
    if at >= 0:
        m = _RESULT_RE.match(text, at + 4)
        if m is not None:
            value = _literal(m.group(2))
            return m.end(), None if value is None else -value if m.group(1) else value
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    if last is None:
        return None
    value = _literal(last.group())
    if value is None:
        return last.end(), None
    # a minus right before it is a sign unless it follows a number or ")" (then it is an operator)
    negative = re.search(r"(?:^|[^\d\s)])\s*-\s*[$€£]?\s*$", text[max(0, last.start() - 12) : last.start()])
    return last.end(), -value if negative else value


_NUMBER_WORDS = {"twice": (2,), "double": (2,), "doubles": (2,), "half": (2, Fraction(1, 2)),
                 "halves": (2, Fraction(1, 2)), "three times": (3,), "triple": (3,), "triples": (3,), "one": (1,),
                 "two": (2,), "three": (3,), "four": (4,), "five": (5,), "six": (6,), "seven": (7,), "eight": (8,),
                 "nine": (9,), "ten": (10,), "dozen": (12,), "hundred": (100,), "percent": (100,), "%": (100,)}
_WORDS_RE = re.compile(r"\b(" + "|".join(sorted((w for w in _NUMBER_WORDS if w.isalpha() or " " in w), key=len,
                                                   reverse=True)) + r")\b|(%)", re.IGNORECASE)


def question_numbers(prompt: str) -> frozenset[Fraction]:
    """The numbers a grounded step may start from, as magnitudes: the question's literals, and the numbers
    its words name (``twice`` 2, ``three times`` 3, ``half`` 2 or 0.5, ``dozen`` 12, ``%`` 100). Literals
    beyond the bounds are left out. A word the table does not know (``quarter``) grounds nothing."""
    found = set(question_literals(prompt))
    for word, sign in _WORDS_RE.findall(prompt):
        found.update(Fraction(x) for x in _NUMBER_WORDS[(word or sign).lower()])
    return frozenset(found)


def question_literals(prompt: str) -> frozenset[Fraction]:
    """The distinct numbers written as literals in the question (option ``complete``), magnitudes."""
    return frozenset(v for v in map(_literal, _NUMBER_RE.findall(prompt)) if v is not None)


Chain = tuple[tuple[Fraction, tuple[Fraction, ...]], ...]
"""A worked solution's steps, in order: (result, the numbers it computes with, sorted)."""


def _signature(claimed: Fraction, expression: str) -> tuple[Fraction, tuple[Fraction, ...]]:
    return claimed, tuple(sorted(number(x) for x in _NUMBER_RE.findall(expression)))


def solution_chain(text: str) -> Chain:
    """The steps of a worked solution (option ``solution``); ValueError when it has none, or a step that
    is wrong or beyond the bounds (the reference is broken: its rollouts are masked, never scored)."""
    try:
        candidates = _steps_of(text)
    except _TooMuch as exc:
        raise ValueError(f"solution: {exc}") from None
    if not candidates:
        raise ValueError(f"solution {text[:40]!r} holds no step such as 4 + 3 = 7")
    for _, claimed, value, d, why, expression in candidates:
        if why is not None or not _right(claimed, value, d):
            raise ValueError(f"solution step {expression.strip()!r} = {claimed} is wrong or beyond the bounds")
    return tuple(_signature(claimed, expression) for _, claimed, _, _, _, expression in candidates)


def score_rollout(rollout: Rollout, gold: Fraction | None, grounding: frozenset[Fraction] | None = None,
                  answer_step: bool = True, required: frozenset[Fraction] | None = None,
                  connected: bool = False, solution: Chain | None = None) -> RolloutResult:
    """Score one completion. ``grounding`` (option ``grounded``): a step is right only when its result is
    right *and* every number it computes with is one of these (the question's) or the result of an
    earlier right step of the completion, so ``1 + 2 = 3`` earns nothing in a problem about 4 and 9 pencils.
    ``answer_step`` False (option ``answer_step: "false"``): no final-answer step; the answer is left to
    the outcome verifier that judges it (its ``answer`` component is still reported), and a completion
    without any step is one wrong step over the whole of it. ``required`` (option ``complete``): a last step
    at the end of the completion scores the share of these numbers that right steps compute with.
    ``connected`` (option ``connected``): a right step whose result no later right step computes with is a
    wrong step, unless it is the last one, so a chain must lead to its end. ``solution`` (option
    ``solution``): the k-th step is right only when it is also the worked solution's k-th step (the same
    result from the same numbers), and a completion with fewer steps than the solution ends on a wrong step."""
    text = rollout.completion
    try:
        candidates = _steps_of(text)
    except _TooMuch as exc:  # the policy wrote it: scored 0 over the whole completion, flagged, never masked
        components = {"steps": 1.0, "step_frac": 0.0} | ({"answer": 0.0} if gold is not None else {})
        return RolloutResult.ok(rollout.index, 0.0, Verdict.INCORRECT, components, f"candidate limit: {exc}",
                                flags=(CANDIDATE_LIMIT,), steps=[StepReward(len(text), 0.0)])
    final = final_number(text) if gold is not None else None
    steps, known, ungrounded, matched = [], set(grounding or ()), 0, 0
    rights: list[tuple[int, Fraction, set[Fraction]]] = []  # (step, result magnitude, operands) of each right step
    for end, claimed, value, d, _, expression in candidates:
        right = _right(claimed, value, d)
        operands = {number(x) for x in _NUMBER_RE.findall(expression)}
        if grounding is not None and right and not known.issuperset(operands):
            right, ungrounded = False, ungrounded + 1
        if solution is not None and right:
            k = len(steps)
            right = k < len(solution) and _signature(claimed, expression) == solution[k]
            matched += right
        steps.append(StepReward(end, float(right)))
        if right:  # a result the next steps may build on (its magnitude: operands are read without signs)
            known.add(abs(claimed))
            rights.append((len(steps) - 1, abs(claimed), operands))
    dangling = 0
    if connected:  # a right step whose result no later right step uses (the last step aside) leads nowhere
        for k, (i, result, _) in enumerate(rights):
            if i != len(steps) - 1 and not any(result in later for _, _, later in rights[k + 1:]):
                steps[i] = StepReward(steps[i].end, 0.0)
                dangling += 1
    used = {x for i, _, operands in rights if steps[i].reward for x in operands}
    refusals = [why for _, _, _, _, why, _ in candidates if why is not None and not why.startswith(UNCHECKED)]
    unchecked = [why.removeprefix(UNCHECKED) for _, _, _, _, why, _ in candidates if why is not None and why.startswith(UNCHECKED)]
    components: dict[str, float] = {}
    if gold is not None:
        if final is not None and final[1] is None:
            refusals.append(f"a final answer of more than {MAX_DIGITS} digits")
        answer = float(final is not None and final[1] == gold)
        components["answer"] = answer
        if final is not None and answer_step:
            if steps and steps[-1].end == final[0]:
                steps[-1] = StepReward(final[0], steps[-1].reward * answer)
            elif not steps or final[0] > steps[-1].end:
                steps.append(StepReward(final[0], answer))
    # An empty completion has nowhere to end a step (ends are 1..len): it gets none and scores 0, never a
    # malformed step, which the host would mask (and a policy would learn to stop at once to escape its gradient)
    if not answer_step and not steps and text:  # no step at all is no better than wrong ones (else writing none pays)
        steps.append(StepReward(len(text), 0.0))
    if solution is not None and text and len(candidates) < len(solution):  # stopped early: the chain ends wrong
        if steps and steps[-1].end == len(text):
            steps[-1] = StepReward(len(text), 0.0)
        else:
            steps.append(StepReward(len(text), 0.0))
    unused = sorted(required - used) if required else []
    if required and text:  # a last step, "the chain is finished": the share of the question's numbers used
        coverage = 1.0 - len(unused) / len(required)
        if steps and steps[-1].end == len(text):  # the text ends on a step: one step, both must hold
            steps[-1] = StepReward(len(text), steps[-1].reward * coverage)
        else:
            steps.append(StepReward(len(text), coverage))
    n = len(steps)
    right = sum(s.reward for s in steps)
    components["steps"] = float(n)
    components["step_frac"] = right / n if n else 0.0
    if required is not None:
        components["unused"] = float(len(unused))
    if solution is not None:
        components["solution_frac"] = matched / len(solution)
    if n == 0:
        verdict = Verdict.NO_ANSWER
    else:
        verdict = Verdict.CORRECT if right == n else Verdict.INCORRECT if right == 0 else Verdict.PARTIAL
    detail = f"{int(right)}/{n} steps right" + (f" ({ungrounded} right but not from the question)" if ungrounded else "")
    if dangling:
        detail += f"; {dangling} right but unused by any later step"
    if solution is not None:
        detail += f"; {matched} of the solution's {len(solution)} steps"
    if unused:
        detail += f"; {len(unused)} of the question's numbers never used ({', '.join(map(str, unused[:5]))})"
    if final is not None:
        detail += f"; final answer {final[1]}" if final[1] is not None else "; final answer beyond the bounds"
    if refusals:
        detail += f"; candidate limit, scored wrong: {refusals[0]}" + (f" (+{len(refusals) - 1} more)" if len(refusals) > 1 else "")
    if unchecked:
        detail += f"; {len(unchecked)} step(s) it cannot check, scored wrong: {unchecked[0]}"
    flags = ((CANDIDATE_LIMIT,) if refusals else ()) + ((UNCHECKED_STEP,) if unchecked else ())
    # the outcome view: the share of right steps, or with a solution the share of its steps written in place (the
    # share of right steps would pay a completion that stops after one right step more than a longer honest try),
    # out of the steps written when there are more: going on past the chain's end costs, as its wrong steps do in
    # the process view (1.4.0 paid a chain that never stopped as much as one that did, and a run learned it)
    reward = matched / max(len(solution), len(candidates)) if solution is not None else right / n if n else 0.0
    return RolloutResult.ok(rollout.index, reward, verdict, components, detail, flags, steps=steps)


def parse_reference(raw: str) -> Fraction:
    m = re.fullmatch(r"\s*(-?)\s*[$€£]?\s*(" + NUMBER + r")\s*", raw)
    if m is None:
        raise ValueError(f"reference {raw[:40]!r} is not a number")
    value = number(m.group(2))
    return -value if m.group(1) else value


class StepsVerifier(VerifierBase):
    """No server-side options: every setting is a request option (above)."""

    name = "steps"
    version = "1.6.0"  # 1.6.0: a step it cannot check (factorial, scientific notation, LaTeX) is a wrong step, flagged unchecked_step (issue 49); 1.5.0: with a solution, steps past its length lower the outcome reward; 1.4.0: option solution; 1.3.0: options complete and connected; 1.2.0: options grounded and answer_step (issue 32); 1.1.0: a step beyond the bounds is a wrong step
    description = "process rewards: each arithmetic step of a chain of thought (and the final answer) right or wrong"
    reference_kinds = ()  # an answer is optional (it adds the final step)
    max_concurrency = 1  # pure Python

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        if group.reference.code_tests is not None:
            raise InvalidRequest("verifier 'steps' takes an optional reference.answer, not code_tests")
        gold = None
        if group.reference.answer is not None:
            try:
                gold = parse_reference(group.reference.answer)
            except (ValueError, Refused) as exc:
                return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, str(exc)) for r in group.rollouts]
        grounded = option(group, "grounded", "false", ("true", "false")) == "true"
        answer_step = option(group, "answer_step", "true", ("true", "false")) == "true"
        complete = option(group, "complete", "false", ("true", "false")) == "true"
        connected = option(group, "connected", "false", ("true", "false")) == "true"
        for name, on in (("grounded", grounded), ("complete", complete)):
            if on and not group.prompt.strip():
                raise InvalidRequest(f"steps option {name}=true needs the question: the request's prompt is empty")
        solution = None
        if "solution" in group.options:
            try:
                solution = solution_chain(group.options["solution"])
            except (ValueError, Refused) as exc:
                return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, str(exc)) for r in group.rollouts]
        grounding = question_numbers(group.prompt) if grounded else None
        required = question_literals(group.prompt) if complete else None
        out = []
        for r in group.rollouts:
            if ctx.expired():
                out.append(RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_TIMEOUT, "call deadline passed"))
                continue
            out.append(score_rollout(r, gold, grounding, answer_step, required, connected, solution))
        return out

