"""Domain types of the verifier contract, free of gRPC.

Verifier logic (built-ins and plugins) only ever sees these plain dataclasses;
``verifiers.convert`` maps them to and from ``grpo.verifier.v1`` messages.

A plugin implements :class:`Verifier`::

    class ExactMatch(VerifierBase):
        name = "exact"
        version = "1.0.0"
        description = "reward 1 when the completion equals the gold answer"
        reference_kinds = ("answer",)

        def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
            gold = group.reference.answer
            return [RolloutResult.ok(r.index, float(r.completion.strip() == gold)) for r in group.rollouts]

and registers a factory (the class, or any callable returning an instance) under the entry-point
group ``cohort.verifiers``. :class:`VerifierBase` gives the optional members their defaults; a factory
with server-side settings declares them as a validated model (:mod:`verifiers.options`).

Over 400 lines on purpose: every domain type of the contract in one module, so that plugins import
one place.
"""

from __future__ import annotations

import enum
import logging
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from cachetools import LRUCache

from cohort.verifiers.options import NoOptions


class RolloutStatus(enum.Enum):
    """Is this a usable verdict? Only OK enters the learner's statistics."""

    # Members are singletons compared by identity, so identity hashing is consistent; Enum's own
    # __hash__ is Python code, and every result is looked up in a dict or two on each side of the wire.
    __hash__ = object.__hash__

    OK = "ok"
    INVALID_REFERENCE = "invalid_reference"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_ERROR = "verifier_error"
    DEPENDENCY_UNAVAILABLE = "dependency_unavailable"


class Verdict(enum.Enum):
    __hash__ = object.__hash__  # see RolloutStatus
    UNSPECIFIED = "unspecified"
    CORRECT = "correct"
    INCORRECT = "incorrect"
    NO_ANSWER = "no_answer"
    PARTIAL = "partial"
    RESOURCE_LIMIT_EXCEEDED = "resource_limit_exceeded"
    RUNTIME_ERROR = "runtime_error"


# The per-rollout types below are slotted but not frozen: a frozen dataclass costs about 6x more to
# build (2.3 us vs 0.36 us each, measured here), and one batch builds thousands of them on each side of
# the wire. Treat them as immutable all the same: a verifier never changes what it was given.


@dataclass(slots=True)
class Rollout:
    index: int
    completion: str
    truncated: bool = False


@dataclass(frozen=True)
class IoCase:
    stdin: str
    expected_stdout: str


@dataclass(frozen=True)
class CodeTests:
    """Unit tests for a code answer; ``kind`` says which fields are used.

    - ``asserts``: MBPP-style ``asserts`` (+ optional ``setup_code``)
    - ``function``: HumanEval-style ``test_code`` defining ``check(candidate)`` and ``entry_point``
    - ``io``: stdin/stdout ``io_cases`` compared ``exact`` or ``whitespace``-normalised
    """

    kind: Literal["asserts", "function", "io"]
    asserts: tuple[str, ...] = ()
    setup_code: str = ""
    test_code: str = ""
    entry_point: str = ""
    io_cases: tuple[IoCase, ...] = ()
    comparison: Literal["exact", "whitespace"] = "whitespace"


@dataclass(frozen=True)
class Reference:
    """Ground truth: a gold ``answer`` string, or ``code_tests``; at most one is set."""

    answer: str | None = None
    code_tests: CodeTests | None = None

    @property
    def kind(self) -> Literal["answer", "code_tests", "none"]:
        if self.code_tests is not None:
            return "code_tests"
        return "answer" if self.answer is not None else "none"


@dataclass(slots=True)
class GroupRequest:
    """One group: G rollouts of one prompt, scored by one verifier."""

    verifier: str
    rollouts: tuple[Rollout, ...]
    reference: Reference = field(default_factory=Reference)
    group_id: str = ""
    prompt: str = ""
    rollout_timeout_s: float | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class StepReward:
    """The reward of one step of a completion (process supervision, DeepSeekMath 4.1.3).

    ``end``: where the step ends, an exclusive offset into the completion in code points (a ``str``
    index); a step begins where the previous one ended (the first at 0).
    """

    end: int
    reward: float


