"""The ``math`` verifier: extract the final answer, compare it with the gold answer.

Per group: extraction and the cheap comparison (exact rationals, structure, units) run in the calling
thread; identical extracted answers are checked once; verdicts are cached (LRU keyed by verifier
version, gold and normalised answer); only leaves that need SymPy go to the worker pool, in parallel,
each with its budget of worker time counted from when a ready worker takes it (a replacement worker's
start-up is not charged to a check), the wait for a worker bounded by ``ctx.deadline``.

Statuses: OK+CORRECT (reward 1), OK+INCORRECT (0), OK+NO_ANSWER (0); INVALID_REFERENCE when the gold answer
cannot be parsed or is beyond the caps; VERIFIER_ERROR when a worker crashed or SymPy failed internally. A check
that runs out of its budget (or hits the memory cap or the recursion limit) is attributed (issue 29,
:meth:`MathVerifier._attribute`): the gold and the answer are probed alone, each under its own budget; the
answer's own expression over the budget is the candidate's doing (OK+INCORRECT, flag ``candidate_limit``, so
the policy cannot escape a wrong answer's gradient by writing something costly), the gold's is masked
(VERIFIER_TIMEOUT), and a pair that is slow only together, the call's deadline or a crash stay masked. An
answer beyond the input caps is OK+INCORRECT with ``answer_over_limits`` and ``candidate_limit``. The table
of every path is in ``docs/integrity-verifiers.md``. A completion that only says it has
no answer ("I am not sure.", "cannot determine") is NO_ANSWER, not INCORRECT. Boxes joined by a hedge
("\\boxed{2}, or maybe \\boxed{3}") are INCORRECT whatever the gold (flag ``hedged``).

Options (the request's ``options`` map):

- ``timeout_s``: per-rollout SymPy budget in seconds (default: the rollout timeout, else 5; clamped to
  [0.05, 30]).
- ``decimal_comma``: ``auto`` (default) | ``never`` | ``always``. ``auto`` reads ``2,74`` as 2.74 only when it
  is the whole answer, the gold is one decimal number and the comma cannot be a thousands separator (not three
  digits after it, unless the part before is 0); ``never`` never does; ``always`` reads every comma between
  digits as a decimal comma.

The request's ``prompt`` is read for a rounding request ("to the nearest hundredth", "round to two decimal
places", "as a decimal"...): only then is a rounded decimal accepted for an exact irrational gold
(:func:`verifiers.math.compare.rounding_request`).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from cohort.verifiers.base import (CANDIDATE_LIMIT, LRU, GroupRequest, InvalidRequest, RolloutResult, RolloutStatus,
                                   Verdict, VerifierBase, VerifyContext, float_option, option)
from cohort.verifiers.math.compare import DECIMAL_COMMA_CHOICES, NeedSympy, OverLimits, Policy, cheap_leaf, compare, rounding_request
from cohort.verifiers.math.extract import MAX_ANSWER_CHARS, Extraction, extract_answer
from cohort.verifiers.math.normalize import normalize
from cohort.verifiers.math.outcome import BadReference, CheckFailed, Compared, Probe, Probed, TooLarge
from cohort.verifiers.math.pool import default_pool_size, math_pool
from cohort.verifiers.options import VerifierOptions

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 30.0
MIN_TIMEOUT_S = 0.05


@dataclass(frozen=True)
class Check:
    """The result of comparing one distinct answer with the gold."""

    status: RolloutStatus
    equal: bool = False
    how: str = ""
    flags: tuple[str, ...] = ()


class MathOptions(VerifierOptions):
    """The math verifier's server-side settings (serve config ``verifiers.math``)."""

    workers: int | None = Field(None, ge=1)
    """SymPy worker processes (formerly ``COHORT_MATH_WORKERS``); null: one per core, at most 8."""
    memory_mb: int = Field(1536, ge=64)
    """Address space of each worker (``RLIMIT_AS``), in MiB: a check over it is killed with its worker."""
    cache_size: int = Field(100_000, ge=0)
    """Verdicts kept (LRU keyed by verifier version, gold and normalised answer); 0 disables the cache."""
    start_method: Literal["forkserver", "spawn"] | None = None
    """How workers start: ``forkserver`` (SymPy preloaded, a replacement ready in milliseconds) or ``spawn``;
    null: forkserver where the platform has it."""


