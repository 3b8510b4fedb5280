"""Worker process body: (gold, answers[, policy, forms]) checks, answered with a typed result
(:data:`verifiers.math.outcome.WorkerResult`). Main thread only."""

from __future__ import annotations

import resource

from cohort.verifiers.math.compare import DEFAULT_POLICY, OverLimits, Policy, compare
from cohort.verifiers.math.outcome import BadReference, CheckFailed, Compared, TooLarge, WorkerResult
from cohort.verifiers.math.symbolic import GoldUnparseable, sympy_leaf_equal


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
        return CheckFailed("memory cap reached")
    except RecursionError:
        return TooLarge("answer", "too deeply nested for SymPy")
    except Exception as exc:  # SymPy internals raise anything; reported as a verifier error, never INCORRECT
        return CheckFailed(f"{type(exc).__name__}: {str(exc)[:200]}")


def setup(memory_bytes: int):
    """In a fresh worker: cap its address space; tasks are ``check``'s arguments as a tuple."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return _check_task


def _check_task(task: tuple) -> WorkerResult:
    return check(*task)
