"""Cohort verifiers as a TRL ``GRPOTrainer`` reward function.

>>> reward = CohortReward({"arith": ["127.0.0.1:50051"]}, reference_column="answer")  # doctest: +SKIP
>>> trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=ds, args=cfg)  # doctest: +SKIP
>>> trainer.train(); reward.close()                                                   # doctest: +SKIP

What TRL 1.16.0 gives a reward function, read in ``trl/trainer/grpo_trainer.py``
(``GRPOTrainer._calculate_rewards``, ``_log_metric``, ``_log_completion_extra``, ``_generate_and_score_completions``)
and ``trl/trainer/utils.py`` (``get_callable_name``, ``is_async_callable``):

1. It is called as ``f(prompts=..., completions=..., completion_ids=..., **reward_kwargs)``, where
   ``reward_kwargs`` holds every dataset column except ``prompt`` / ``completion`` / ``completion_ids``
   (one value per completion: the row repeated G times), plus ``trainer_state``, ``log_extra`` and
   ``log_metric`` (and ``environments`` with environments). The reference therefore comes from a
   dataset column (``reference_column``, default ``answer``).
2. A ``None`` in the returned list is turned into NaN; a completion for which every reward function
   returned ``None`` is *unscorable*: it is left out of the group's (nan-aware) mean and std and its
   advantage is forced to 0, and it is left out of the logged ``reward``. This is the masking Cohort
   asks for (STYLE P10), so a rollout whose status is not OK is returned as ``None``, never 0. Only
   *every* function returning ``None`` masks: with several reward functions TRL ``nansum``s the others,
   so combine verifiers inside one ``CohortReward`` (``WeightedVerifier`` weights), not as separate functions.
3. The name in the logs (``rewards/<name>/mean``) is ``getattr(func, "__name__", type(func).__name__)``;
   this object sets ``__name__`` (default ``cohort``).
4. ``log_metric(name, value)`` appends a scalar that TRL averages over the logging step (and over
   processes) and logs next to ``kl`` and ``reward``; ``log_extra(column, values)`` adds a column (one value
   per sample) to the completions table. Both are used when present: per call, ``<name>/status/<status>``
   (count of rollouts with that status; every status, 0 included), ``<name>/unusable_frac``, and
   ``<name>/<component>/mean`` over the usable rollouts; the column ``<name>_status``.
5. A reward function whose ``__call__`` is a coroutine is awaited on TRL's own loop; this one is
   synchronous on purpose, so it works the same outside TRL: the async client runs on a private event loop
   thread (:class:`~cohort.verifiers.blocking.BlockingClient`), stopped by :meth:`CohortReward.close` (or a
   ``with`` block, or at interpreter exit).

Per-row verifier options (a Cohort data row's ``options``, such as the ``steps`` verifier's ``solution``) come
from the dataset column ``options_column`` when one is named: one ``{verifier: {key: value}}`` per row, over the
``WeightedVerifier`` options (``None`` or a verifier left out: the configured ones).

Grouping: the completions of one prompt (same prompt, reference and options) form one group of the
``BatchVerifyGroups`` call, whatever their order; each rollout's index is its position in TRL's batch.
Completions may be strings or conversations (lists of ``{"role", "content"}`` messages, as TRL passes
for conversational datasets): the text scored is the content of the last assistant message.
``completion_ids`` are not used, so a completion is never marked truncated (verifier options that
depend on it, like ``arith``'s ``require_eos``, see every completion as finished).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cohort.integrations._common import endpoints_from_env, parse_code_tests, parse_endpoints
from cohort.verifiers.base import Reference, Rollout, RolloutStatus
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier
from cohort.verifiers.combine import ScoredRollout
from cohort.verifiers.records import Record, Task

__all__ = ["CohortReward", "completion_text"]

VerifierSpec = Sequence[WeightedVerifier] | Mapping[str, str | Sequence[str]] | str


def _content_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # multimodal parts: [{"type": "text", "text": "..."}, ...]
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif not isinstance(part, Mapping):
                raise TypeError(f"{where}: a content part must be a mapping, got {type(part).__name__}")
        return "".join(parts)
    raise TypeError(f"{where}: message content must be a string or a list of parts, got {type(content).__name__}")


def completion_text(completion: object) -> str:
    """The text to score: a plain string as is; a conversation's last assistant message content.

    >>> completion_text("42")
    '42'
    >>> completion_text([{"role": "assistant", "content": "42"}])
    '42'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and all(isinstance(m, Mapping) for m in completion):
        replies = [m for m in completion if m.get("role") == "assistant"]
        if not replies:
            roles = [m.get("role") for m in completion]
            raise ValueError(f"conversational completion has no assistant message (roles {roles})")
        return _content_text(replies[-1].get("content"), "completion")
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


