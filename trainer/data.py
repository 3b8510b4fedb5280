"""Prompts with references, and the deterministic prompt order (resumable by position).

The embedded task is generated here, deterministically from its seed: ``a+b=`` with the sum as the
reference answer. ``python -m cohort.trainer.data OUT.jsonl`` writes it out as JSONL.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from cohort.trainer.config import ArithmeticTask, DataSection


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str


def arithmetic_task(task: ArithmeticTask) -> list[Example]:
    if task.min_operand > task.max_operand:
        raise ValueError("data.arithmetic: min_operand > max_operand")
    rng = random.Random(task.seed)
    rows = []
    for _ in range(task.num_prompts):
        a = rng.randint(task.min_operand, task.max_operand)
        b = rng.randint(task.min_operand, task.max_operand)
        rows.append(Example(f"{a}+{b}=", str(a + b)))
    return rows


def read_jsonl(path: str | Path) -> list[Example]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows.append(Example(str(row["prompt"]), str(row["answer"])))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: expected {{\"prompt\": ..., \"answer\": ...}} ({exc})") from None
    return rows


def load_examples(cfg: DataSection) -> list[Example]:
    rows = arithmetic_task(cfg.arithmetic) if cfg.arithmetic is not None else read_jsonl(cfg.path)
    if not rows:
        raise ValueError("the dataset is empty")
    return rows


class PromptSampler:
    """P prompts per round, in the order of ``torch.randperm(N, seed)`` (a fresh permutation per epoch).

    The position is a plain integer (rounds drawn so far), so a checkpoint restores it exactly.
    Epoch 0 uses the same permutation as TRL's RepeatSampler with the same seed.
    """

    def __init__(self, n: int, per_round: int, seed: int):
        if per_round > n:
            raise ValueError(f"grpo.prompts_per_step={per_round} exceeds the dataset size {n}")
        self.n, self.per_round, self.seed = n, per_round, seed
        self.position = 0  # prompts drawn so far
        self._epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=gen)
        return self._perm

    def next(self, count: int | None = None) -> list[int]:
        out = []
        for _ in range(self.per_round if count is None else count):
            epoch, offset = divmod(self.position, self.n)
            out.append(int(self._order(epoch)[offset]))
            self.position += 1
        return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m cohort.trainer.data OUT.jsonl  (writes the embedded arithmetic task)")
    with open(sys.argv[1], "w") as f:
        for ex in arithmetic_task(ArithmeticTask()):
            f.write(json.dumps({"prompt": ex.prompt, "answer": ex.answer}) + "\n")


if __name__ == "__main__":
    main()
