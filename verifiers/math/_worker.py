"""Worker process body: (gold, answers[, policy, forms]) checks and :class:`Probe` tasks, answered with a
typed result (:data:`verifiers.math.outcome.WorkerResult`). Main thread only."""

from __future__ import annotations

import resource
import time

from cohort.verifiers.math.compare import DEFAULT_POLICY, OverLimits, Policy, compare, side_terms
from cohort.verifiers.math.outcome import BadReference, CheckFailed, Compared, Probe, Probed, TooLarge, WorkerResult
from cohort.verifiers.math.symbolic import GoldUnparseable, self_work, sympy_leaf_equal


def check(gold: str, answers: tuple[str, ...], policy: Policy = DEFAULT_POLICY, forms: bool = False) -> WorkerResult:
    try:
        outcome = compare(gold, answers, sympy_leaf_equal, policy, forms)
        return Compared(bool(outcome.equal), outcome.how)
    except GoldUnparseable as exc:
        return BadReference(f"gold answer does not parse: {exc}"[:300])
    except OverLimits as exc:
        if exc.side == "gold":
            return BadReference(f"gold answer {exc.why}")
        return TooLarge(exc.side, exc.why)
    except MemoryError:
        return CheckFailed("memory cap reached", "memory")
    except RecursionError:  # the gold's or the answer's nesting: the parent's probes say which
        return CheckFailed("too deeply nested for SymPy", "recursion")
    except Exception as exc:  # SymPy internals raise anything; reported as a verifier error, never INCORRECT
        return CheckFailed(f"{type(exc).__name__}: {str(exc)[:200]}")


def setup(memory_bytes: int):
    """In a fresh worker: cap its address space; tasks are ``check``'s arguments as a tuple."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return _check_task


def probe(texts: tuple[str, ...]) -> Probed:
    """The SymPy work of one side alone, timed. A text that does not parse is no work (not a limit)."""
    started = time.perf_counter()
    try:
        for text in texts:
            for term in side_terms(text):
                self_work(term)
    except MemoryError:
        return Probed(time.perf_counter() - started, "memory")
    except RecursionError:
        return Probed(time.perf_counter() - started, "recursion")
    except Exception:  # the probe's own splitting failed: no limit of the side is shown
        pass
    return Probed(time.perf_counter() - started)


def _check_task(task: tuple | Probe) -> WorkerResult:
    if isinstance(task, Probe):
        return probe(task.texts)
    return check(*task)
