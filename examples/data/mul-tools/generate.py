"""Write train.jsonl and test.jsonl of this folder: products of two 3-digit numbers, few-shot chat rows.

    python examples/data/mul-tools/generate.py        # deterministic (seed 0): the committed files

SmolLM2-135M-Instruct cannot multiply 3-digit numbers in its head (0 of 64 held-out rows without
tools); with the ``python`` tool it only has to copy the operands into ``print(a * b)`` and the output
into its answer. Each row is a chat: a system message, one worked example (the tool call, its output
block as the trainer writes it back, the answer), then the question. The question names the operands
in words ("the product of 347 and 829"), and ``arith`` with ``pick: last`` grades the last integer the
model wrote, so echoing the operands is never a correct answer. 64 held-out pairs, 320 training pairs,
none in both.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYSTEM = ("You are a helpful assistant. You can run Python: write a ```python code block that prints the "
          "result and you will see its output. Then give the answer.")
EXAMPLE = ("What is the product of 23 and 41?", "```python\nprint(23 * 41)\n```\n```output\n943\n```\nThe answer is 943.")


def row(split: str, i: int, a: int, b: int) -> dict:
    turns = [("system", SYSTEM), ("user", EXAMPLE[0]), ("assistant", EXAMPLE[1]),
             ("user", f"What is the product of {a} and {b}?")]
    return {"id": f"mul-{split}/{i}", "answer": str(a * b),
            "messages": [{"role": r, "content": c} for r, c in turns]}


def main() -> None:
    rng = random.Random(0)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < 384:
        p = (rng.randint(100, 999), rng.randint(100, 999))
        if p not in pairs:
            pairs.append(p)
    for split, chunk in (("test", pairs[:64]), ("train", pairs[64:])):
        with open(HERE / f"{split}.jsonl", "w") as f:
            for i, (a, b) in enumerate(chunk):
                f.write(json.dumps(row(split, i, a, b)) + "\n")


if __name__ == "__main__":
    main()
