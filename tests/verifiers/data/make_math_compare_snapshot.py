"""Build the behaviour snapshot of ``verifiers/math/compare.py`` (issue 18: the split must not change a verdict).

A corpus of (gold, answers, policy, forms) cases, each with the verdicts of the comparator that wrote it:

- ``cheap``: ``compare(gold, answers, cheap_leaf, policy, forms)`` (the parent's pass), as
  ``["equal", bool, how]``, ``["need_sympy"]``, ``["over_limits", side, why]`` or ``["raised", type]``;
- ``stub``: the same with a deterministic stand-in for the SymPy leaf (equal when a hash of the two strings is
  even), plus a digest of every (gold, answer) pair handed to the leaf, in order. This pins what the structure
  code sends to SymPy and how it combines the leaf's answers, without SymPy, in milliseconds;
- ``full`` (only where ``cheap`` is ``need_sympy``): the worker's result through the real killable pool
  (:class:`verifiers.math.pool.WorkerPool`), as ``[tag, ...]`` (see :func:`row_of`).

Sources: every ``compare``/``rounding_request`` call made by the math tests (recorded with a pytest plugin,
``--record``), GSM8K answers against themselves and perturbed, ``bench/math_bench.py``'s development set,
and generated variants of each kind of answer (numbers, structures, relations, choices, units, text).

    python tests/verifiers/data/make_math_compare_snapshot.py corpus --recorded REC.jsonl --out BIG.jsonl
    python tests/verifiers/data/make_math_compare_snapshot.py verdicts BIG.jsonl --out BIG.verdicts.jsonl
    python tests/verifiers/data/make_math_compare_snapshot.py check BIG.verdicts.jsonl     # after a change
    python tests/verifiers/data/make_math_compare_snapshot.py sample BIG.verdicts.jsonl --out math_compare_snapshot.jsonl

``tests/verifiers/test_math_compare_snapshot.py`` checks the committed sample.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

from cohort.verifiers.math import compare as C

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data"


# ------------------------------------------------------------------------------------------- verdicts


def policy_of(p) -> C.Policy:
    if p is None:
        return C.DEFAULT_POLICY
    rounding, comma = p
    return C.Policy(None if rounding is None else C.Rounding(rounding[0], rounding[1]), comma)


def _stub_leaf(calls: list):
    def leaf(g: str, a: str) -> C.Outcome:
        calls.append(f"{g}\x00{a}")
        equal = hashlib.sha1(f"{g}\x00{a}".encode()).digest()[0] % 2 == 0
        return C.Outcome(equal, "stub leaf")

    return leaf


def _run(gold: str, answers: tuple[str, ...], leaf, policy, forms: bool) -> list:
    try:
        outcome = C.compare(gold, answers, leaf, policy, forms)
        return ["equal", bool(outcome.equal), outcome.how]
    except C.NeedSympy:
        return ["need_sympy"]
    except C.OverLimits as exc:
        return ["over_limits", exc.side, exc.why]
    except Exception as exc:  # recorded, so that a change of what escapes is seen too
        return ["raised", type(exc).__name__]


def cheap_verdict(case: dict) -> list:
    return _run(case["g"], tuple(case["a"]), C.cheap_leaf, policy_of(case.get("p")), case.get("f", False))


def stub_verdict(case: dict) -> list:
    calls: list[str] = []
    verdict = _run(case["g"], tuple(case["a"]), _stub_leaf(calls), policy_of(case.get("p")), case.get("f", False))
    digest = hashlib.sha1("\x01".join(calls).encode()).hexdigest()[:12] if calls else ""
    return [*verdict, len(calls), digest]


def row_of(result) -> list:
    """A worker result as a JSON row in the form of the tagged tuple the worker sent before the split
    (typed results since: :data:`verifiers.math.outcome.WorkerResult`)."""
    from cohort.verifiers.math import outcome as O

    match result:
        case tuple():
            return list(result)
        case O.Compared(equal, how):
            return ["equal", equal, how]
        case O.BadReference(why):
            return ["invalid_reference", why]
        case O.TooLarge(side, why):
            return ["over_limits", side, why]
        case O.CheckFailed(why):
            return ["error", why]
    raise TypeError(f"not a worker result: {result!r}")


def full_verdicts(cases: list[dict], timeout: float = 30.0) -> list[list | None]:
    """The worker's verdict for every case the cheap pass leaves to SymPy (None elsewhere); a case that times
    out or crashes is ``["pool", kind]`` (not a verdict: left out of the snapshot)."""
    from cohort.verifiers.math.pool import math_pool

    pool = math_pool(1, memory_mb=1536)
    pool.start()
    out: list[list | None] = []
    try:
        for i, case in enumerate(cases):
            if case["cheap"] != ["need_sympy"]:
                out.append(None)
                continue
            task = (case["g"], tuple(case["a"]), policy_of(case.get("p")), case.get("f", False))
            result = pool.run(task, time.monotonic() + timeout)
            out.append(row_of(result.value) if result.kind == "ok" else ["pool", result.kind])
            if i % 500 == 0:
                print(f"  full {i}/{len(cases)}", file=sys.stderr, flush=True)
    finally:
        pool.close()
    return out


def prompt_verdict(prompt: str) -> list | None:
    r = C.rounding_request(prompt)
    return None if r is None else [r.decimals, r.significant]


# ------------------------------------------------------------------------------------------- corpus


def _case(g: str, a, p=None, f: bool = False) -> dict:
    case = {"g": g, "a": [a] if isinstance(a, str) else list(a)}
    if p is not None:
        case["p"] = p
    if f:
        case["f"] = True
    return case


def gsm8k_cases(rng: random.Random) -> list[dict]:
    golds = []
    for name, take in (("test.jsonl", None), ("train.jsonl", 1500)):
        rows = [json.loads(line) for line in (SHARED / "gsm8k" / name).read_text().splitlines() if line.strip()]
        if take is not None:
            rows = rng.sample(rows, take)
        golds += [r["answer"].split("####")[-1].strip() for r in rows]
    cases = []
    for g in golds:
        plain = g.replace(",", "")
        try:
            n = int(plain)
        except ValueError:
            cases.append(_case(g, g))
            continue
        variants = [g, plain, str(n + 1), str(n - 1), f"{n}.0", f"{n:,}", f"\\${n}", f"{n} dollars", f"{n}\\%",
                    str(-n), str(10 * n), f"{n}.5", f"\\frac{{{2 * n}}}{{2}}", f"{n}\\text{{ apples}}", f"x = {n}",
                    f"({n})", f"{n:,}".replace(",", "{,}"), f"{n:,}".replace(",", "\\,"), f"{n}/1", f"{n}.00"]
        for v in rng.sample(variants, 8) + [g]:
            cases.append(_case(g, v))
        cases.append(_case(f"{n}.0", str(n)))
        cases.append(_case(f"{n / 7:.2f}", f"\\frac{{{n}}}{{7}}"))
    return cases


def bench_cases() -> list[dict]:
    from cohort.verifiers.math.extract import extract_answer

    cases, prompts = [], []
    for line in (SHARED / "math" / "equivalence_dev.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        ex = extract_answer(row["output"])
        prompt = row.get("prompt", "")
        prompts.append(prompt)
        rounding = C.rounding_request(prompt)
        comma = (row.get("options") or {}).get("decimal_comma", "auto")
        p = None if rounding is None and comma == "auto" else [None if rounding is None else [rounding.decimals, rounding.significant], comma]
        if ex.answers:
            cases.append(_case(row["gold"], ex.answers, p, ex.kind == "forms"))
    return cases


KINDS: dict[str, list[str]] = {
    "numbers": [
        "3/4", "\\frac{3}{4}", "\\frac34", "0.75", "75\\%", ".75", "1.5", "\\frac{3}{2}", "2\\frac{1}{4}", "2 1/4", "2.25",
        "-\\frac{7}{3}", "-2.333", "-2.33", "6.02\\times10^{23}", "6.02 \\times 10^{22}", "1.2e-5", "0.000012", "1.2\\cdot 10^{-5}",
        "0.1\\overline{6}", "\\frac16", "0.1667", "0.17", "1000000", "1{,}000{,}000", "10^6", "1,000", "1000", "\\pi", "3.14",
        "3.14159", "\\sqrt{2}", "1.414", "\\sqrt2", "2\\sqrt3", "\\sqrt{12}", "3.464", "\\frac{\\sqrt2}{2}", "\\frac{1}{\\sqrt2}",
        "5\\sqrt3", "9", "8.66", "e^2", "\\mathrm{e}^2", "7.389", "12_{8}", "10", "1010_2", "0", "-0", "+5", "5", "(5)", "(-5)",
        "\\dfrac{5}{7}", "5/7", "0.714", "2^{10}", "1024", "10!", "3628800", "\\binom{5}{2}", "1/3", "0.3", "0.333",
        "0.\\overline{3}", "\\infty", "-\\infty", "2,74", "2.74", "0,125", "0.125", "2{,}74", "\\approx 3.162", "\\sqrt{10}",
        "2^{100000} - 2^{100000}", "1+1+1+1", "4", "1000! - 1000!", "\\tfrac12", "0.5", "50\\%", "1:2", "2:4", "12:00",
    ],
    "structures": [
        "[1, 5)", "[1,5)", "(1, 5)", "[1, 5]", "(-\\infty, 3]", "(-\\infty, 3)", "(-\\infty,3]", "(-\\infty, -1) \\cup (2, \\infty)",
        "(2, \\infty) \\cup (-\\infty, -1)", "(2, +\\infty) \\cup (-\\infty, -1)", "\\{1, 2, 3\\}", "\\{3, 2, 1\\}", "1, 2, 3",
        "1, 2", "3, 2, 1", "1 and 2", "1 or 2", "1; 2", "(1, 2)", "(2, 1)", "(1, 2, 3)", "x = 1, y = 2", "y = 2, x = 1",
        "x = 2, y = 1", "(x, y) = (1, 2)", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}",
        "\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1&2\\end{pmatrix}",
        "\\begin{pmatrix}1&2&3\\end{pmatrix}", "x_1 = 1, x_2 = 2", "1 \\pm \\sqrt2", "1+\\sqrt2, 1-\\sqrt2", "1 - \\sqrt2, 1 + \\sqrt2",
        "\\{\\}", "\\emptyset", "\\{x \\mid x > 2\\}", "(2, \\infty)", "x \\in \\{4, -1\\}", "-1, 4", "4, -1", "p=5,q=2;p=7,q=2",
        "(5, 2), (7, 2)", "(7, 2), (5, 2)", "\\left(1, 2\\right)", "[\\begin{array}{cc}1&2\\\\3&4\\end{array}]",
        "\\begin{array}{cc}1&2\\\\3&4\\end{array}", "\\{1,2\\}", "\\{2,1\\}", "\\{1,2,2\\}", "1, 1, 2",
    ],
    "relations": [
        "x > 2", "2 < x", "x \\ge 2", "x \\geq 2", "[2, \\infty)", "(2, \\infty)", "2 < x \\le 5", "(2, 5]", "5 \\ge x > 2",
        "-2 \\le x \\le 7", "[-2, 7]", "x < -1 or x > 2", "x < 3 and x > -2", "(-2, 3)", "y = 2x + 1", "2x + 1 = y",
        "y - 2x - 1 = 0", "2y = 4x + 2", "y = 2x - 1", "x^2 + y^2 = 1", "y^2 + x^2 = 1", "x^2+y^2=4", "x \\ne 3",
        "(-\\infty, 3) \\cup (3, \\infty)", "\\mathbb{R} \\setminus \\{3\\}", "\\mathbb{R}\\setminus[1,2]",
        "(-\\infty, 1) \\cup (2, \\infty)", "\\mathbb{R} \\setminus \\{1, -1\\}", "x = 3", "3", "x = 5+5+1 = 11", "11",
        "1/2 + 1/3 = 5/6", "\\frac56", "\\sqrt2 \\approx 1.414", "f(x) = x^2", "x^2", "a < b", "b > a", "1 \\le |z| \\le 3/2",
        "z \\in [-3/2, -1] \\cup [1, 3/2]", "x=2orx=3", "2, 3", "x=1andy=2", "k = 4", "k=-4", "n \\equiv 2 \\pmod 5",
        "\\{x \\mid x > 2\\}", "x \\in (2, \\infty)", "x > 2 \\text{ or } x < -1", "t \\in [0, 1]",
    ],
    "choices": [
        "A", "B", "C", "D", "E", "(C)", "\\text{(C)}", "\\text{C}", "C. x = 42", "(C) 12", "C", "option C", "choice C", "c",
        "\\textbf{(C) }\\frac{5}{7}", "\\frac{5}{7}", "(C) \\frac{5}{7}", "(B) \\frac57", "\\text{(B)} 24", "D. 7", "4 \\text{ (A)}",
        "A (4)", "12", "(A)", "(E)", "E", "e", "\\text{(D)}", "D) 7", "(c)", "B.", "\\text{ (A) }", "7",
    ],
    "units": [
        "5 cm", "5\\text{ cm}", "5\\text{ m}", "5 m", "5", "0.05\\text{ m}", "9\\pi\\text{ cm}^2", "9\\pi", "9\\pi \\text{ m}^2",
        "15\\text{ m/s}", "15", "15\\,\\mathrm{m}\\,\\mathrm{s}^{-1}", "36\\,\\mathrm{km}\\,\\mathrm{h}^{-1}", "36\\text{ km/h}",
        "\\frac{\\text{m}}{\\text{s}}", "90^\\circ", "90", "\\frac{\\pi}{2}", "45^\\circ", "\\frac{\\pi}{4}", "3\\text{ million}",
        "3", "3000000", "28\\%", "28", "0.28", "10\\text{ units}", "10", "5\\text{ or more}", "12 square feet", "12\\text{ ft}^2",
        "\\$12.50", "12.5", "12.50 dollars", "7 \\text{ hours}", "420 \\text{ minutes}", "\\text{5 apples}",
    ],
    "text": [
        "\\text{yes}", "yes", "Yes", "no", "\\text{No}", "Monday", "\\text{Monday}", "\\text{Tuesday}", "even", "odd",
        "\\text{even}", "infinitely many", "\\text{infinitely many}", "none", "\\text{none}", "True", "False", "\\text{(A) and (B)}",
        "AB", "ABC", "BC", "x", "y", "xy", "",
    ],
}


def generated_cases(rng: random.Random) -> list[dict]:
    cases = []
    for kind, forms in KINDS.items():
        for g in forms:
            if not g:
                continue
            for a in forms:
                cases.append(_case(g, a))
    every = [f for forms in KINDS.values() for f in forms if f]
    for _ in range(3000):  # across kinds: wrong answers of another kind
        cases.append(_case(rng.choice(every), rng.choice(every)))
    policies = [[[2, None], "auto"], [[None, 3], "auto"], [[None, None], "auto"], [[0, None], "auto"], [[-1, None], "auto"],
                [None, "never"], [None, "always"], [[1, None], "always"]]
    numbers = KINDS["numbers"] + KINDS["units"]
    for _ in range(3000):  # request policies
        cases.append(_case(rng.choice(numbers), rng.choice(numbers), rng.choice(policies)))
    for _ in range(600):  # several answers: parts of one answer, or equal forms of one answer
        g = rng.choice(every)
        a = [rng.choice(every) for _ in range(rng.randint(2, 3))]
        cases.append(_case(g, a, None, rng.random() < 0.5))
    return cases


ASKS = [
    "Round your answer to the nearest hundredth.", "Express your answer as a decimal to the nearest tenth.",
    "Give your answer to 3 significant figures.", "Round to two decimal places.", "Answer to 2 d.p.",
    "Express your answer as a decimal.", "Give a numerical approximation.", "Round to the nearest whole number.",
    "Round to the nearest ten-thousandth.", "to the nearest .01", "Round it off to the nearest integer.",
    "Give the answer to four sig figs.", "Express the answer in decimal form.", "Express your answer in simplest form.",
    "Find the exact value.", "The frog jumps to the nearest integer point.", "It weighs approximately 5 kg.",
    "Round the result to one decimal place.", "Give your answer to the nearest cent.", "Round to the nearest thousand.",
]


def generated_prompts(rng: random.Random) -> list[str]:
    """GSM8K questions as they are, and with a rounding request (or a look-alike) before or after."""
    rows = [json.loads(line) for line in (SHARED / "gsm8k" / "test.jsonl").read_text().splitlines() if line.strip()]
    questions = [r["question"] for r in rng.sample(rows, 300)]
    prompts = questions[:100]
    for q in questions[100:]:
        ask = rng.choice(ASKS)
        prompts.append(f"{q} {ask}" if rng.random() < 0.7 else f"{ask} {q}")
    return prompts + ASKS


def corpus(recorded: Path | None, seed: int = 18) -> tuple[list[dict], list[str]]:
    rng = random.Random(seed)
    cases, prompts = [], []
    if recorded is not None:
        rec = [json.loads(line) for line in recorded.read_text().splitlines() if line.strip()]
        prompts += [r["prompt"] for r in rec if "prompt" in r]
        cases += [{k: v for k, v in r.items() if not (k == "p" and v == [None, "auto"]) and not (k == "f" and not v)} for r in rec if "g" in r]
    cases += bench_cases() + gsm8k_cases(rng) + generated_cases(rng)
    for row in (SHARED / "math" / "equivalence_dev.jsonl").read_text().splitlines():
        if row.strip():
            prompts.append(json.loads(row).get("prompt", ""))
    prompts += generated_prompts(rng)
    seen, unique = set(), []
    for case in cases:
        key = json.dumps(case, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(case)
    return unique, sorted(set(prompts))


# ------------------------------------------------------------------------------------------- commands


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def with_verdicts(cases: list[dict], prompts: list[str], full: bool) -> list[dict]:
    rows = []
    for case in cases:
        row = dict(case)
        row["cheap"] = cheap_verdict(case)
        row["stub"] = stub_verdict(case)
        rows.append(row)
    if full:
        for row, verdict in zip(rows, full_verdicts(rows)):
            if verdict is not None:
                row["full"] = verdict
    rows += [{"prompt": p, "rounding": prompt_verdict(p)} for p in prompts]
    return rows


def check(rows: list[dict], full: bool) -> list[str]:
    """Differences between the verdicts recorded in ``rows`` and the current comparator's."""
    diffs = []
    cases = [r for r in rows if "g" in r]
    for r in rows:
        if "prompt" in r and prompt_verdict(r["prompt"]) != r["rounding"]:
            diffs.append(f"rounding_request({r['prompt'][-80:]!r}): {prompt_verdict(r['prompt'])} != {r['rounding']}")
    for r in cases:
        for name, fn in (("cheap", cheap_verdict), ("stub", stub_verdict)):
            got = fn(r)
            if got != r[name]:
                diffs.append(f"{name} {r['g']!r} vs {r['a']!r} p={r.get('p')} f={r.get('f')}: {got} != {r[name]}")
    if full:
        want = [r for r in cases if "full" in r and r["full"][0] != "pool"]
        for r, got in zip(want, full_verdicts(want)):
            if got != r["full"]:
                diffs.append(f"full {r['g']!r} vs {r['a']!r} p={r.get('p')}: {got} != {r['full']}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--recorded", type=Path)
    c.add_argument("--out", type=Path, required=True)
    v = sub.add_parser("verdicts")
    v.add_argument("corpus", type=Path)
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--no-full", action="store_true")
    k = sub.add_parser("check")
    k.add_argument("verdicts", type=Path)
    k.add_argument("--no-full", action="store_true")
    s = sub.add_parser("sample")
    s.add_argument("verdicts", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--cases", type=int, default=3000)
    s.add_argument("--full", type=int, default=60)
    args = ap.parse_args()
    if args.cmd == "corpus":
        cases, prompts = corpus(args.recorded)
        _write(args.out, cases + [{"prompt": p} for p in prompts])
        print(f"{len(cases)} cases, {len(prompts)} prompts -> {args.out}")
    elif args.cmd == "verdicts":
        rows = _load(args.corpus)
        t0 = time.perf_counter()
        out = with_verdicts([r for r in rows if "g" in r], [r["prompt"] for r in rows if "prompt" in r], not args.no_full)
        _write(args.out, out)
        print(f"{len(out)} rows in {time.perf_counter() - t0:.1f} s -> {args.out}")
    elif args.cmd == "check":
        rows = _load(args.verdicts)
        t0 = time.perf_counter()
        diffs = check(rows, not args.no_full)
        for d in diffs[:50]:
            print(d)
        print(f"{sum('g' in r for r in rows)} cases, {sum('full' in r for r in rows)} with a SymPy verdict, "
              f"{sum('prompt' in r for r in rows)} prompts: {len(diffs)} differences ({time.perf_counter() - t0:.1f} s)")
        return 1 if diffs else 0
    elif args.cmd == "sample":
        rows = _load(args.verdicts)
        rng = random.Random(18)
        with_full = [r for r in rows if "full" in r and r["full"][0] != "pool"]
        # the SymPy verdict is kept for --full cases only (it costs a worker's time in the test)
        cases = [{k: v for k, v in r.items() if k != "full"} for r in rows if "g" in r]
        forms = [r for r in cases if r.get("f")]  # rare in the corpus: a tenth of the sample at most
        keep = rng.sample(forms, min(args.cases // 10, len(forms)))
        rest = [r for r in cases if not r.get("f")]
        keep += rng.sample(rest, min(args.cases - len(keep), len(rest)))
        keep += rng.sample(with_full, min(args.full, len(with_full)))
        keep += [r for r in rows if "prompt" in r]
        _write(args.out, keep)
        print(f"{len(keep)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