@dataclass(slots=True)
class RolloutResult:
    index: int
    status: RolloutStatus
    verdict: Verdict = Verdict.UNSPECIFIED
    reward: float = 0.0
    components: Mapping[str, float] = field(default_factory=dict)
    detail: str = ""
    duration_s: float = 0.0
    flags: tuple[str, ...] = ()
    steps: tuple[StepReward, ...] = ()
    """Optional step rewards (only with status OK): ends strictly increasing within the completion."""

    @property
    def usable(self) -> bool:
        return self.status is RolloutStatus.OK

    @classmethod
    def ok(
        cls,
        index: int,
        reward: float,
        verdict: Verdict | None = None,
        components: Mapping[str, float] | None = None,
        detail: str = "",
        flags: Sequence[str] = (),
        steps: Sequence[StepReward] = (),
    ) -> RolloutResult:
        """A real verdict. The default verdict is CORRECT for reward >= 1, INCORRECT for 0, else PARTIAL."""
        if verdict is None:
            verdict = Verdict.CORRECT if reward >= 1.0 else Verdict.INCORRECT if reward <= 0.0 else Verdict.PARTIAL
        return cls(index, RolloutStatus.OK, verdict, float(reward), dict(components or {}), detail, 0.0, tuple(flags),
                   tuple(steps))

    @classmethod
    def unusable(cls, index: int, status: RolloutStatus, detail: str) -> RolloutResult:
        """A rollout the verifier could not judge: masked by the learner, never a reward of 0."""
        if status is RolloutStatus.OK:
            raise ValueError("unusable() needs a non-OK status")
        return cls(index, status, Verdict.UNSPECIFIED, 0.0, {}, detail)


CANDIDATE_LIMIT = "candidate_limit"
"""The flag of a rollout whose *own* output hit a limit (an answer over the caps, SymPy time spent on the
answer's own expression, a step beyond the bounds). Such a rollout is scored OK (reward 0 for the part
that hit the limit), never masked: a mask removes the negative gradient, so a policy able to trigger one
would learn to. One name across verifiers, so the trainer can count them (docs/integrity-verifiers.md)."""


@dataclass(slots=True)
class GroupResult:
    group_id: str
    verifier: str
    verifier_version: str
    results: tuple[RolloutResult, ...]
    duration_s: float = 0.0
    """Wall time of the whole group; a result without its own duration reports its share of it."""


@dataclass(frozen=True)
class VerifyContext:
    """What a verifier may know about the call: its deadline (``time.monotonic()`` seconds)."""

    deadline: float | None = None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0


@runtime_checkable
class Verifier(Protocol):
    """What every verifier implements. Pure: the same input gives the same results.

    ``verify_group`` returns exactly one :class:`RolloutResult` per rollout, with the rollout's
    index; it may run in any thread and must not raise for a bad rollout (return an in-band
    status instead). Raise :class:`InvalidRequest` for a request that can never be scored
    (a missing reference of the wrong kind, a bad option): the server maps it to
    INVALID_ARGUMENT.
    """

    name: str
    version: str
    description: str
    reference_kinds: tuple[str, ...]

    max_concurrency: int | None
    """1 tells the server that threads cannot speed this verifier up (pure Python, no waiting: ``cohort serve
    --scoring-procs`` scores it in processes); None (the default) when the work waits on processes or the network."""
    options: Any
    """The options it was made with (an instance of its factory's ``Options`` model, :mod:`verifiers.options`),
    or None: the server's scoring processes make their own copy of the verifier from them."""

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> Sequence[RolloutResult]: ...

    def ready(self) -> bool:
        """Whether a call can be answered now (the server reports SERVING only then)."""
        ...

    def close(self) -> None:
        """Release worker pools and clients when the server stops."""
        ...


class VerifierBase:
    """The defaults of :class:`Verifier`'s optional members: subclass it and set the four class attributes and
    ``verify_group``. The registry refuses a plugin that has neither these members nor this base.

    ``Options`` is the verifier's options model (:mod:`verifiers.options`; none by default): the registry calls
    the class with an instance of it, validated, so a subclass that takes settings overrides both ``Options``
    and ``__init__(self, options)``."""

    max_concurrency: int | None = None
    Options: type = NoOptions
    options: Any = None

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


def step_problem(steps: Sequence[StepReward], completion: str) -> str | None:
    """Why ``steps`` are not well formed for ``completion`` (None when they are).

    The contract: ends strictly increasing, each within ``1..len(completion)``, rewards finite.

    >>> step_problem([StepReward(3, 1.0), StepReward(5, 0.0)], "2+2=4")
    >>> step_problem([StepReward(3, 1.0), StepReward(3, 0.0)], "2+2=4")
    'step 1 ends at 3, not after the previous end 3'
    """
    previous = 0
    n = len(completion)
    for j, s in enumerate(steps):
        if not previous < s.end <= n:
            if s.end > n:
                return f"step {j} ends at {s.end}, past the completion's {n} characters"
            return f"step {j} ends at {s.end}, not after the previous end {previous}"
        if not math.isfinite(s.reward):
            return f"step {j} has reward {s.reward}"
        previous = s.end
    return None