def _prompt_text(prompt: object) -> str:
    """What the verifier sees as the prompt: the string, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and all(isinstance(m, Mapping) for m in prompt):
        users = [m for m in prompt if m.get("role") == "user"]
        return _content_text(users[-1].get("content"), "prompt") if users else ""
    raise TypeError(f"a prompt must be a string or a list of messages, got {type(prompt).__name__}")


def _verifiers(spec: VerifierSpec | None) -> list[WeightedVerifier]:
    if spec is None:
        return [WeightedVerifier(name, 1.0, eps) for name, eps in endpoints_from_env().items()]
    if isinstance(spec, (str, Mapping)):
        return [WeightedVerifier(name, 1.0, eps) for name, eps in parse_endpoints(spec).items()]
    spec = list(spec)
    if not spec or not all(isinstance(v, WeightedVerifier) for v in spec):
        raise TypeError("verifiers: expected WeightedVerifier objects, 'NAME=HOST:PORT,...' or {name: [addresses]}")
    return spec


class CohortReward:
    """A TRL reward function scoring with Cohort verifier services (see the module docstring).

    ``verifiers``: ``WeightedVerifier`` objects (weights and options), ``{name: [addresses]}``,
    ``"name=host:port,..."``, or ``None`` for the environment variable ``COHORT_VERIFIER_ENDPOINTS``.
    The reward is the weighted sum over the verifiers; a completion is ``None`` unless every verifier
    could judge it. ``reference_column`` names the dataset column holding the gold answer;
    ``code_tests_column`` (instead) the one holding code tests; ``options_column`` (optional) the one holding
    each row's verifier options. ``handshake=True`` checks at construction
    that every verifier is served somewhere (fails fast instead of at the first step).
    """

    def __init__(self, verifiers: VerifierSpec | None = None, *, reference_column: str | None = "answer",
                 code_tests_column: str | None = None, options_column: str | None = None, name: str = "cohort",
                 timeout_s: float = 60.0, retries: int = 4, handshake: bool = True) -> None:
        if (reference_column is None) == (code_tests_column is None):
            raise ValueError("give exactly one of reference_column and code_tests_column")
        if not name or not name.isidentifier():
            raise ValueError(f"name must be an identifier (it names TRL's log keys), got {name!r}")
        self.__name__ = name
        self.reference_column = reference_column
        self.code_tests_column = code_tests_column
        self.options_column = options_column
        self.status_counts: Counter[str] = Counter()
        """Statuses of every rollout scored so far, by value (``ok``, ``dependency_unavailable``, ...)."""
        self._scorer = BlockingClient(_verifiers(verifiers), timeout_s=timeout_s, retries=retries)
        if handshake:
            try:
                self.versions = self._scorer.handshake()
            except BaseException:
                self._scorer.close()
                raise

    # ---- the reward function ------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any] | None = None,
                 *, log_metric: Callable[[str, float], None] | None = None,
                 log_extra: Callable[[str, list], None] | None = None, trainer_state: Any = None,
                 **columns: Sequence[Any]) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        references = self._references(columns, len(completions))
        texts = [completion_text(c) for c in completions]
        step = getattr(trainer_state, "global_step", None)
        options = self._options(columns, len(completions))
        rows = self._group(prompts, texts, references, options, prefix="" if step is None else f"s{step}-")
        scored: list[ScoredRollout | None] = [None] * len(completions)
        for result in self._scorer.score(rows):
            for s in result:
                scored[s.index] = s
        assert all(s is not None for s in scored)
        rewards = [s.reward if s.usable else None for s in scored]  # type: ignore[union-attr]
        self._log(scored, log_metric, log_extra)  # type: ignore[arg-type]
        return rewards

    def _references(self, columns: Mapping[str, Sequence[Any]], n: int) -> list[Reference]:
        column = self.code_tests_column or self.reference_column
        assert column is not None
        if column not in columns:
            raise KeyError(f"{self.__name__}: the batch has no dataset column {column!r} to take the reference from "
                           f"(columns: {sorted(columns)}); set reference_column= or code_tests_column=")
        values = columns[column]
        if len(values) != n:
            raise ValueError(f"column {column!r} has {len(values)} values for {n} completions")
        if self.code_tests_column:
            return [Reference(code_tests=parse_code_tests(v)) for v in values]
        return [Reference() if v is None else Reference(answer=str(v)) for v in values]

    def _options(self, columns: Mapping[str, Sequence[Any]], n: int) -> list[dict[str, dict[str, str]]]:
        if self.options_column is None:
            return [{}] * n
        if self.options_column not in columns:
            raise KeyError(f"{self.__name__}: the batch has no dataset column {self.options_column!r} to take verifier "
                           f"options from (columns: {sorted(columns)})")
        values = columns[self.options_column]
        if len(values) != n:
            raise ValueError(f"column {self.options_column!r} has {len(values)} values for {n} completions")
        out = []
        for v in values:
            if v is not None and not (isinstance(v, Mapping) and all(
                    x is None or (isinstance(x, Mapping) and all(isinstance(o, str) for o in x.values()))
                    for x in v.values())):
                raise TypeError(f"column {self.options_column!r}: expected {{verifier: {{option: string}}}} per row, "
                                f"got {v!r:.80}")
            # a dataset's struct column fills absent keys with None: those mean "no options for it"
            out.append({name: {k: o for k, o in opts.items() if o is not None}
                        for name, opts in (v or {}).items() if opts is not None})
        return out

    @staticmethod
    def _group(prompts: Sequence[Any], texts: list[str], references: list[Reference],
               options: list[dict[str, dict[str, str]]], prefix: str) -> list[Record]:
        groups: dict[tuple[str, Reference, str], list[int]] = {}
        for i, (prompt, ref, opts) in enumerate(zip(prompts, references, options)):
            key = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
            groups.setdefault((key, ref, json.dumps(opts, sort_keys=True)), []).append(i)
        return [
            Record(Task(f"{prefix}g{k}", _prompt_text(prompts[members[0]]), ref, options=options[members[0]]),
                   tuple(Rollout(i, texts[i]) for i in members))
            for k, ((_, ref, _), members) in enumerate(groups.items())
        ]

    def _log(self, scored: list[ScoredRollout], log_metric: Callable[[str, float], None] | None,
             log_extra: Callable[[str, list], None] | None) -> None:
        statuses = Counter(s.status.value for s in scored)
        self.status_counts.update(statuses)
        if log_extra is not None:
            log_extra(f"{self.__name__}_status", [s.status.value for s in scored])
        if log_metric is None:
            return
        name = self.__name__
        for status in RolloutStatus:  # every status each call, so the metric keys are the same on every rank
            log_metric(f"{name}/status/{status.value}", float(statuses.get(status.value, 0)))
        log_metric(f"{name}/unusable_frac", 1.0 - statuses.get(RolloutStatus.OK.value, 0) / max(len(scored), 1))
        components: dict[str, list[float]] = {}
        for s in scored:
            if s.usable:
                for key, value in s.components.items():
                    components.setdefault(key, []).append(value)
        for key, values in sorted(components.items()):
            mean = math.fsum(values) / len(values)
            log_metric(f"{name}/{key}/mean", mean)

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channels and stop the client's event loop thread. Idempotent."""
        self._scorer.close()

    @property
    def closed(self) -> bool:
        return self._scorer.closed

    def __enter__(self) -> CohortReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CohortReward(name={self.__name__!r}, verifiers={list(self._scorer.client.verifiers)})"