class MathVerifier(VerifierBase):
    Options = MathOptions
    name = "math"
    version = "1.3.0"  # verdict rules changed (issue 29: self-corrections, attribution): cached 1.2.0 verdicts do not carry over
    description = "final-answer equivalence (boxed/answer tags/markers) with exact rationals and SymPy in killable workers"
    reference_kinds = ("answer",)

    def __init__(self, options: MathOptions | None = None, **fields) -> None:
        """``MathVerifier(workers=2)`` is ``MathVerifier(MathOptions(workers=2))``."""
        self.options = opts = options or MathOptions(**fields)
        self.pool = math_pool(opts.workers or default_pool_size(), memory_mb=opts.memory_mb, start_method=opts.start_method)
        self._fanout = ThreadPoolExecutor(max_workers=4 * self.pool.size, thread_name_prefix="math-check")
        self.cache = LRU(opts.cache_size)
        # Workers start in the background now, so the first request does not pay for it; the server's health
        # stays NOT_SERVING until one has answered a first check (ready()).
        self._ready = threading.Event()
        threading.Thread(target=self._warm_up, daemon=True, name="math-pool-start").start()

    def _warm_up(self) -> None:
        self.pool.start()
        if self.pool.run(Probe(("1",)), time.monotonic() + 600, budget_s=60).kind == "ok":
            self._ready.set()

    def ready(self) -> bool:
        """Whether a check can be answered now: a worker has set up and answered one (the server reports
        SERVING only then)."""
        return self._ready.is_set()

    def close(self) -> None:
        self._fanout.shutdown(wait=False, cancel_futures=True)
        self.pool.close()

    # ----------------------------------------------------------------------------------------- API

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        gold = group.reference.answer
        if gold is None:
            raise InvalidRequest("verifier 'math' needs reference.answer (the gold answer)")
        timeout = float_option(group, "timeout_s", group.rollout_timeout_s or DEFAULT_TIMEOUT_S)
        timeout = min(max(timeout, MIN_TIMEOUT_S), MAX_TIMEOUT_S)
        policy = Policy(rounding_request(group.prompt), option(group, "decimal_comma", "auto", DECIMAL_COMMA_CHOICES))  # type: ignore[arg-type]
        started = time.monotonic()
        if not gold.strip() or len(gold) > MAX_ANSWER_CHARS:
            why = "gold answer is empty" if not gold.strip() else "gold answer is too long"
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, why) for r in group.rollouts]

        extractions = [_extract(r.completion) for r in group.rollouts]
        keys = [self._key(gold, ex, policy) for ex in extractions]
        distinct = {key: ex for key, ex in zip(keys, extractions) if ex.answers}
        checks = self._check_all(gold, distinct, policy, started, timeout, ctx)
        results = []
        for rollout, ex, key in zip(group.rollouts, extractions, keys):
            result = self._result(rollout.index, ex, checks.get(key))
            results.append(_with_duration(result, time.monotonic() - started))
        return results

    # ----------------------------------------------------------------------------------------- internals

    def _key(self, gold: str, ex: Extraction, policy: Policy) -> tuple:
        return (self.version, gold, policy, ex.kind, tuple(normalize(a) for a in ex.answers))

    def _check_all(self, gold: str, distinct: dict[tuple, Extraction], policy: Policy, started: float, timeout: float, ctx: VerifyContext) -> dict[tuple, Check]:
        checks: dict[tuple, Check] = {}
        needs_worker: list[tuple] = []
        for key, ex in distinct.items():
            if ex.kind == "hedge":  # candidates, not parts of one answer: never correct, whatever the gold
                checks[key] = Check(RolloutStatus.OK, False, "boxes joined by a hedge are candidates, not one answer")
                continue
            cached = self.cache.get(key)
            if cached is not None:
                checks[key] = cached
                continue
            try:
                outcome = compare(gold, ex.answers, cheap_leaf, policy, ex.kind == "forms")
                checks[key] = Check(RolloutStatus.OK, outcome.equal, outcome.how)
                self.cache.put(key, checks[key])
            except NeedSympy:
                needs_worker.append(key)
            except OverLimits as exc:
                checks[key] = self._over_limits(exc.side, exc.why)
                self.cache.put(key, checks[key])
            except Exception:  # a bug in the cheap pass must not fail the group: the worker decides
                log.exception("math cheap pass failed on gold %r answers %r", gold[:200], ex.answers)
                needs_worker.append(key)
        if not needs_worker:
            return checks
        # Each check gets `timeout` of worker time from when a ready worker takes it (so a busy machine's slow
        # start of a replacement worker is never charged to the check); the wait for a free worker is bounded
        # by the call's deadline, else by the group budget.
        group_deadline = started + timeout * max(1, -(-len(needs_worker) // self.pool.size))
        if ctx.deadline is not None:
            group_deadline = ctx.deadline
        gold_probe = _GoldProbe(lambda: self._probe((gold,), timeout, ctx))  # run once per group, when needed
        futures = {key: self._fanout.submit(self._check_in_worker, (gold, distinct[key].answers, policy, distinct[key].kind == "forms"),
                                            timeout, group_deadline, ctx, gold_probe)
                   for key in needs_worker}
        for key, future in futures.items():
            checks[key] = future.result()
            if checks[key].status in (RolloutStatus.OK, RolloutStatus.INVALID_REFERENCE):
                self.cache.put(key, checks[key])
        return checks

    def _check_in_worker(self, task: tuple, timeout: float, group_deadline: float, ctx: VerifyContext | None = None,
                         gold_probe: _GoldProbe | None = None) -> Check:
        result = self.pool.run(task, group_deadline, budget_s=timeout)
        if result.kind == "timeout":
            joint = Check(RolloutStatus.VERIFIER_TIMEOUT, how=f"SymPy check did not finish in time ({result.detail})")
            return self._attribute(joint, task[1], timeout, ctx, gold_probe)
        if result.kind != "ok":  # the worker died under the check twice or more: infrastructure, masked
            return Check(RolloutStatus.VERIFIER_ERROR, how=result.detail)
        match result.value:
            case Compared(equal, how):
                return Check(RolloutStatus.OK, equal, how)
            case BadReference(why):
                return Check(RolloutStatus.INVALID_REFERENCE, how=why)
            case TooLarge(side, why):
                return self._over_limits(side, why)
            case CheckFailed(why):
                return self._attribute(Check(RolloutStatus.VERIFIER_ERROR, how=why), task[1], timeout, ctx, gold_probe)
        return Check(RolloutStatus.VERIFIER_ERROR, how=f"unexpected worker result {result.value!r:.200}")

    # ---- who caused a check that ran out of time or memory (issue 29) ----------------------------

    def _probe(self, texts: tuple[str, ...], timeout: float, ctx: VerifyContext | None) -> str | Probed:
        """One side's own SymPy work under its own budget: a :class:`Probed`, or ``"timeout"`` (it ran its
        whole budget on a worker), ``"cut"`` (the call's deadline, or the wait for a worker, came first:
        nothing is shown) or ``"crashed"``."""
        # Waiting for a free worker does not count against the side (the budget starts on the worker);
        # the wait itself is bounded by the call's deadline, else by two more budgets.
        deadline = time.monotonic() + 3 * timeout
        if ctx is not None and ctx.deadline is not None:
            deadline = min(deadline, ctx.deadline)
        if deadline <= time.monotonic():
            return "cut"
        result = self.pool.run(Probe(tuple(texts)), deadline, budget_s=timeout)
        if result.kind == "timeout":
            return "timeout" if result.detail == "ran past its budget" else "cut"
        if result.kind != "ok" or not isinstance(result.value, Probed):
            return "crashed"
        return result.value

    def _attribute(self, joint: Check, answers: tuple[str, ...], timeout: float, ctx: VerifyContext | None,
                   gold_probe: _GoldProbe | None) -> Check:
        """Decide who caused ``joint`` (a comparison that timed out or failed in the worker) by running each
        side alone under its own budget, the gold's once per group and in parallel with the answer's:

        - the gold alone is over the budget: the reference's doing, masked (VERIFIER_TIMEOUT; INVALID_REFERENCE
          when it hits the memory cap or the recursion limit);
        - the answer alone is over the budget, and the gold alone is cheap (a quarter of it at most, so that two
          sides of similar cost never blame the answer on timing noise): the candidate's doing, scored INCORRECT
          with the flag ``candidate_limit`` (a mask would let the policy escape a wrong answer's gradient);
        - otherwise (both sides are cheap alone, the call's deadline came first, a worker crashed): masked as
          ``joint`` says.
        """
        if gold_probe is None or (ctx is not None and ctx.expired()):
            return joint
        gold_probe.start()
        answer = self._probe(answers, timeout, ctx)
        gold = gold_probe.result()
        if gold == "timeout":
            return Check(RolloutStatus.VERIFIER_TIMEOUT, how=f"{joint.how}; the gold answer alone takes SymPy over the {timeout:g}s budget")
        if isinstance(gold, Probed) and gold.limit is not None:
            return Check(RolloutStatus.INVALID_REFERENCE, how=f"the gold answer alone hits the {gold.limit} limit of SymPy")
        gold_cheap = isinstance(gold, Probed) and gold.seconds <= timeout / 4
        if gold_cheap and (answer == "timeout" or (isinstance(answer, Probed) and answer.limit is not None)):
            what = f"over the {timeout:g}s budget" if answer == "timeout" else f"to its {answer.limit} limit"  # type: ignore[union-attr]
            return Check(RolloutStatus.OK, False, f"answer not evaluated: SymPy on the answer's own expression runs {what} "
                         f"(the gold alone takes {gold.seconds:.2f}s)", (CANDIDATE_LIMIT,))  # type: ignore[union-attr]
        return joint

    @staticmethod
    def _over_limits(side: str, why: str) -> Check:
        if side == "gold":
            return Check(RolloutStatus.INVALID_REFERENCE, how=f"gold answer {why}")
        # A final answer beyond the input caps is not a reasonable answer: it is scored, and flagged.
        return Check(RolloutStatus.OK, False, f"answer not evaluated: {why}", ("answer_over_limits", CANDIDATE_LIMIT))

    def _result(self, index: int, ex: Extraction, check: Check | None) -> RolloutResult:
        flags = list(ex.flags)
        if ex.source == "extraction_error":
            return replace(RolloutResult.unusable(index, RolloutStatus.VERIFIER_ERROR, "answer extraction failed"), flags=tuple(flags))
        if not ex.answers:
            return RolloutResult.ok(index, 0.0, Verdict.NO_ANSWER, {"correct": 0.0, "has_answer": 0.0}, f"no final answer found ({ex.source})", flags)
        assert check is not None
        shown = " | ".join(a[:120] for a in ex.answers)
        if check.status is not RolloutStatus.OK:
            result = RolloutResult.unusable(index, check.status, f"extracted '{shown}' via {ex.source}; {check.how}")
            return replace(result, flags=tuple(flags))
        flags.extend(check.flags)
        if not check.equal and "no_answer_phrase" in flags:
            return RolloutResult.ok(index, 0.0, Verdict.NO_ANSWER, {"correct": 0.0, "has_answer": 0.0}, f"no final answer: the response says {shown!r}", flags)
        correct = 1.0 if check.equal else 0.0
        if len(ex.answers) > 1 and not check.equal and "hedged" not in flags:
            flags.append("hedged")
        detail = f"extracted '{shown}' via {ex.source}; {check.how}"
        return RolloutResult.ok(index, correct, None, {"correct": correct, "has_answer": 1.0}, detail, flags)


class _GoldProbe:
    """The gold's own probe, run at most once per group, in its own thread (never on the fan-out pool,
    whose threads wait for it), and only when a check of the group needs it."""

    def __init__(self, run) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._value: str | Probed = "crashed"

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._body, daemon=True, name="math-gold-probe")
                self._thread.start()

    def _body(self) -> None:
        self._value = self._run()

    def result(self) -> str | Probed:
        self.start()
        assert self._thread is not None
        self._thread.join()
        return self._value


def _extract(completion: str) -> Extraction:
    try:
        return extract_answer(completion)
    except Exception:  # never fail a group on one odd response; it is reported as unusable below
        log.exception("math answer extraction failed")
        return Extraction((), "extraction_error", ("extraction_error",))


def _with_duration(result: RolloutResult, seconds: float) -> RolloutResult:
    return replace(result, duration_s=seconds)
