"""Worker process body: (gold, answers[, policy, forms]) checks, answered with a tagged tuple. Main thread only."""

from __future__ import annotations

import resource

from cohort.verifiers.math.compare import DEFAULT_POLICY, OverLimits, Policy, compare
from cohort.verifiers.math.symbolic import GoldUnparseable, sympy_leaf_equal


def check(gold: str, answers: tuple[str, ...], policy: Policy = DEFAULT_POLICY, forms: bool = False) -> tuple:
    """('equal', bool, how) | ('invalid_reference', why) | ('over_limits', side, why) | ('error', why)."""
    try:
        outcome = compare(gold, answers, sympy_leaf_equal, policy, forms)
        return ("equal", outcome.equal, outcome.how)
    except GoldUnparseable as exc:
        return ("invalid_reference", f"gold answer does not parse: {exc}"[:300])
    except OverLimits as exc:
        if exc.side == "gold":
            return ("invalid_reference", f"gold answer {exc.why}")
        return ("over_limits", exc.side, exc.why)
    except MemoryError:
        return ("error", "memory cap reached")
    except RecursionError:
        return ("over_limits", "answer", "too deeply nested for SymPy")
    except Exception as exc:  # SymPy internals raise anything; reported as a verifier error, never INCORRECT
        return ("error", f"{type(exc).__name__}: {str(exc)[:200]}")


def setup(memory_bytes: int):
    """In a fresh worker: cap its address space; tasks are ``check``'s arguments as a tuple."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return _check_task


def _check_task(task: tuple) -> tuple:
    return check(*task)