def checked_steps(group: GroupRequest, results: Sequence[RolloutResult], source: str) -> list[RolloutResult]:
    """Step rewards as the contract has them: malformed ones make the rollout VERIFIER_ERROR (a bug of ``source``,
    the verifier or the server that sent them, never a reward); the steps of a result that is not OK are dropped
    (they mean nothing there). The verifier host checks what its verifiers return, the client what servers send."""
    out = []
    for rollout, r in zip(group.rollouts, results):
        if r.steps and r.status is not RolloutStatus.OK:
            r = replace(r, steps=())
        elif r.steps and (problem := step_problem(r.steps, rollout.completion)) is not None:
            logging.getLogger("cohort.verifiers").error("verifier %s (%s), group %r rollout %d: malformed step rewards: "
                                                         "%s", group.verifier, source, group.group_id, r.index, problem)
            r = RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR, f"{source} sent malformed step rewards: {problem}")
        out.append(r)
    return out


class InvalidRequest(ValueError):
    """A request a verifier can never score (maps to INVALID_ARGUMENT)."""


def option(group: GroupRequest, key: str, default: str, choices: Sequence[str] | None = None) -> str:
    """Read a string option, rejecting values outside ``choices`` with a clear message."""
    value = group.options.get(key, default)
    if choices is not None and value not in choices:
        raise InvalidRequest(f"option {key}={value!r} for verifier {group.verifier!r}: expected one of {list(choices)}")
    return value


def float_option(group: GroupRequest, key: str, default: float) -> float:
    raw = group.options.get(key)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise InvalidRequest(f"option {key}={raw!r} for verifier {group.verifier!r}: expected a number") from None


class LRU:
    """A verdict cache for a verifier's threads: the ``capacity`` most recently used entries
    (``cachetools.LRUCache`` under one lock; 0 keeps nothing). ``hits`` counts the lookups it answered."""

    def __init__(self, capacity: int) -> None:
        self._data: LRUCache | None = LRUCache(capacity) if capacity > 0 else None
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: Any) -> Any | None:
        if self._data is None:
            return None
        with self._lock:
            value = self._data.get(key)
            self.hits += value is not None
            return value

    def put(self, key: Any, value: Any) -> None:
        if self._data is not None:
            with self._lock:
                self._data[key] = value


# ---- text from a model or a program stays text ------------------------------------------------
# The one encoder of untrusted text (tool output, a completion a judge reads): the trainer's tool
# rollouts and the local judge both use it. It lives here because both may import this module
# (tests/test_import_layers.py) and it needs nothing but the tokenizer it is given.


def control_tokens(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's control tokens, text -> id: its special tokens and every other added token (a
    template's ``<tool_call>``, ``<think>``), which a tokenizer matches in text whatever it holds."""
    found = {getattr(t, "content", str(t)): i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    for text, i in zip(getattr(tokenizer, "all_special_tokens", ()), getattr(tokenizer, "all_special_ids", ())):
        found.setdefault(text, i)
    return found


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` read as plain text: never a control token (:func:`control_tokens`), whatever
    the text holds. A program that prints ``<|im_end|>`` gets the ids of those characters, not the id that
    ends a turn; decoding the ids gives ``text`` back.

    Special tokens are split by the tokenizer (``split_special_tokens``); an added token that is not
    special (which tokenizers match regardless) is encoded in pieces, one character at a time."""
    control = control_tokens(tokenizer)
    if not any(t and t in text for t in control):
        return _plain(tokenizer, text)
    pattern = re.compile("|".join(re.escape(t) for t in sorted(control, key=len, reverse=True) if t))
    out, at = [], 0
    for m in pattern.finditer(text):
        out += _plain(tokenizer, text[at : m.start()])
        for ch in m.group():
            out += _plain(tokenizer, ch)
        at = m.end()
    return out + _plain(tokenizer, text[at:])


def encode_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a chat whose contents are untrusted text: the chat template applied to placeholders
    gives the turns' own control tokens, each content goes in as :func:`encode_text`. A content holding
    ``<|im_start|>system`` cannot open a turn (rendering the chat as text and re-encoding it would)."""
    marks = [f"\x1d{k}\x1d" for k in range(len(messages))]
    frame = tokenizer.apply_chat_template([{**m, "content": mark} for m, mark in zip(messages, marks)],
                                          tokenize=False, add_generation_prompt=add_generation_prompt)
    ids, at = [], 0
    for mark, content in zip(marks, (m["content"] for m in messages)):
        k = frame.find(mark, at)
        if k < 0:  # a template that leaves a turn out (some drop the system turn)
            continue
        ids += tokenizer(frame[at:k], add_special_tokens=False)["input_ids"] if k > at else []
        ids += encode_text(tokenizer, content)
        at = k + len(mark)
    return ids + (tokenizer(frame[at:], add_special_tokens=False)["input_ids"] if at < len(frame) else [])


def _plain(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
