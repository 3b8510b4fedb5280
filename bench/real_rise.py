"""A held-out rise on a real model: ``cohort eval`` of the base, N GRPO steps on the CPU, ``cohort eval`` again.

Both evaluations use the same held-out rows (``--test``, never in the training rows) and the same number
of samples per row; each is run with several sampling seeds (``run.seed``), so the difference between two
evaluations of the *same* model gives the run-to-run noise band next to the rise. Every figure comes from
the ``--json`` rollouts that ``cohort eval`` prints (one object per rollout), so the table can be redone
from the files left in ``--out``:

- per task source and evaluation: mean reward, pass@1 (fraction of rollouts that pass; the mean over rows
  of each row's pass rate), its standard error over rows, the truncated fraction, and the fraction of
  passing rollouts whose text does not contain the reference answer (a check against reward hacks such
  as echoing the question's expression, which a math verifier may accept), and pass@1 counting only the
  passes that state the answer (rollouts pooled);
- the rise: mean pass@1 after minus before (seeds pooled), with a *paired* standard error over rows
  (each row's pass rate after minus before), and the noise band: the largest gap between two seeds of
  one model.

    .venv/bin/python bench/real_rise.py                        # examples/smollm2-add.yaml, 30 steps, seeds 0 1
    .venv/bin/python bench/real_rise.py --steps 20 --samples 4 --seeds 0
    .venv/bin/python bench/real_rise.py --reuse                # skip the evaluations and training already done in --out
    .venv/bin/python bench/real_rise.py --config examples/smollm2-tools.yaml --test examples/data/mul-tools/test.jsonl \
        --source-name mul-test --steps 20 --samples 4 --limit 32 --batch-prompts 8 --without-tools   # with the tool

Prints the before/after table; exit 0 also when there is no rise (it is a measurement, not a test).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COHORT = [sys.executable, "-m", "cohort.cli"]


def run(cmd: list[str], log: Path) -> float:
    """Run one cohort command (stdout to ``log``), return its wall time; a failure stops the bench."""
    t = time.perf_counter()
    print("$", " ".join(cmd[2:]), flush=True)
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd[2:4])} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return time.perf_counter() - t


def evaluate(args: argparse.Namespace, model: str | None, seed: int, out: Path, extra: tuple[str, ...] = ()) -> float:
    if args.reuse and out.exists() and out.stat().st_size:
        return 0.0
    cmd = [*COHORT, "eval", "-c", args.config, "-n", str(args.samples), "--batch-prompts", str(args.batch_prompts),
           "--json", f"data.sources=[{json.dumps({'path': args.test, 'name': args.source_name})}]",
           f"run.seed={seed}", *extra]
    if model is not None:
        cmd += ["--model", model]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    return run(cmd, out)


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def answers(test: Path) -> dict[str, str]:
    out = {}
    for i, line in enumerate(test.read_text().splitlines()):
        if line.strip():
            row = json.loads(line)
            out[str(row.get("id", i))] = str(row.get("answer", ""))
    return out


def per_row_pass(rollouts: list[dict]) -> dict[str, float]:
    """Row id -> fraction of its usable rollouts that passed."""
    by_row: dict[str, list[bool]] = defaultdict(list)
    for r in rollouts:
        if r["status"] == "ok":
            by_row[r["id"]].append(bool(r["passed"]))
    return {k: sum(v) / len(v) for k, v in by_row.items() if v}


def summary(rollouts: list[dict], gold: dict[str, str]) -> dict:
    ok = [r for r in rollouts if r["status"] == "ok"]
    rates = list(per_row_pass(rollouts).values())
    passed = [r for r in ok if r["passed"]]
    no_text = [r for r in passed if gold.get(r["id"]) and gold[r["id"]] not in r["completion"]]
    return {
        "rows": len(rates), "rollouts": len(rollouts), "usable": len(ok),
        "reward": statistics.fmean(r["reward"] for r in ok) if ok else math.nan,
        "pass@1": statistics.fmean(rates) if rates else math.nan,
        "se": statistics.stdev(rates) / math.sqrt(len(rates)) if len(rates) > 1 else math.nan,
        "truncated": sum(r["truncated"] for r in rollouts) / len(rollouts) if rollouts else math.nan,
        "pass_without_answer_text": len(no_text) / len(passed) if passed else 0.0,
        "pass@1_stated": (len(passed) - len(no_text)) / len(ok) if ok else math.nan,
    }


def paired_rise(before: list[list[dict]], after: list[list[dict]]) -> tuple[float, float, int]:
    """Mean over rows of (pass rate after - pass rate before), seeds pooled, and its standard error."""
    def pooled(runs: list[list[dict]]) -> dict[str, float]:
        return per_row_pass([r for rs in runs for r in rs])
    b, a = pooled(before), pooled(after)
    diffs = [a[k] - b[k] for k in b if k in a]
    if len(diffs) < 2:
        return math.nan, math.nan, len(diffs)
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="examples/smollm2-add.yaml")
    ap.add_argument("--test", default="examples/data/add-mini/test.jsonl", help="held-out rows (JSONL)")
    ap.add_argument("--source-name", default="add-test")
    ap.add_argument("--steps", type=int, default=30, help="GRPO steps")
    ap.add_argument("--samples", type=int, default=8, help="completions per held-out row")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="sampling seeds of each evaluation")
    ap.add_argument("--limit", type=int, default=None, help="only the first N held-out rows")
    ap.add_argument("--batch-prompts", type=int, default=16)
    ap.add_argument("--out", default="runs/real-rise")
    ap.add_argument("--reuse", action="store_true", help="keep evaluations and the trained model found in --out")
    ap.add_argument("--train-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra override of the training run (repeatable), e.g. rollout.max_staleness=1")
    ap.add_argument("--without-tools", action="store_true",
                    help="a config with tools: also evaluate both models with rollout.max_turns=1 (no tool call "
                         "runs), with the first seed")
    args = ap.parse_args()
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    for p in (args.config, args.test):
        if not (ROOT / p).exists():
            sys.exit(f"error: {p}: no such file")
    walls: dict[str, float] = {}
    for seed in args.seeds:
        walls[f"eval base s{seed}"] = evaluate(args, None, seed, out / f"base-s{seed}.jsonl")
    final = out / "train" / "final"
    if not (args.reuse and final.exists()):
        walls["train"] = run([*COHORT, "train", "-c", args.config, f"run.output_dir={out / 'train'}",
                              f"run.max_steps={args.steps}", "run.resume=false", "run.progress=false", *args.train_arg],
                             out / "train.log")
    for seed in args.seeds:
        walls[f"eval trained s{seed}"] = evaluate(args, str(final), seed, out / f"trained-s{seed}.jsonl")
    runs_of = {"base": args.seeds, "trained": args.seeds}
    if args.without_tools:  # the first seed only: a reference level, not a rise
        runs_of |= {"base-notools": args.seeds[:1], "trained-notools": args.seeds[:1]}
        for kind, model in (("base", None), ("trained", str(final))):
            walls[f"eval {kind} without tools s{args.seeds[0]}"] = evaluate(
                args, model, args.seeds[0], out / f"{kind}-notools-s{args.seeds[0]}.jsonl", ("rollout.max_turns=1",))
    kinds = list(runs_of)

    gold = answers(ROOT / args.test)
    runs = {(kind, seed): rows_of(out / f"{kind}-s{seed}.jsonl") for kind in kinds for seed in runs_of[kind]}
    sources = sorted({r["source"] or "-" for rs in runs.values() for r in rs})
    print(f"\nheld-out rows: {args.test}, {args.samples} samples per row, sampling seeds {args.seeds}; "
          f"{args.steps} GRPO steps ({args.config}{''.join(' ' + a for a in args.train_arg)}); training "
          f"{walls.get('train', float('nan')):.0f} s")
    print(f"{'model':15} {'seed':>4} {'source':12} {'rows':>4} {'usable':>6} {'reward':>7} {'pass@1':>7} {'+-se':>6} "
          f"{'trunc':>6} {'pass w/o answer text':>20} {'pass@1 stating it':>17} {'tool calls':>10} {'tool err':>8}")
    for (kind, seed), rs in runs.items():
        for src in sources:
            picked = [r for r in rs if (r["source"] or "-") == src]
            s = summary(picked, gold)
            calls = sum(r.get("tool_calls", 0) for r in picked)
            errors = sum(len(r.get("tool_errors", ())) for r in picked)
            print(f"{kind:15} {seed:>4} {src:12} {s['rows']:>4} {s['usable']:>6} {s['reward']:7.3f} {s['pass@1']:7.3f} "
                  f"{s['se']:6.3f} {s['truncated']:6.2f} {s['pass_without_answer_text']:20.2f} {s['pass@1_stated']:17.3f} "
                  f"{calls / max(1, len(picked)):10.2f} {errors / calls if calls else 0.0:8.3f}")
    for src in sources:
        pick = {k: [r for r in rs if (r["source"] or "-") == src] for k, rs in runs.items()}
        rise, se, n = paired_rise([pick["base", s] for s in args.seeds], [pick["trained", s] for s in args.seeds])
        noise = [abs(summary(pick[kind, a], gold)["pass@1"] - summary(pick[kind, b], gold)["pass@1"])
                 for kind in ("base", "trained") for i, a in enumerate(args.seeds) for b in args.seeds[i + 1:]]
        band = f"{max(noise):.3f}" if noise else "n/a (one seed)"
        print(f"\n{src}: pass@1 rise {rise:+.3f} +- {se:.3f} (paired over {n} rows, seeds pooled; "
              f"{rise / se if se else math.nan:.1f} standard errors); seed-to-seed gap of one model: {band}")
    print("wall: " + ", ".join(f"{k} {v:.0f}s" for k, v in walls.items() if v))


if __name__ == "__main__":
    main()
