"""``cohort eval``: sample G completions per prompt from a model, score them with the training verifiers.

The same pieces as training (``models.build_policy``, the rollout engine, the chat template, the
``Scorer`` with per-row routing), with no update. Reported per slice (all rows, each task source, each
verifier): mean reward over usable rollouts, pass@1 and pass@k, and counts per status.

A rollout *passes* for a verifier when that verifier's reward reaches ``pass_threshold`` (1.0: fully
correct), and passes overall when every verifier routed to its row does. pass@k is the unbiased
estimator of Chen et al. 2021 (HumanEval): per prompt with n usable samples of which c pass,
``1 - C(n-c, k) / C(n, k)``, averaged over prompts with n >= k. Unusable rollouts (a verifier or the
sandbox failed) are left out of n and counted under their status: never scored as wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from cohort.trainer import tool_rollouts
from cohort.trainer.config import TrainConfig
from cohort.trainer.data import encode_prompts, load_examples
from cohort.trainer.models import build_policy
from cohort.trainer.rollout import build_engine
from cohort.trainer.scoring import Scorer
from cohort.verifiers.records import Task, route


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, eq. 1).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), round(pass_at_k(5, 2, 2), 4)
    (0.25, 1.0, 0.7)
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class Slice:
    """Counts for one slice of the rows: per prompt (n usable, c passing) and per rollout."""

    groups: list[tuple[int, int]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    tool_calls: int = 0  # rollouts with tools (rollout.max_turns > 1): calls made, and calls that failed by
    tool_errors: int = 0  # their own content (code that raised, bad arguments)

    def add(self, rewards: list[float], passed: list[bool], statuses: list[str], calls: int = 0, errors: int = 0) -> None:
        ok = [s == "ok" for s in statuses]
        self.groups.append((sum(ok), sum(p for p, o in zip(passed, ok) if o)))
        self.rewards.extend(r for r, o in zip(rewards, ok) if o)
        self.statuses.update(statuses)
        self.tool_calls += calls
        self.tool_errors += errors

    def summary(self, k: int) -> dict:
        n_rollouts = sum(self.statuses.values())
        with_k = [(n, c) for n, c in self.groups if n >= k]
        with_1 = [(n, c) for n, c in self.groups if n >= 1]
        return {
            "prompts": len(self.groups), "rollouts": n_rollouts, "usable": len(self.rewards),
            "reward_mean": sum(self.rewards) / len(self.rewards) if self.rewards else float("nan"),
            "pass@1": sum(pass_at_k(n, c, 1) for n, c in with_1) / len(with_1) if with_1 else float("nan"),
            f"pass@{k}": sum(pass_at_k(n, c, k) for n, c in with_k) / len(with_k) if with_k else float("nan"),
            "statuses": dict(self.statuses),
            "tool_calls_per_rollout": self.tool_calls / n_rollouts if n_rollouts else 0.0,
            "tool_error_rate": self.tool_errors / self.tool_calls if self.tool_calls else 0.0,
        }


@dataclass
class EvalResult:
    k: int
    slices: dict[str, Slice] = field(default_factory=dict)

    def slice(self, name: str) -> Slice:
        return self.slices.setdefault(name, Slice())

    def summary(self) -> dict[str, dict]:
        return {name: s.summary(self.k) for name, s in self.slices.items()}


def evaluate(cfg: TrainConfig, endpoints: dict[str, list[str]], samples: int, k: int, *, limit: int | None = None,
             prompts_per_batch: int = 8, pass_threshold: float = 1.0,
             on_rollout: Callable[[dict], None] | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Sample ``samples`` completions for each of the first ``limit`` rows of ``cfg.data`` and score them."""
    if not 1 <= k <= samples:
        raise ValueError(f"pass@k needs 1 <= k <= samples (k={k}, samples={samples})")
    if cfg.run.torch_threads:
        torch.set_num_threads(cfg.run.torch_threads)
    torch.manual_seed(cfg.run.seed)
    tasks = load_examples(cfg.data, weighted=False)[:limit]  # every row once: source weights are for training
    scorer = Scorer(cfg.scoring, endpoints)
    try:
        scorer.check(tasks)
        policy, tokenizer = build_policy(cfg.model)
        policy.eval()
        prompt_ids = encode_prompts(tasks, tokenizer, cfg.data)
        engine = tool_rollouts.wrap(build_engine(cfg.rollout, policy, tokenizer, cfg.run.seed), cfg.rollout, tokenizer)
        result = EvalResult(k)
        for start in range(0, len(tasks), prompts_per_batch):
            chunk = tasks[start : start + prompts_per_batch]
            batch = engine.generate(prompt_ids[start : start + prompts_per_batch], samples)
            scores = scorer.submit(chunk, batch.texts, batch.truncated.tolist(), start, tools=batch.tools).result()
            for i, task in enumerate(chunk):
                _add_group(result, scorer, task, i, scores, batch, samples, pass_threshold, on_rollout)
            if on_progress is not None:
                on_progress(min(start + prompts_per_batch, len(tasks)), len(tasks))
    finally:
        scorer.close()
    return result


def _add_group(result: EvalResult, scorer: Scorer, task: Task, i: int, scores, batch, g: int, threshold: float,
               on_rollout: Callable[[dict], None] | None) -> None:
    names = [r.name for r in route(task, scorer.defaults, scorer.kinds)]
    statuses = scores.statuses[i]
    rewards = scores.rewards[i].tolist()
    per_verifier = {n: scores.components[n][i].tolist() if n in scores.components else [float("nan")] * g
                    for n in names}
    passed = [all(per_verifier[n][j] >= threshold for n in names) for j in range(g)]  # NaN (unusable) fails
    rows = range(i * g, (i + 1) * g)
    calls = 0 if batch.tools is None else int(batch.tools.calls[i * g : (i + 1) * g].sum())
    errors = 0 if batch.tools is None else sum(len(batch.tools.errors[r]) for r in rows)
    result.slice("all").add(rewards, passed, statuses, calls, errors)
    result.slice(f"source={task.source or '-'}").add(rewards, passed, statuses, calls, errors)
    for n in names:
        result.slice(f"verifier={n}").add(per_verifier[n], [x >= threshold for x in per_verifier[n]], statuses)
    if on_rollout is not None:
        for j in range(g):
            on_rollout({"id": task.id, "source": task.source, "index": j, "status": statuses[j],
                        "reward": rewards[j] if statuses[j] == "ok" else None, "passed": passed[j],
                        "verifiers": {n: None if math.isnan(per_verifier[n][j]) else per_verifier[n][j] for n in names},
                        "truncated": bool(batch.truncated[i * g + j]), "completion": batch.texts[i * g + j]}
                       | ({} if batch.tools is None else {"tool_calls": int(batch.tools.calls[i * g + j]),
                                                          "tool_errors": list(batch.tools.errors[i * g + j])}))
