"""Write train.jsonl and test.jsonl of this folder: word problems of 2 to 4 arithmetic steps, few-shot chat rows.

    python examples/data/multistep/generate.py        # deterministic (seed 0): the committed files

Each problem follows one quantity through a story ("Mia has 7 shells. She finds 5 more. Then she has
twice as many as before. She gives 3 to a friend. How many shells does Mia have now?"): a start value
and 2, 3 or 4 operations (add, take away, double or triple), every intermediate value between 1 and
60, every number added or taken away at most 9. A second, easier level (``LEVELS["addsub"]``: adding and
taking away only, values up to 20, at most 5 at a time) is written as ``train-addsub.jsonl``,
``test-addsub.jsonl`` and ``solutions-addsub.jsonl``; a third (``LEVELS["add"]``: adding only, values up to 25, at
most 5 at a time, so that the chain is one pattern) as ``train-add.jsonl`` and so on. The row's ``answer`` is the final value;
``solutions.jsonl`` holds each row's worked chain of ``a op b = c`` steps (``{"id", "solution"}``: "7 + 5 = 12. 12 * 2 = 24. 24 - 3 = 21. The answer is 21."),
which the ``steps`` verifier scores right at every step (tests/verifiers/test_multistep_data.py); each row
also carries it as ``options.steps.solution``, the reference chain of the ``steps`` option ``solution``.
Each row is a chat: a system message, one worked example of 3 steps (the same for every row of a level, and
using only that level's operations), then the question. The question holds no expression to echo; ``math`` grades "The answer is N".

300 training rows and 96 held-out rows (a third each of 2, 3 and 4 steps); no question is in both
splits, and none equals the worked example. ``id`` names the split, the index and the step count
(``ms-test/5/op3``), so per-difficulty figures can be read off an evaluation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYSTEM = ("You are a helpful assistant. Solve the problem step by step: write each step as a calculation "
          "such as 4 + 3 = 7, then end with \"The answer is\" and the number.")
EXAMPLE = ("Tom has 4 apples. He buys 3 more. Then he has twice as many as before. He eats 5. "
           "How many apples does Tom have now?",
           "4 + 3 = 7. 7 * 2 = 14. 14 - 5 = 9. The answer is 9.")
EXAMPLE_ADDSUB = ("Tom has 4 apples. He buys 3 more. He eats 5. He finds 2 more. How many apples does Tom have now?",
                  "4 + 3 = 7. 7 - 5 = 2. 2 + 2 = 4. The answer is 4.")
"""The easier level's worked example: only the operations of that level. With ``EXAMPLE`` (whose product the
base model copied into sums: "10 * 3 = 30. 30 - 1 = 29.") the base passed 4.2% of the level's 96 held-out rows
(4 samples each); with this one 6.2% (2026-12-03, ``bench/reasoning_rise.py --task addsub``), inside the 5-30%
where groups carry signal. A first probe on 48 other problems of the level gave 8.9% against 5.7-6.8% for two
other wordings (a worked example that names each operation, two worked examples)."""
EXAMPLE_ADD = ("Tom has 4 apples. He buys 3 more. He finds 5 more. A friend gives him 2 more. How many apples does "
               "Tom have now?", "4 + 3 = 7. 7 + 5 = 12. 12 + 2 = 14. The answer is 14.")
"""The adding level's worked example."""
PEOPLE = [("Mia", "she"), ("Omar", "he"), ("Lena", "she"), ("Ravi", "he"), ("Sara", "she"), ("Ben", "he"),
          ("Ana", "she"), ("Kofi", "he"), ("Yuki", "she"), ("Leo", "he")]
ITEMS = ["shells", "marbles", "stickers", "books", "coins", "cards", "pencils", "stamps", "eggs", "beads"]
ADD = ["{P} buys {k} more.", "{P} finds {k} more.", "A friend gives {o} {k} more.", "{P} gets {k} more."]
SUB = ["{P} gives {k} to a friend.", "{P} loses {k}.", "{P} sells {k}.", "{P} uses {k}."]
MUL = {2: "Then {p} has twice as many as before.", 3: "Then {p} has three times as many as before."}
MAX_VALUE = 60


