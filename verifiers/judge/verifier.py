"""The ``judge`` verifier: a model grades each completion against a rubric; its answer is the reward.

The back-end (a local transformers model or an OpenAI-compatible endpoint) is the server's choice,
set by its options (serve config ``verifiers.judge``: :class:`~verifiers.judge.backends.JudgeConfig`);
what to ask is the row's, in the request ``options``:

- ``method``: ``verdict`` (default; the judge answers Yes/No to the rubric: reward 1/0 from a text
  judge, P(Yes) between Yes and No from a local one), ``score`` (text judges: "Score: N" out of
  ``max_score``, default 10, scaled to [0, 1]), ``pairwise`` (each pair of the group in both orders,
  "A" or "B"; the reward is the rollout's mean win rate, so position bias cancels), or
  ``reference_prob`` (local judges, needs ``reference.answer``: the judge reads the completion and the
  reward is its mean token probability of stating the reference as the response's final answer; the
  one method a 135M judge does reliably, see docs/judge.md).
- ``rubric``: ``match`` (does the final answer match the reference?, the default with a reference) or
  ``quality`` (correct, complete, helpful?, the default without); ``criteria`` replaces that question
  with the row's own words; ``template`` replaces the whole layout (see :class:`~verifiers.judge.prompt.Rubric`).
- ``reward``: ``prob`` (default: probabilities as they are, rounded to 4 decimals) or ``binary``
  (1 when the probability is at least 0.5). ``threshold`` (default 0.5): the verdict is CORRECT at or
  above it, else INCORRECT.
- ``on_injection``: what a completion that addresses the judge earns (flag ``judge_injection``,
  component ``injection`` = 1, whose mean is the rate): ``zero`` (default: reward 0, no judge call:
  the policy's doing), ``strip`` (judged with those sentences removed) or ``none`` (judged as written,
  flagged only; the delimiting alone defends it).

Failures of the judge are masked (see :mod:`verifiers.judge.backends` for the table); an answer that
cannot be parsed is VERIFIER_ERROR. Answers are cached (LRU, keyed by a hash of the back-end's model
and decoding settings and the full rendered query, so rubric, prompt, completion and reference are all
in it): a re-score is free and identical.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from cohort.verifiers.base import (
    CANDIDATE_LIMIT,
    LRU,
    GroupRequest,
    InvalidRequest,
    RolloutResult,
    RolloutStatus,
    Verdict,
    VerifierBase,
    VerifyContext,
    float_option,
    option,
)
from cohort.verifiers.judge.parse import Unparseable, parse_pair, parse_score, parse_verdict
from cohort.verifiers.judge.prompt import (
    ANSWER_FORMATS,
    RUBRICS,
    Rubric,
    delimit,
    injection_spans,
    messages,
    strip_injections,
)
from cohort.verifiers.judge.backends import (
    Answer,
    JudgeConfig,
    JudgeFailed,
    JudgeTimeout,
    JudgeUnavailable,
    Query,
    make_backend,
)

METHODS = ("verdict", "score", "pairwise", "reference_prob")
REFERENCE_PREFIX = "The final answer given in the response is"
PROB_DECIMALS = 4
MAX_PAIRWISE_ROLLOUTS = 16
"""pairwise asks G(G-1) questions: 240 at 16; a larger group is refused rather than left to run for hours."""
MIN_CHOICE_MASS = 0.01
"""A probability judge that puts less than this on the two verdict words together did not answer the
question asked (it is writing something else): VERIFIER_ERROR, as for an unparseable text reply."""


@dataclass(frozen=True)
class Failed:
    """The judge failed on a call: every rollout that needed it gets this status (masked)."""

    status: RolloutStatus
    detail: str


@dataclass(frozen=True)
class JudgeOptions:
    method: str
    rubric: Rubric
    reward: str
    threshold: float
    max_score: float
    on_injection: str

    @classmethod
    def from_group(cls, group: GroupRequest, methods: frozenset[str], backend: str) -> JudgeOptions:
        method = option(group, "method", "verdict", METHODS)
        if method not in methods:
            raise InvalidRequest(f"option method={method!r} for verifier 'judge': the {backend} back-end of this "
                                 f"server offers {sorted(methods)}")
        has_ref = group.reference.answer is not None
        if method == "reference_prob" and not has_ref:
            raise InvalidRequest("option method='reference_prob' for verifier 'judge' needs reference.answer")
        if method == "pairwise" and not 2 <= len(group.rollouts) <= MAX_PAIRWISE_ROLLOUTS:
            raise InvalidRequest(f"option method='pairwise' for verifier 'judge' needs 2 to {MAX_PAIRWISE_ROLLOUTS} "
                                 f"rollouts in the group (G(G-1) judge queries), got {len(group.rollouts)}")
        name = option(group, "rubric", "match" if has_ref else "quality", tuple(RUBRICS))
        if name == "match" and not has_ref:
            raise InvalidRequest("option rubric='match' for verifier 'judge' needs reference.answer")
        max_score = float_option(group, "max_score", 10.0)
        if max_score <= 0:
            raise InvalidRequest(f"option max_score={max_score:g} for verifier 'judge': must be positive")
        template = group.options.get("template", "")
        if template and "{response}" not in template:
            raise InvalidRequest("option template for verifier 'judge' must contain {response}")
        fmt = ANSWER_FORMATS["pairwise" if method == "pairwise" else "score" if method == "score" else "verdict"]
        criteria = group.options.get("criteria", "").strip() or RUBRICS[name]
        threshold = float_option(group, "threshold", 0.5)
        if not 0.0 <= threshold <= 1.0:
            raise InvalidRequest(f"option threshold={threshold:g} for verifier 'judge': expected 0..1")
        return cls(
            method=method,
            rubric=Rubric(criteria, fmt.replace("{max_score}", f"{max_score:g}"), template),
            reward=option(group, "reward", "prob", ("prob", "binary")),
            threshold=threshold,
            max_score=max_score,
            on_injection=option(group, "on_injection", "zero", ("zero", "strip", "none")),
        )


class JudgeVerifier(VerifierBase):
    Options = JudgeConfig
    name = "judge"
    version = "1.0.0"
    description = "an LLM judge grades completions against a rubric (local transformers or OpenAI-compatible back-end)"
    reference_kinds: tuple[str, ...] = ("answer", "none")

    def __init__(self, options: JudgeConfig | None = None, **fields) -> None:
        """``JudgeVerifier(backend="openai", ...)`` is ``JudgeVerifier(JudgeConfig(backend="openai", ...))``."""
        self.config = self.options = options or JudgeConfig(**fields)
        self.backend = make_backend(self.config)
        self.cache = LRU(self.config.cache_size)
        self.backend.on_answers = self._store  # answers that arrive after their call gave up (see LocalBackend)

    def close(self) -> None:
        self.backend.close()

    # ----------------------------------------------------------------------------------------- API

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        opts = JudgeOptions.from_group(group, self.backend.methods, self.backend.name)
        started = time.monotonic()
        budget = max(self.config.timeout_s, group.rollout_timeout_s or 0.0)
        deadline = started + budget if ctx.deadline is None else min(ctx.deadline, started + budget)
        # surrounding whitespace is not part of the question (nor of the verdict, nor of the cache key);
        # fields are measured in the judge's tokens (FieldMeasure): a long question or reference is cut, a
        # completion over the limit is not judged (scored 0, candidate_limit: its cost is the candidate's doing)
        limit, measure = self.config.max_field_tokens, self.backend.measure
        question = self._cut(group.prompt.strip(), limit)
        reference = None if group.reference.answer is None else self._cut(group.reference.answer.strip(), limit)

        texts, notes, flagged, over = [], [], [], []
        for r in group.rollouts:
            text, size = measure.cut(r.completion, limit)
            over.append(size > limit)
            spans = injection_spans(text)
            note = [f"completion of {size} {measure.unit}; the judge reads at most {limit}: not judged"] if size > limit else []
            if spans:
                shown = "; ".join(repr(s[:40]) for _, _, s in spans[:2])
                note.append(f"judge_injection {shown} (on_injection={opts.on_injection})")
                if opts.on_injection != "none":
                    text = strip_injections(text)
            texts.append(text)
            notes.append(note)
            flagged.append(bool(spans))
        skip = [o or (f and opts.on_injection == "zero") for o, f in zip(over, flagged)]

        if opts.method == "pairwise":  # a flagged rollout is still an opponent (as stripped), never a winner
            inside = [i for i, o in enumerate(over) if not o]  # one over the limit is no opponent either
            values = [None] * len(texts)
            for i, v in zip(inside, self._pairwise([texts[i] for i in inside], question, reference, opts, deadline,
                                                   inside) if len(inside) >= 2 else []):
                values[i] = v
            values = [None if s else v for s, v in zip(skip, values)]
            lone = (0.5, "no opponent: the others are over the judge's limit")  # a win rate of no comparison
            values = [lone if v is None and not s else v for s, v in zip(skip, values)]
        else:
            todo = [i for i, s in enumerate(skip) if not s]
            values = [None] * len(texts)
            answers = self._ask([self._query(texts[i], question, reference, opts) for i in todo], deadline)
            if isinstance(answers, Failed):
                values = [answers if i in todo else None for i in range(len(texts))]
            else:
                for i, answer in zip(todo, answers):
                    values[i] = self._read(answer, opts)
        elapsed = time.monotonic() - started
        return [self._result(r.index, v, notes[k], flagged[k], over[k], opts, elapsed) for k, (r, v) in
                enumerate(zip(group.rollouts, values))]

    def _cut(self, text: str, limit: int) -> str:
        cut, size = self.backend.measure.cut(text, limit)
        return cut + " [...]" if size > limit else cut

    # ----------------------------------------------------------------------------------------- queries

    def _query(self, text: str, question: str, reference: str | None, opts: JudgeOptions) -> Query:
        if opts.method == "reference_prob":
            user = (f"Question:\n{delimit(question, 'question')}\n\nResponse:\n{delimit(text, 'response')}"
                    "\n\nWhat is the final answer given in the response?")
            return Query(_messages(user), prefix=REFERENCE_PREFIX, continuation=reference)
        user = opts.rubric.render(question, text, reference)
        return Query(_messages(user), choices=("Yes", "No"))

    def _pairwise(self, texts: list[str], question: str, reference: str | None, opts: JudgeOptions,
                  deadline: float, names: Sequence[int]) -> list:
        """Each rollout's mean win rate over every pair in both orders; ``names``: the rollouts' positions in
        the group (what ``detail`` calls them)."""
        n = len(texts)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]  # both orders of every pair
        queries = [Query(_messages(opts.rubric.render_pair(question, texts[i], texts[j], reference)), choices=("A", "B"))
                   for i, j in pairs]
        answers = self._ask(queries, deadline)
        if isinstance(answers, Failed):
            return [answers] * n
        wins: list[list[float]] = [[] for _ in range(n)]
        shown: list[list[str]] = [[] for _ in range(n)]
        broken: list[str | None] = [None] * n
        for (i, j), answer in zip(pairs, answers):
            read = self._read(answer, opts)
            if isinstance(read, str):  # unparseable: both rollouts of the pair lose a comparison
                broken[i] = broken[j] = read
                continue
            p_first, how = read
            wins[i].append(p_first)
            wins[j].append(1.0 - p_first)
            shown[i].append(f"vs {names[j]} as A: {how}")
            shown[j].append(f"vs {names[i]} as B: {how}")
        out = []
        for k in range(n):
            if broken[k] is not None:
                out.append(broken[k])
            else:
                out.append((round(sum(wins[k]) / len(wins[k]), PROB_DECIMALS), "; ".join(shown[k][:4])))
        return out

    def _ask(self, queries: Sequence[Query], deadline: float) -> list[Answer] | Failed:
        """Answers from the cache, the rest from the back-end in one call; a status when the judge failed."""
        keys = [q.digest(self.backend.model_id) for q in queries]
        found: dict[str, Answer] = {key: hit for key in keys if (hit := self.cache.get(key)) is not None}
        missing = {key: q for key, q in zip(keys, queries) if key not in found}
        if missing:
            try:
                answers = self.backend.ask(list(missing.values()), deadline)
            except JudgeUnavailable as exc:
                return Failed(RolloutStatus.DEPENDENCY_UNAVAILABLE, f"judge back-end unavailable: {exc}")
            except JudgeTimeout as exc:
                return Failed(RolloutStatus.VERIFIER_TIMEOUT, f"judge timed out: {exc}")
            except JudgeFailed as exc:
                return Failed(RolloutStatus.VERIFIER_ERROR, f"judge answered malformed: {exc}")
            fresh = dict(zip(missing, answers))
            self._store(list(missing.values()), answers)
            found.update(fresh)
        return [found[key] for key in keys]

    def _store(self, queries: Sequence[Query], answers: Sequence[Answer]) -> None:
        for query, answer in zip(queries, answers):
            self.cache.put(query.digest(self.backend.model_id), answer)

    def _read(self, answer: Answer, opts: JudgeOptions) -> tuple[float, str] | str:
        """(value in [0, 1], what was read), or the reason the answer is unreadable."""
        if answer.p is not None:
            if answer.mass < MIN_CHOICE_MASS:
                return (f"the judge put {answer.mass:.4f} of its probability on the verdict words (top token "
                        f"{answer.text!r}): not an answer to the rubric")
            p = round(answer.p, PROB_DECIMALS)
            what = {"reference_prob": "p(reference)", "pairwise": "p(A)"}.get(opts.method, "p(Yes)")
            return p, f"{what}={p:.4f} (top token {answer.text!r})"
        try:
            if opts.method == "score":
                value, shown = parse_score(answer.text, opts.max_score)
            elif opts.method == "pairwise":
                value, shown = parse_pair(answer.text)
            else:
                value, shown = parse_verdict(answer.text)
        except Unparseable as exc:
            return str(exc)
        return value, f"judge said {shown!r}"

    # ----------------------------------------------------------------------------------------- results

    def _result(self, index: int, value, notes: list[str], flagged: bool, over: bool, opts: JudgeOptions,
                elapsed: float) -> RolloutResult:
        flags = ("judge_injection",) if flagged else ()
        if over:  # the completion alone exceeds what the judge reads: the candidate's doing, never a mask
            result = RolloutResult.ok(index, 0.0, Verdict.INCORRECT, {"judge": 0.0, "injection": float(flagged)},
                                      "; ".join(notes), (CANDIDATE_LIMIT, *flags))
        elif isinstance(value, Failed):
            result = RolloutResult.unusable(index, value.status, "; ".join([value.detail, *notes]))
        elif isinstance(value, str):
            result = RolloutResult.unusable(index, RolloutStatus.VERIFIER_ERROR, "; ".join([value, *notes]))
        elif value is None:  # flagged, on_injection=zero: the policy addressed the judge
            result = RolloutResult.ok(index, 0.0, Verdict.INCORRECT, {"judge": 0.0, "injection": 1.0},
                                      "; ".join(["not judged: the completion addresses the judge", *notes]), flags)
        else:
            judged, how = value
            reward = float(judged >= 0.5) if opts.reward == "binary" and opts.method != "score" else judged
            verdict = Verdict.CORRECT if reward >= opts.threshold else Verdict.INCORRECT
            detail = "; ".join([f"{self.backend.model_id.split(':')[0]} judge, {opts.method}: {how}", *notes])
            result = RolloutResult.ok(index, reward, verdict, {"judge": judged, "injection": float(flagged)}, detail, flags)
        result.flags = tuple(dict.fromkeys((*result.flags, *flags)))
        result.duration_s = elapsed
        return result


def _messages(user: str) -> tuple[tuple[str, str], ...]:
    return tuple((m["role"], m["content"]) for m in messages(user))
