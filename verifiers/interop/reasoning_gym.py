"""reasoning-gym behind Cohort: its procedural tasks as task rows, its ``score_answer`` as a verifier.

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ (extra ``interop``, pinned there) has
about a hundred task generators (arithmetic, algebra, logic puzzles, games, graphs, ...) with graded
difficulty (a *curriculum* per task) and a scorer per task, ``score_answer(answer, entry)``, that needs
the generated *entry* (question, answer, metadata), not just a gold string.

**Rows** (``python -m cohort.verifiers.interop.reasoning_gym OUT.jsonl --task NAME -n N``, or
:func:`rows`) are the one row schema of ``verifiers/records.py``: the question as the prompt, the gold
answer as ``answer`` (``""`` for tasks whose answers are checked by a rule, e.g. ``rush_hour``), and the
verifier ``reasoning_gym`` with the options that name the item: ``task``, ``config`` (the dataset's
config as JSON, seed and size included), ``index`` and ``digest`` (of the item's question and answer).
Difficulty: ``--difficulty LEVEL`` sets every attribute of the task's curriculum to that level
(reasoning-gym's ``set_global_level``); ``--config JSON`` gives config fields directly.
``--exclude FILE`` skips items whose question is in another rows file (held-out rows never trained on).

**The verifier** regenerates the entry from those options (reasoning-gym's generators are deterministic
in ``seed`` and ``index``), checks it is the row's (digest and answer), pulls the answer out of the
completion (``extract``: ``answer_tag``, reasoning-gym's ``<answer>...</answer>`` convention, default;
``none``: the whole completion, stripped; ``last_number``: the last number in it, thousands commas dropped,
GSM8K's rule, for numeric tasks and chat models that answer in a sentence) and returns their score. Statuses:

- their score (0..1) is OK with that reward (CORRECT at 1, INCORRECT at 0, PARTIAL between); no answer
  is OK, reward 0, NO_ANSWER: a policy's garbage answer is a 0, never a mask;
- their scorer raising on the *policy's* answer (it scores the gold answer fine): OK, reward 0, flag
  ``scorer_raised`` (a mask would reward a policy for breaking their scorer); an answer longer than
  ``MAX_ANSWER_CHARS`` and twice the gold is not scored: OK, reward 0, flag ``candidate_limit``;
- an item that cannot be regenerated (unknown task, a config their ``validate()`` rejects, missing
  options), a regenerated item that is not the row's (another reasoning-gym version, an edited row),
  or their scorer raising on the gold answer: INVALID_REFERENCE (masked);
- their scores run in killable worker processes: an answer their scorer is still on after its budget
  (option ``budget_s``, formerly ``COHORT_RG_BUDGET_S``, while the gold scored within it) is OK, reward 0, flag ``candidate_limit``
  (``polynomial_multiplication`` spends minutes in one big-integer power on ``x**(9**9**9)``); the gold
  itself past the budget, or the call's deadline, is VERIFIER_TIMEOUT; a worker that died, VERIFIER_ERROR;
- a score that is not a number in [0, 1]: VERIFIER_ERROR (masked; their bug).

Over 400 lines on purpose: both halves of reasoning-gym behind Cohort (rows and scorer) share
the task registry and the seed rules.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import resource
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from cohort.verifiers.base import (
    CANDIDATE_LIMIT,
    LRU,
    GroupRequest,
    Rollout,
    RolloutResult,
    RolloutStatus,
    Verdict,
    VerifierBase,
    VerifyContext,
    option,
)
from cohort.verifiers.hosting.workers import PoolResult, WorkerPool
from cohort.verifiers.options import VerifierOptions

NAME = "reasoning_gym"
SCORER_RAISED = "scorer_raised"
"""The flag of a rollout whose answer made their scorer raise (scored 0, not masked)."""
MAX_ANSWER_CHARS = 4096
"""Extracted answers longer than this and than twice the gold answer are not handed to their scorer (some parse
with SymPy); some golds are long themselves (number_sorting's lists: 4,800 characters at level 1)."""
INSTRUCTION = "Give only your final answer inside <answer></answer> tags."


class ItemError(ValueError):
    """The options do not name an item this reasoning-gym can generate (the row's reference is unusable)."""


def _rg():
    try:
        import reasoning_gym
        import reasoning_gym.factory
    except ImportError:
        raise ImportError("the reasoning_gym verifier needs reasoning-gym: pip install 'cohort-rl[interop]'") from None
    return reasoning_gym


def digest(entry: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the item's question and answer: which item a row was made from."""
    text = json.dumps([entry["question"], entry.get("answer")], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def gold(entry: dict[str, Any]) -> str:
    return "" if entry.get("answer") is None else str(entry["answer"])


def resolve_config(task: str, *, seed: int, size: int, difficulty: int | None = None,
                   config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dataset config of ``task`` as JSON-able fields: the curriculum at ``difficulty`` (every attribute
    at that level), then ``config``'s fields over it, then ``seed`` and ``size``. Raises ItemError."""
    rg = _rg()
    if task not in rg.factory.DATASETS:
        raise ItemError(f"reasoning-gym has no task {task!r} (it has {len(rg.factory.DATASETS)}: "
                        f"{', '.join(sorted(rg.factory.DATASETS)[:8])}, ...)")
    fields: dict[str, Any] = {}
    if difficulty is not None:
        if not rg.factory.has_curriculum(task):
            raise ItemError(f"reasoning-gym task {task!r} has no curriculum, so no difficulty levels; give --config")
        curriculum = rg.factory.create_curriculum(task)
        curriculum.set_global_level(difficulty)
        fields = dataclasses.asdict(curriculum.generate_configuration({}))
    fields = {**fields, **(config or {}), "seed": seed, "size": size}
    try:
        as_json = json.loads(json.dumps(fields))
    except (TypeError, ValueError) as exc:
        raise ItemError(f"the config of reasoning-gym task {task!r} cannot be written as JSON ({exc}); "
                        "this task is not supported as rows") from None
    _dataset(task, json.dumps(as_json, sort_keys=True))  # their validate() on what the verifier will rebuild
    return as_json


_DATASETS = LRU(64)
_ITEMS = LRU(4096)


def _dataset(task: str, config_json: str):
    key = (task, config_json)
    found = _DATASETS.get(key)
    if found is None:
        rg = _rg()
        if task not in rg.factory.DATASETS:
            raise ItemError(f"reasoning-gym has no task {task!r}")
        try:
            fields = json.loads(config_json)
        except ValueError as exc:
            raise ItemError(f"option config is not JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ItemError(f"option config must be a JSON object, got {type(fields).__name__}")
        try:
            found = rg.create_dataset(task, **fields)
        except Exception as exc:  # their config class / validate() refusing the fields
            raise ItemError(f"reasoning-gym refuses config {config_json[:120]} for task {task!r}: {exc!r}") from None
        _DATASETS.put(key, found)
    return found


def item(task: str, config_json: str, index: int) -> tuple[Any, dict[str, Any]]:
    """(dataset, entry) for item ``index`` of ``task`` under ``config_json``; raises ItemError."""
    dataset = _dataset(task, config_json)
    key = (task, config_json, index)
    entry = _ITEMS.get(key)
    if entry is None:
        try:
            entry = dataset[index]
        except Exception as exc:
            raise ItemError(f"reasoning-gym could not generate item {index} of {task!r}: {exc!r}") from None
        _ITEMS.put(key, entry)
    return dataset, entry


def rows(task: str, n: int, *, seed: int = 0, difficulty: int | None = None, config: dict[str, Any] | None = None,
         instruction: str = INSTRUCTION, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
    """``n`` task rows of ``task`` (JSON objects of the row schema), items 0, 1, ... of the dataset seeded
    ``seed``, skipping items whose question is in ``exclude`` (questions of held-out rows)."""
    if n < 1:
        raise ItemError("n must be at least 1")
    excluded = set(exclude)
    size = n + 4 * len(excluded)  # room for an excluded question that recurs (small spaces: chain_sum level 0)
    fields = resolve_config(task, seed=seed, size=size, difficulty=difficulty, config=config)
    config_json = json.dumps(fields, sort_keys=True)
    out = []
    for index in range(size):
        if len(out) == n:
            break
        _, entry = item(task, config_json, index)
        if entry["question"] in excluded:
            continue
        use = {"name": NAME, "options": {"task": task, "config": config_json, "index": str(index),
                                         "digest": digest(entry)}}
        prompt = f"{entry['question']}\n\n{instruction}" if instruction else entry["question"]
        out.append({"id": f"rg/{task}/{seed}/{index}", "source": f"reasoning_gym/{task}", "prompt": prompt,
                    "answer": gold(entry), "verifiers": [use]})
    if len(out) < n:
        raise ItemError(f"only {len(out)} of {n} rows of {task!r} are left after excluding {len(excluded)} questions")
    return out


HASH_SEED_HINT = ("some tasks' items depend on Python's string hashing (their generators iterate sets: 6 of 106 in "
                  "reasoning-gym 0.1.25, e.g. polynomial_multiplication, word_ladder): write the rows and run the verifier "
                  "server (`cohort serve`, or `cohort train`, which starts it) with the same PYTHONHASHSEED, e.g. 0")


def check_hash_independent(task: str, written: Sequence[dict[str, Any]], probe: int = 8) -> None:
    """Raise ItemError when the first rows' items differ in a process with another string-hash seed, unless this
    process runs with a fixed PYTHONHASHSEED (then a server started with the same one regenerates them)."""
    if os.environ.get("PYTHONHASHSEED", "random") != "random":
        return
    import subprocess

    opts = [use["options"] for r in written[:probe] for use in r["verifiers"] if use["name"] == NAME]
    code = ("import json, sys\nfrom cohort.verifiers.interop.reasoning_gym import item, digest\n"
            "print(json.dumps([digest(item(o['task'], o['config'], int(o['index']))[1]) for o in json.load(sys.stdin)]))")
    for seed in ("12345", "54321"):  # two other seeds: a set's order can coincide with this process's by chance
        other = subprocess.run([sys.executable, "-c", code], input=json.dumps(opts), capture_output=True, text=True,
                               timeout=600, env={**os.environ, "PYTHONHASHSEED": seed})
        if other.returncode != 0:
            raise ItemError(f"could not regenerate the rows in a second process: {other.stderr.strip()[-300:]}")
        if json.loads(other.stdout) != [o["digest"] for o in opts]:
            raise ItemError(f"the items of {task!r} differ from one Python process to the next: " + HASH_SEED_HINT)


def questions(path: Path) -> set[str]:
    """The questions of a rows file written by :func:`rows` (for ``--exclude``)."""
    found = set()
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            for use in row.get("verifiers") or ():
                if isinstance(use, dict) and use.get("name") == NAME:
                    o = use["options"]
                    found.add(item(o["task"], o["config"], int(o["index"]))[1]["question"])
    return found


LAST_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


def extract(completion: str, how: str) -> str | None:
    """The answer in a completion: ``answer_tag`` (their convention), ``none`` (all of it) or ``last_number``."""
    if how == "none":
        return completion.strip()
    if how == "last_number":
        found = LAST_NUMBER_RE.findall(completion.replace(",", ""))
        return found[-1] if found else None
    from reasoning_gym.utils import extract_answer

    return extract_answer(completion, tag_name="answer", strip=True)


def _worker_setup(memory_bytes: int):
    """In a fresh worker process: cap its address space, load reasoning-gym; tasks are ``_score_task``'s."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _rg()
    return _score_task


def _score_task(task: tuple[str, str, dict[str, Any], str | None]) -> tuple[str, Any]:
    """Their scorer on one answer: ("ok", score), ("raised", why) or ("item_error", why)."""
    name, config_json, entry, answer = task
    try:
        dataset = _dataset(name, config_json)
    except ItemError as exc:
        return "item_error", str(exc)
    try:
        return "ok", dataset.score_answer(answer, entry)
    except BaseException as exc:  # noqa: BLE001  (MemoryError and RecursionError included: reported, not fatal)
        return "raised", repr(exc)[:300]


class ReasoningGymOptions(VerifierOptions):
    """The reasoning_gym verifier's server-side settings (serve config ``verifiers.reasoning_gym``)."""

    workers: int | None = Field(None, ge=0)
    """Worker processes running their scorers (formerly ``COHORT_RG_WORKERS``); null: up to 4, one per core;
    0 scores in the server's process, without a time bound."""
    budget_s: float = Field(5.0, gt=0)
    """Seconds one answer's scoring may take in a worker (formerly ``COHORT_RG_BUDGET_S``)."""
    memory_mb: int = Field(2048, ge=64)
    """Address space of each worker, in MiB (formerly ``COHORT_RG_MEMORY_MB``)."""


class ReasoningGymVerifier(VerifierBase):
    """Their scorers run in killable worker processes (``verifiers/hosting/workers.py``), as its options say
    (:class:`ReasoningGymOptions`)."""

    Options = ReasoningGymOptions
    name = NAME
    version = "1.1.0"
    description = "reasoning-gym's score_answer for its procedural tasks (options task, config, index, digest)"
    reference_kinds = ("answer",)

    def __init__(self, options: ReasoningGymOptions | None = None, **fields) -> None:
        """``ReasoningGymVerifier(workers=0)`` is ``ReasoningGymVerifier(ReasoningGymOptions(workers=0))``."""
        from importlib.metadata import version

        _rg()
        self.library_version = version("reasoning-gym")  # their __version__ lags the release (0.1.19 in 0.1.25)
        self.options = opts = options or ReasoningGymOptions(**fields)
        workers = min(4, os.cpu_count() or 1) if opts.workers is None else opts.workers
        self.budget_s, memory_mb = opts.budget_s, opts.memory_mb
        self.pool: WorkerPool | None = None
        if workers:
            self.pool = WorkerPool(_worker_setup, (memory_mb << 20,), workers, name="reasoning-gym-worker",
                                   preload=["cohort.verifiers.interop.reasoning_gym"])
            self.pool.start(ready_timeout_s=120)
        self._fanout = ThreadPoolExecutor(4 * max(1, workers), thread_name_prefix="reasoning-gym")
        self._gold = LRU(4096)
        """item -> None (their scorer scores its gold) or why not; only deterministic outcomes are kept."""

    def close(self) -> None:
        self._fanout.shutdown(wait=False, cancel_futures=True)
        if self.pool is not None:
            self.pool.close()

    def _run(self, task: tuple, deadline: float) -> PoolResult:
        if self.pool is None:
            return PoolResult("ok", _score_task(task))
        return self.pool.run(task, deadline, budget_s=self.budget_s)

    def verify_group(self, group: GroupRequest, ctx: VerifyContext) -> list[RolloutResult]:
        how = option(group, "extract", "answer_tag", ("answer_tag", "none", "last_number"))
        deadline = ctx.deadline if ctx.deadline is not None else time.monotonic() + 60 + self.budget_s
        try:
            key, entry = self._entry(group)
            masked = self._gold_problem(key, entry, deadline)
        except ItemError as exc:
            return [RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, str(exc)) for r in group.rollouts]
        if masked is not None:
            return [RolloutResult.unusable(r.index, *masked) for r in group.rollouts]
        limit = max(MAX_ANSWER_CHARS, 2 * len(gold(entry)))
        futures = [self._fanout.submit(self._one, key, entry, r, extract(r.completion, how), limit, deadline)
                   for r in group.rollouts]
        return [f.result() for f in futures]

    def _gold_problem(self, key: tuple[str, str, int], entry: dict[str, Any], deadline: float
                      ) -> tuple[RolloutStatus, str] | None:
        """Why their scorer cannot score this item's own answer (status, detail), or None when it can."""
        cached = self._gold.get(key)
        if cached is not None:
            return cached or None
        result = self._run((key[0], key[1], entry, entry.get("answer")), deadline)
        if result.kind == "timeout":
            return RolloutStatus.VERIFIER_TIMEOUT, f"their scorer on the item's own answer: {result.detail}"
        if result.kind == "crashed":
            return RolloutStatus.VERIFIER_ERROR, f"their scorer's worker died on the item's own answer: {result.detail}"
        outcome, value = result.value
        problem: tuple[RolloutStatus, str] | tuple[()] = ()
        if outcome != "ok":
            problem = (RolloutStatus.INVALID_REFERENCE, f"reasoning-gym's scorer raises on the item's own answer: {value}"
                       if outcome == "raised" else value)
        self._gold.put(key, problem)
        return problem or None

    def _one(self, key: tuple[str, str, int], entry: dict[str, Any], r: Rollout, answer: str | None, limit: int,
             deadline: float) -> RolloutResult:
        if answer is None:
            return RolloutResult.ok(r.index, 0.0, Verdict.NO_ANSWER, detail="no <answer> tags")
        if len(answer) > limit:
            return RolloutResult.ok(r.index, 0.0, Verdict.NO_ANSWER, flags=(CANDIDATE_LIMIT,),
                                    detail=f"answer over {limit} characters (candidate limit)")
        result = self._run((key[0], key[1], entry, answer), deadline)
        if result.kind == "timeout" and result.detail == "ran past its budget":  # the gold scores in time: the answer's doing
            return RolloutResult.ok(r.index, 0.0, Verdict.INCORRECT, flags=(CANDIDATE_LIMIT,),
                                    detail=f"their scorer ran past its {self.budget_s:g} s budget on this answer "
                                           "(candidate limit)")
        if result.kind == "timeout":
            return RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_TIMEOUT, f"reasoning-gym scorer: {result.detail}")
        if result.kind == "crashed":
            return RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR,
                                          f"reasoning-gym scorer's worker died: {result.detail}")
        outcome, score = result.value
        if outcome == "raised":  # their scorer on the policy's answer: the policy's doing, scored 0
            return RolloutResult.ok(r.index, 0.0, Verdict.INCORRECT, flags=(SCORER_RAISED,),
                                    detail=f"their scorer raised on this answer: {score}"[:300])
        if outcome != "ok":
            return RolloutResult.unusable(r.index, RolloutStatus.INVALID_REFERENCE, str(score))
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) \
                or not 0.0 <= score <= 1.0:
            return RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR,
                                          f"reasoning-gym's scorer for {key[0]} returned {score!r}, not a number in [0, 1]")
        return RolloutResult.ok(r.index, float(score), detail=f"answer {answer[:60]!r}")

    def _entry(self, group: GroupRequest) -> tuple[tuple[str, str, int], dict[str, Any]]:
        missing = [k for k in ("task", "config", "index") if not group.options.get(k)]
        if missing:
            raise ItemError(f"the row does not name a reasoning-gym item: options {missing} missing "
                            "(rows come from `python -m cohort.verifiers.interop.reasoning_gym`)")
        raw_index = group.options["index"]
        if not raw_index.isdigit():
            raise ItemError(f"option index={raw_index!r} is not a non-negative integer")
        key = (group.options["task"], group.options["config"], int(raw_index))
        _, entry = item(*key)
        want = group.options.get("digest")
        if want and want != digest(entry):
            raise ItemError(f"item {raw_index} of {key[0]!r} is not the row's (digest {digest(entry)}, "
                            f"row {want}): made by another reasoning-gym version ({self.library_version} here), "
                            f"edited, or under another PYTHONHASHSEED ({HASH_SEED_HINT})")
        if group.reference.answer is not None and group.reference.answer != gold(entry):
            raise ItemError(f"the row's answer {group.reference.answer[:40]!r} is not the item's {gold(entry)[:40]!r}")
        return key, entry


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cohort.verifiers.interop.reasoning_gym",
                                description="Write reasoning-gym task rows (JSONL) for `cohort train` / `cohort eval`.")
    p.add_argument("out", type=Path, help="the JSONL file to write")
    p.add_argument("--task", required=True, help="a reasoning-gym dataset name, e.g. basic_arithmetic")
    p.add_argument("-n", type=int, required=True, help="how many rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", type=int, default=None, help="curriculum level for every attribute (0 = easiest)")
    p.add_argument("--config", default=None, help="dataset config fields as a JSON object (over --difficulty)")
    p.add_argument("--instruction", default=INSTRUCTION, help="text after the question ('' for none)")
    p.add_argument("--exclude", type=Path, action="append", default=[],
                   help="a rows file whose questions to skip (held-out rows); repeatable")
    a = p.parse_args(argv)
    try:
        config = json.loads(a.config) if a.config else None
        if config is not None and not isinstance(config, dict):
            raise ItemError("--config must be a JSON object")
        excluded: set[str] = set()
        for path in a.exclude:
            excluded |= questions(path)
        out = rows(a.task, a.n, seed=a.seed, difficulty=a.difficulty, config=config, instruction=a.instruction,
                   exclude=excluded)
        check_hash_independent(a.task, out)
    except (ItemError, ImportError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    print(f"wrote {len(out)} rows of {a.task} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
