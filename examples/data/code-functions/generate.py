"""Write train.jsonl and test.jsonl of this folder: small Python functions with hidden asserts, few-shot chat rows.

    python examples/data/code-functions/generate.py      # deterministic (seed 0): the committed files

The functions are those of the generated ``code_functions`` task (``cohort.trainer.data.CODE_TEMPLATES``:
``add_7``, ``is_multiple_of_4``, ``sum_of_evens``, ``reverse_words``, ...), each graded by 4 hidden asserts in
the sandbox (the ``code`` verifier), which reach every branch of the function (a multiple and a
non-multiple for ``is_multiple_of_4``, below, inside and above for ``clamp``). Each row is a chat: a system message, one worked example (a function
that is none of the templates), then the request. The held-out rows are functions never trained on, in
two kinds, marked in their ``id``:

- ``seen-kind``: a trained template with a constant ``k`` of 3 or 7, which no training row has
  (``add_7`` and ``fizz_3`` are held out; training has ``add_5`` and ``fizz_4``): the same skill, a new
  function (the 8 such names of ``add``, ``is_multiple_of``, ``repeat`` and ``fizz``, and 16 of ``affine``);
- ``new-kind``: the templates ``clamp`` and ``count_over``, which no training row uses at all (24 names).

256 training rows, 48 held-out rows (24 of each kind, each a different function); no function name is
in both splits. The templates without a constant (``sum_of_evens``, ``spread``, ``reverse_words``) are
trained only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from cohort.trainer.data import CODE_TEMPLATES, code_function

HERE = Path(__file__).resolve().parent
SYSTEM = "You are a helpful assistant. Reply with only the code in a ```python block."
EXAMPLE = ("Write a Python function `double(x)` that returns x times 2.",
           "```python\ndef double(x):\n    return x * 2\n```")
NEW_KINDS = {"clamp_{k}_{m}", "count_over_{k}"}


HELD_K = (3, 7)


def function(rng: random.Random, template, ks: tuple[int, ...]) -> tuple[str, str, tuple[str, ...]]:
    """(function name, request, hidden asserts) of one draw of ``template`` with a constant k from ``ks``."""
    return code_function(rng, template, rng.choice(ks))


def row(row_id: str, request: str, asserts: tuple[str, ...]) -> dict:
    turns = [("system", SYSTEM), ("user", EXAMPLE[0]), ("assistant", EXAMPLE[1]), ("user", request)]
    return {"id": row_id, "messages": [{"role": r, "content": c} for r, c in turns], "code_tests": {"asserts": list(asserts)}}


def main(out: Path = HERE) -> None:
    rng = random.Random(0)
    seen = [t for t in CODE_TEMPLATES if t[0] not in NEW_KINDS]
    new = [t for t in CODE_TEMPLATES if t[0] in NEW_KINDS]
    with_k = [t for t in seen if "{k}" in t[0]]
    other_k = tuple(k for k in range(2, 10) if k not in HELD_K)
    test: list[dict] = []
    names: set[str] = set()

    def hold(kind: str, templates: list, ks: tuple[int, ...], n: int) -> None:
        """Held-out rows of ``kind`` (distinct names) until the test split has ``n`` rows."""
        while len(test) < n:
            fn, request, asserts = function(rng, rng.choice(templates), ks)
            if fn not in names:
                names.add(fn)
                test.append(row(f"cf-test/{len(test)}/{kind}", request, asserts))

    hold("seen-kind", [t for t in with_k if "affine" not in t[0]], HELD_K, 8)  # all 8 names
    hold("seen-kind", [t for t in with_k if "affine" in t[0]], HELD_K, 24)  # and 16 affine ones
    hold("new-kind", [t for t in new if "count_over" in t[0]], tuple(range(2, 10)), 32)  # all 8 names
    hold("new-kind", [t for t in new if "clamp" in t[0]], tuple(range(2, 10)), 48)  # and 16 clamp ones
    train: list[dict] = []
    while len(train) < 256:  # repeats of a trained name are fine (other hidden inputs); held-out names never
        template = rng.choice(seen)
        fn, request, asserts = function(rng, template, other_k if "{k}" in template[0] else (2,))
        assert fn not in names
        train.append(row(f"cf-train/{len(train)}", request, asserts))
    for split, rows in (("train", train), ("test", test)):
        with open(out / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
