"""The math verifier's SymPy workers: a :class:`~verifiers.hosting.workers.WorkerPool` of checks.

Each worker runs checks on its main thread under an address-space cap (``RLIMIT_AS``, set in
:func:`verifiers.math._worker.setup`); a check still running at its deadline is killed with its
worker and a fresh one starts in the background. Workers come from ``forkserver`` with the SymPy
modules preloaded (a replacement is ready in milliseconds), or ``spawn``. A check whose worker died
under it (killed, OOM) is retried on another worker, up to three tries in all.
"""

from __future__ import annotations

import os

from cohort.verifiers.math._worker import setup
from cohort.verifiers.hosting.workers import WorkerPool

__all__ = ["math_pool", "default_pool_size"]


def math_pool(size: int, memory_mb: int = 1536, start_method: str | None = None) -> WorkerPool:
    return WorkerPool(setup, (memory_mb * 1024 * 1024,), size, start_method=start_method,
                      preload=["cohort.verifiers.math._worker"], name="math-verify-worker", attempts=3)


def default_pool_size() -> int:
    """Workers when the options name none: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))
