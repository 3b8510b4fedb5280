"""Cohort verifiers as verl's custom reward function (``compute_score``).

verl configuration (0.9.x: ``reward.custom_reward_function``; older releases: top-level
``custom_reward_function``)::

    reward:
      custom_reward_function:
        path: pkg://cohort.integrations.verl      # or the file path of this module
        name: compute_score
        reward_kwargs:
          endpoints: "math=10.0.0.5:50051,code=10.0.0.7:50052"   # else $COHORT_VERIFIER_ENDPOINTS
          verifier_map: {"openai/gsm8k": "math", "codecontests": "code"}

How verl calls it, as read in verl 0.9.1 (the PyPI wheel; the same calls are in git at commits
10a6180e1d00 ``verl/workers/reward_manager/naive.py``, abddec4c2d33 ``.../batch.py`` and 8af95bc4d7d8
``verl/trainer/ppo/reward.py``):

- ``verl/trainer/ppo/reward.py::get_custom_reward_fn`` wraps the function as
  ``partial(_call_with_kwargs, raw_fn, reward_kwargs)``: the ``reward_kwargs`` of the configuration are
  merged into every call's keyword arguments (they win over call-time keywords).
- Per sample: 0.9.1's trainer scores through the reward loop,
  ``verl/experimental/reward_loop/reward_manager/naive.py`` (``reward.reward_manager.name`` picks from
  that registry: naive, dapo, gdpo, remote, ...), which calls
  ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` once per sample from executor
  threads (so calls are concurrent; they share one client per process here). The legacy
  ``verl/workers/reward_manager/naive.py::NaiveRewardManager.__call__`` makes the same call in a loop.
  ``ground_truth = non_tensor_batch["reward_model"]["ground_truth"]``, the response is decoded with
  ``skip_special_tokens=True``, and ``extra_info`` is the row's dict plus ``num_turns`` and
  ``rollout_reward_scores`` (the reward loop may add ``reward_router_address`` / ``reward_model_tokenizer``
  keywords: ignored here).
- Batched: ``verl/workers/reward_manager/batch.py::BatchRewardManager.verify`` calls
  ``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`` with
  ``data_sources`` a numpy object array, and uses the returned list in order. 0.9.1 still ships it; trainers
  that load ``verl.workers.reward_manager`` (``reward.py`` at 8af95bc4d7d8) select it with
  ``reward_model.reward_manager=batch``.
- Either way a returned ``dict`` must hold ``"score"`` (the reward); every key of it is appended to
  ``reward_extra_info`` (so every row returns the same keys; string values are skipped by the validation
  metrics).

How a row maps to a request (verifiers, their ``weights``, reference, options) and what a failed
verification scores (``unusable``: ``group_mean``, ``constant`` or ``raise``) are written once, in
``docs/integrations.md`` ("verl"). Also ``timeout_s`` (60) and ``retries`` (4) of the client. Clients are cached per process and endpoint
set, handshake on first use (an unreachable verifier raises at the first step), and close at exit or by
:func:`close_clients`.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cohort.integrations._common import endpoints_from_env, parse_code_tests, parse_endpoints
from cohort.verifiers.base import CodeTests, IoCase, Reference, Rollout
from cohort.verifiers.blocking import BlockingClient
from cohort.verifiers.client import WeightedVerifier
from cohort.verifiers.combine import ScoredRollout
from cohort.verifiers.records import Record, Task, VerifierUse

__all__ = ["compute_score", "close_clients", "group_scores", "VerificationUnavailable"]

UnusablePolicy = Literal["group_mean", "constant", "raise"]
_CODE_KEYS = ("asserts", "test_code", "io")


class VerificationUnavailable(RuntimeError):
    """Raised with ``unusable="raise"`` when a row could not be verified."""


@dataclass(frozen=True)
class _Config:
    endpoints: Mapping[str, tuple[str, ...]]
    verifier: tuple[str, ...]
    verifier_map: Mapping[str, tuple[str, ...]]
    weights: Mapping[str, float]
    options: Mapping[str, Mapping[str, str]]
    unusable: UnusablePolicy
    unusable_score: float
    timeout_s: float
    retries: int


def _names(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        names = tuple(value)
        if names and all(isinstance(n, str) and n for n in names):
            return names
    raise ValueError(f"{what}: expected a verifier name or a list of names, got {value!r}")


def _options(value: object, what: str) -> dict[str, dict[str, str]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise ValueError(f"{what}: expected {{verifier: {{option: value}}}}, got {value!r}")
    return {str(name): {str(k): str(v) for k, v in opts.items()} for name, opts in value.items()}


def _config(endpoints: object, verifier: object, verifier_map: object, weights: object, options: object,
            unusable: str, unusable_score: float, timeout_s: float, retries: int) -> _Config:
    eps = endpoints_from_env() if endpoints is None else parse_endpoints(endpoints)  # type: ignore[arg-type]
    if unusable not in ("group_mean", "constant", "raise"):
        raise ValueError(f"unusable={unusable!r}: expected 'group_mean', 'constant' or 'raise'")
    if not isinstance(unusable_score, numbers.Real) or not math.isfinite(unusable_score):
        raise ValueError(f"unusable_score must be a finite number, got {unusable_score!r}")
    vmap = {str(k): _names(v, f"verifier_map[{k!r}]") for k, v in (verifier_map or {}).items()}  # type: ignore[union-attr]
    default = () if verifier is None else _names(verifier, "verifier")
    w = {str(k): float(v) for k, v in (weights or {}).items()}  # type: ignore[union-attr]
    opts = _options(options, "options")
    for where, names in [("verifier", default), *((f"verifier_map[{k!r}]", v) for k, v in vmap.items()),
                         ("weights", tuple(w)), ("options", tuple(opts))]:
        unknown = sorted(set(names) - set(eps))
        if unknown:
            raise ValueError(f"{where} names verifiers without an endpoint: {unknown} (endpoints for {sorted(eps)})")
    return _Config(eps, default, vmap, w, opts, unusable, float(unusable_score), float(timeout_s), int(retries))  # type: ignore[arg-type]


# ---- one client per process and configuration ------------------------------------------------

_CLIENTS: dict[tuple, BlockingClient] = {}
_LOCK = threading.Lock()


def _scorer(cfg: _Config) -> BlockingClient:
    key = (os.getpid(), tuple(sorted(cfg.endpoints.items())), cfg.timeout_s, cfg.retries)
    with _LOCK:
        for stale in [k for k in _CLIENTS if k[0] != os.getpid()]:  # inherited through fork: unusable here
            del _CLIENTS[stale]
        scorer = _CLIENTS.get(key)
        if scorer is None or scorer.closed:
            verifiers = [WeightedVerifier(name, 1.0, eps) for name, eps in cfg.endpoints.items()]
            scorer = BlockingClient(verifiers, timeout_s=cfg.timeout_s, retries=cfg.retries)
            try:
                scorer.handshake()
            except BaseException:
                scorer.close()
                raise
            _CLIENTS[key] = scorer
        return scorer


def close_clients() -> None:
    """Close every cached client of this process (they also close at interpreter exit)."""
    with _LOCK:
        scorers = [s for k, s in _CLIENTS.items() if k[0] == os.getpid()]
        _CLIENTS.clear()
    for s in scorers:
        s.close()


# ---- rows -------------------------------------------------------------------------------------


def _io_tests(obj: Mapping[str, Any]) -> CodeTests:
    if obj.get("fn_name"):
        raise ValueError("call-based code tests (fn_name) are not supported: give asserts or test_code + entry_point")
    inputs, outputs = obj.get("inputs"), obj.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise ValueError("code tests with inputs/outputs need two lists of the same, non-zero length")
    return CodeTests("io", io_cases=tuple(IoCase(str(i), str(o)) for i, o in zip(inputs, outputs)))


def _code_tests(value: object) -> CodeTests | None:
    """Code tests if ``value`` is (the JSON of) a code-tests mapping, else None."""
    obj = value
    if isinstance(value, str):
        if not value.lstrip().startswith("{"):
            return None
        try:
            obj = json.loads(value)
        except json.JSONDecodeError:
            return None  # an answer that happens to start with "{"
    if not isinstance(obj, Mapping):
        return None
    if "inputs" in obj and "outputs" in obj:
        return _io_tests(obj)
    if any(k in obj for k in _CODE_KEYS):
        return parse_code_tests(obj)
    if isinstance(value, Mapping):
        raise ValueError(f"ground_truth mapping is not code tests (keys {sorted(obj)}): expected one of "
                         f"{list(_CODE_KEYS)} or inputs + outputs")
    return None


def _reference(ground_truth: object, extra_info: Mapping[str, Any]) -> Reference:
    if extra_info.get("code_tests") is not None:
        tests = _code_tests(extra_info["code_tests"])
        if tests is None:
            raise ValueError("extra_info['code_tests'] is not code tests (a mapping or its JSON)")
        return Reference(code_tests=tests)
    tests = _code_tests(ground_truth)
    if tests is not None:
        return Reference(code_tests=tests)
    if isinstance(ground_truth, str):
        return Reference(answer=ground_truth)
    if isinstance(ground_truth, numbers.Number) and not isinstance(ground_truth, bool):
        return Reference(answer=str(ground_truth.item() if hasattr(ground_truth, "item") else ground_truth))
    raise ValueError(f"ground_truth {ground_truth!r} ({type(ground_truth).__name__}): expected an answer string or "
                     "number, or code tests (a mapping or its JSON)")


@dataclass(frozen=True)
class _Row:
    reference: Reference
    options: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    group_key: tuple


def _row(cfg: _Config, data_source: object, ground_truth: object, extra_info: object) -> _Row:
    if extra_info is None:
        extra_info = {}
    if not isinstance(extra_info, Mapping):
        raise ValueError(f"extra_info must be a mapping or None, got {type(extra_info).__name__}")
    source = str(data_source)
    if extra_info.get("cohort_verifier") is not None:
        names = _names(extra_info["cohort_verifier"], "extra_info['cohort_verifier']")
    elif source in cfg.verifier_map:
        names = cfg.verifier_map[source]
    elif source in cfg.endpoints:
        names = (source,)
    elif cfg.verifier:
        names = cfg.verifier
    else:
        raise ValueError(f"no Cohort verifier for data_source {source!r}: set extra_info['cohort_verifier'], "
                         f"reward_kwargs verifier_map={{{source!r}: NAME}} or verifier=NAME "
                         f"(verifiers with endpoints: {sorted(cfg.endpoints)})")
    missing = sorted(set(names) - set(cfg.endpoints))
    if missing:
        raise ValueError(f"data_source {source!r} asks for verifiers without an endpoint: {missing} "
                         f"(endpoints for {sorted(cfg.endpoints)})")
    reference = _reference(ground_truth, extra_info)
    row_options = _options(extra_info.get("cohort_options"), "extra_info['cohort_options']")
    options = tuple((n, tuple(sorted({**cfg.options.get(n, {}), **row_options.get(n, {})}.items()))) for n in names)
    index = extra_info.get("index")
    return _Row(reference, options, (source, names, reference, options, None if index is None else str(index)))


def _score_rows(cfg: _Config, rows: list[_Row], solutions: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.group_key, []).append(i)
    records = []  # one per group: the row's verifiers with their weights and merged options
    for g, members in enumerate(groups.values()):
        row = rows[members[0]]
        uses = tuple(VerifierUse(name, cfg.weights.get(name, 1.0), dict(opts)) for name, opts in row.options)
        records.append(Record(Task(f"verl-{g}", "", row.reference, verifiers=uses),
                              tuple(Rollout(i, str(solutions[i])) for i in members)))
    out: list[dict[str, Any]] = [{}] * len(rows)
    for members, scored in zip(groups.values(), _scorer(cfg).score(records)):
        for pos, result in zip(members, group_scores(scored, cfg.unusable, cfg.unusable_score)):
            out[pos] = result
    return out


def group_scores(scored: Sequence[ScoredRollout], unusable: UnusablePolicy = "group_mean",
                 unusable_score: float = 0.0) -> list[dict[str, Any]]:
    """verl's dicts for the rollouts of one group: the reward where usable, else the documented fill.

    >>> from cohort.verifiers.base import RolloutStatus as S
    >>> rows = group_scores([ScoredRollout(0, 1.0, S.OK, {}), ScoredRollout(1, 0.0, S.OK, {}),
    ...                      ScoredRollout(2, 0.0, S.DEPENDENCY_UNAVAILABLE, {})])
    >>> [r["score"] for r in rows], [r["cohort_status"] for r in rows]
    ([1.0, 0.0, 0.5], ['ok', 'ok', 'dependency_unavailable'])
    """
    usable = [s.reward for s in scored if s.usable]
    if len(usable) < len(scored) and unusable == "raise":
        bad = next(s for s in scored if not s.usable)
        raise VerificationUnavailable(f"rollout {bad.index}: {bad.status.value}: {bad.detail}")
    fill = math.fsum(usable) / len(usable) if usable and unusable == "group_mean" else unusable_score
    return [{"score": s.reward if s.usable else fill, "cohort_status": s.status.value,
             "cohort_usable": 1.0 if s.usable else 0.0} for s in scored]


def compute_score(data_source: Any = None, solution_str: str | None = None, ground_truth: Any = None,
                  extra_info: Mapping[str, Any] | None = None, *, data_sources: Sequence[Any] | None = None,
                  solution_strs: Sequence[str] | None = None, ground_truths: Sequence[Any] | None = None,
                  extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
                  endpoints: str | Mapping[str, Any] | None = None, verifier: str | Sequence[str] | None = None,
                  verifier_map: Mapping[str, Any] | None = None, weights: Mapping[str, float] | None = None,
                  options: Mapping[str, Mapping[str, Any]] | None = None, unusable: UnusablePolicy = "group_mean",
                  unusable_score: float = 0.0, timeout_s: float = 60.0, retries: int = 4,
                  **ignored: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """verl's ``compute_score``: one row (``data_source``, ``solution_str``, ...) gives one dict, the
    batched form (``data_sources``, ``solution_strs``, ...) a list of dicts, each
    ``{"score", "cohort_status", "cohort_usable"}``. See the module docstring for the mapping and for
    the score of a failed verification. Other keywords verl passes are ignored."""
    cfg = _config(endpoints, verifier, verifier_map, weights, options, unusable, unusable_score, timeout_s, retries)
    if solution_strs is not None:
        if solution_str is not None or data_source is not None:
            raise TypeError("compute_score: give the per-sample arguments or the batched ones (solution_strs=...), not both")
        n = len(solution_strs)
        if data_sources is None or ground_truths is None:
            raise TypeError("compute_score: the batched form needs data_sources, solution_strs and ground_truths")
        infos = [None] * n if extra_infos is None else list(extra_infos)
        if not (len(data_sources) == len(ground_truths) == len(infos) == n):
            raise ValueError(f"compute_score: {len(data_sources)} data_sources, {n} solution_strs, "
                             f"{len(ground_truths)} ground_truths, {len(infos)} extra_infos: lengths differ")
        if n == 0:
            return []
        rows = [_row(cfg, ds, gt, info) for ds, gt, info in zip(data_sources, ground_truths, infos)]
        return _score_rows(cfg, rows, list(solution_strs))
    if solution_str is None or data_source is None:
        raise TypeError("compute_score: needs data_source, solution_str and ground_truth (or the batched form)")
    return _score_rows(cfg, [_row(cfg, data_source, ground_truth, extra_info)], [solution_str])[0]