def problem(rng: random.Random, n_ops: int, ops: tuple[str, ...] = ("add", "sub", "mul"), max_value: int = MAX_VALUE,
            max_k: int = 9) -> tuple[str, str, int]:
    """(question, worked solution, answer) with ``n_ops`` operations of the kinds ``ops``."""
    name, p = rng.choice(PEOPLE)
    item = rng.choice(ITEMS)
    o = "her" if p == "she" else "him"
    v = rng.randint(2, 12)
    text, steps = [f"{name} has {v} {item}."], []
    last = None
    for _ in range(n_ops):
        kinds = [k for k in ops if k != last or k != "mul"]  # never two products in a row
        kind = rng.choice(kinds)
        if kind == "mul" and v * 2 > max_value or kind == "sub" and v < 3 or kind == "add" and v >= max_value:
            kind = "add" if v < 3 else "sub"
        if kind not in ops:  # the adding level at its ceiling: start this problem again
            return problem(rng, n_ops, ops, max_value, max_k)
        if kind == "add":
            k = rng.randint(1, min(max_k, max_value - v))
            text.append(rng.choice(ADD).format(P=p.capitalize(), o=o, k=k))
            steps.append(f"{v} + {k} = {v + k}.")
            v += k
        elif kind == "sub":
            k = rng.randint(1, min(max_k, v - 1))
            text.append(rng.choice(SUB).format(P=p.capitalize(), k=k))
            steps.append(f"{v} - {k} = {v - k}.")
            v -= k
        else:
            f = 3 if v * 3 <= max_value and rng.random() < 0.3 else 2
            text.append(MUL[f].format(p=p))
            steps.append(f"{v} * {f} = {v * f}.")
            v *= f
        last = kind
    text.append(f"How many {item} does {name} have now?")
    return " ".join(text), " ".join(steps) + f" The answer is {v}.", v


def row(split: str, i: int, n_ops: int, question: str, solution: str, answer: int,
        example: tuple[str, str] = EXAMPLE) -> dict:
    turns = [("system", SYSTEM), ("user", example[0]), ("assistant", example[1]), ("user", question)]
    return {"id": f"ms-{split}/{i}/op{n_ops}", "answer": str(answer),
            "messages": [{"role": r, "content": c} for r, c in turns],
            "options": {"steps": {"solution": solution}}}  # for steps' option solution; other verifiers ignore it


LEVELS = {
    "": {"seed": 0, "ops": ("add", "sub", "mul"), "max_value": MAX_VALUE, "max_k": 9, "example": EXAMPLE},
    "addsub": {"seed": 1, "ops": ("add", "sub"), "max_value": 20, "max_k": 5, "example": EXAMPLE_ADDSUB},
    "add": {"seed": 2, "ops": ("add",), "max_value": 25, "max_k": 5, "example": EXAMPLE_ADD},
}
"""Each level's files: ``train.jsonl`` / ``test.jsonl`` / ``solutions.jsonl`` for the full level, and
``train-addsub.jsonl`` and so on for the easier one (adding and taking away only, values up to 20)."""


def main(out: Path = HERE) -> None:
    for level, spec in LEVELS.items():
        write_level(out, "-" + level if level else "", spec)


def write_level(out: Path, suffix: str, spec: dict) -> None:
    rng = random.Random(spec["seed"])
    seen = {spec["example"][0]}
    sizes = {"test": 32, "train": 100}  # per step count
    solutions = []
    for split in ("test", "train"):
        rows = []
        for n_ops in (2, 3, 4):
            made = 0
            while made < sizes[split]:
                q, sol, ans = problem(rng, n_ops, spec["ops"], spec["max_value"], spec["max_k"])
                if q in seen:
                    continue
                seen.add(q)
                rows.append((n_ops, q, sol, ans))
                made += 1
        rng.shuffle(rows)
        with open(out / f"{split}{suffix}.jsonl", "w") as f:
            for i, (n_ops, q, sol, ans) in enumerate(rows):
                r = row(split + suffix, i, n_ops, q, sol, ans, spec["example"])
                f.write(json.dumps(r) + "\n")
                solutions.append({"id": r["id"], "solution": sol})
    with open(out / f"solutions{suffix}.jsonl", "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in solutions)


if __name__ == "__main__":
    main()
