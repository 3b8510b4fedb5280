"""What a comparison answers, and how it says it cannot: the types every comparison module shares.

- :class:`Outcome`: equal or not, and why (the ``how`` text ends up in the rollout's detail).
- :data:`Leaf`: decides one leaf the structure code cannot (the SymPy leaf in a worker process; in the
  parent, :func:`cheap_leaf`, which raises :class:`NeedSympy`).
- :data:`ItemEqual`: compares two items, recursing into their structure (``compare.leaf_equal`` with
  its leaf bound); the modules of each kind of answer take it as an argument, so none imports the
  dispatcher.
- :data:`WorkerResult`: what a worker process sends back for one check (:mod:`verifiers.math._worker`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Side = Literal["gold", "answer"]


@dataclass(frozen=True)
class Outcome:
    equal: bool
    how: str


Leaf = Callable[[str, str], Outcome]
ItemEqual = Callable[[str, str], Outcome]

MAX_INPUT_CHARS = 2_000
MAX_PARTS = 32


class NeedSympy(Exception):
    """The cheap pass cannot decide this leaf."""


class OverLimits(Exception):
    def __init__(self, side: str, why: str):
        super().__init__(f"{side} {why}")
        self.side = side
        self.why = why


def cheap_leaf(gold: str, answer: str) -> Outcome:
    raise NeedSympy


# ------------------------------------------------------------------------------ worker results


@dataclass(frozen=True)
class Compared:
    """The comparison ran: ``equal`` with its reason."""

    equal: bool
    how: str


@dataclass(frozen=True)
class BadReference:
    """The gold answer cannot be parsed or is beyond the caps: INVALID_REFERENCE."""

    why: str


@dataclass(frozen=True)
class TooLarge:
    """The answer (``side``) is beyond the input caps: scored INCORRECT and flagged."""

    side: Side
    why: str


@dataclass(frozen=True)
class CheckFailed:
    """SymPy failed internally, the memory cap was reached or the recursion ran too deep. Whose doing that
    is, the parent decides by probing each side alone (:class:`Probe`); unattributed, it is VERIFIER_ERROR,
    never INCORRECT."""

    why: str
    cause: Literal["error", "memory", "recursion"] = "error"


@dataclass(frozen=True)
class Probe:
    """A worker task: the SymPy work of one side alone (the gold, or the answer's parts), to say who caused
    a comparison that ran out of time or memory (``verifiers.math.symbolic.self_work``)."""

    texts: tuple[str, ...]


@dataclass(frozen=True)
class Probed:
    """The answer to a :class:`Probe`: the worker's own seconds on it, and the limit it hit (None: none)."""

    seconds: float
    limit: Literal["memory", "recursion"] | None = None


WorkerResult = Compared | BadReference | TooLarge | CheckFailed | Probed
