"""Held-out rise on multi-step word problems: outcome-only vs outcome + process supervision, two training seeds.

    .venv/bin/python bench/reasoning_rise.py                                   # both arms, seeds 0 1, 20 steps
    .venv/bin/python bench/reasoning_rise.py --arms outcome --seeds 0          # one run
    .venv/bin/python bench/reasoning_rise.py --report                          # the table from what --out holds

The task is ``examples/smollm2-multistep.yaml`` (``examples/data/multistep/``: word problems of 2 to 4
steps, graded by ``math`` on "The answer is N"). Arm ``outcome`` trains with that config; arm
``process`` adds the ``steps`` verifier as ``kind: process`` (per-token credit for each right ``a op b
= c`` step, on top of the same outcome advantages). Everything else is equal: model, prompts, group
size, learning rate, steps, training seed. Each trained model and the base model are evaluated by
``cohort eval`` with the config's own grader (``math`` only, so both arms are graded alike) on the
held-out rows, and on the first ``--gsm8k`` rows of GSM8K's test split put in the same chat format
(the real benchmark; a 135M model passes few of them).

**Resumable**: every piece (an evaluation, a training run) is skipped when its output is complete in
``--out``; a training run killed half way resumes from its last checkpoint (``run.save_every``).

Prints, per arm and training seed: pass@1 of the base and the trained model with standard errors
over rows (``--samples`` completions per row, sampling seed ``run.seed`` of the evaluation = 0), the
paired rise over rows, per step count (2, 3, 4) and on GSM8K, the steps, wall time and CPU-seconds of
training (the ``cohort train`` process and the verifier servers it started); and the reward curves
of both arms (``curves.json``, ``reasoning_rise.png``). A measurement, not a test: exit 0 without a rise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COHORT = [sys.executable, "-m", "cohort.cli"]
CONFIG = "examples/smollm2-multistep.yaml"
TEST = "examples/data/multistep/test.jsonl"
TRAIN = "examples/data/multistep/train.jsonl"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
ARMS = {
    "outcome": [],
    "process": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process}]",
                f"data.sources=[{{path: {TRAIN}, name: multistep, verifiers: [math, steps]}}]"],
}


def run(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run one cohort command (stdout to ``log``): (wall s, CPU s of it and its reaped children)."""
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    print("$", " ".join(cmd[2:]), flush=True)
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd[2:4])} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - t, cpu


def gsm8k_rows(limit: int, out: Path) -> Path:
    """The first ``limit`` GSM8K test rows as chats with the task's system message and worked example."""
    sys.path.insert(0, str(ROOT / "examples" / "data" / "multistep"))  # the generator's prompt, also under PYTHONSAFEPATH
    from generate import EXAMPLE, SYSTEM  # noqa: E402

    path = out / "gsm8k-test.jsonl"
    with open(GSM8K) as f, open(path, "w") as w:
        for i, line in enumerate(f):
            if i == limit:
                break
            row = json.loads(line)
            turns = [("system", SYSTEM), ("user", EXAMPLE[0]), ("assistant", EXAMPLE[1]), ("user", row["question"])]
            answer = row["answer"].split("####")[-1].strip().replace(",", "")
            w.write(json.dumps({"id": f"gsm8k-test/{i}", "answer": answer,
                                "messages": [{"role": r, "content": c} for r, c in turns]}) + "\n")
    return path


def evaluate(args, model: Path | None, sources: list[tuple[str, str]], out: Path) -> None:
    """``cohort eval --json`` of ``model`` (None: the base) on ``sources`` into ``out``, unless already there."""
    if out.exists() and out.stat().st_size:
        return
    cmd = [*COHORT, "eval", "-c", CONFIG, "-n", str(args.samples), "--batch-prompts", "16", "--json",
           "data.sources=" + json.dumps([{"path": p, "name": n} for p, n in sources]), "run.seed=0"]
    if model is not None:
        cmd += ["--model", str(model)]
    tmp = out.with_suffix(".partial")
    run(cmd, tmp)
    tmp.rename(out)


def train(args, arm: str, seed: int, folder: Path) -> dict:
    """One training run (resumed from its checkpoint when one is there); its wall and CPU seconds."""
    timing = folder / "timing.json"
    if (folder / "final").exists() and timing.exists():
        return json.loads(timing.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    earlier = json.loads(timing.read_text()) if timing.exists() else {"wall_s": 0.0, "cpu_s": 0.0}
    wall, cpu = run([*COHORT, "train", "-c", CONFIG, f"run.output_dir={folder}", f"run.max_steps={args.steps}",
                     f"run.seed={seed}", "run.resume=true", "run.save_every=5", "run.progress=false", "run.plot=false",
                     *ARMS[arm]], folder / "train.log")
    spent = {"wall_s": earlier["wall_s"] + wall, "cpu_s": earlier["cpu_s"] + cpu}
    timing.write_text(json.dumps(spent))
    return spent


def rows_of(path: Path) -> list[dict]:
    return [r for line in path.read_text().splitlines() if line.strip() and "id" in (r := json.loads(line))]


def group_of(row_id: str) -> str:
    """'ms-test/5/op3' -> 'op3'; 'gsm8k-test/7' -> 'gsm8k'."""
    return "gsm8k" if row_id.startswith("gsm8k") else row_id.rsplit("/", 1)[-1]


def per_row(rollouts: list[dict]) -> dict[str, float]:
    by_row: dict[str, list[bool]] = defaultdict(list)
    for r in rollouts:
        if r["status"] == "ok":
            by_row[r["id"]].append(bool(r["passed"]))
    return {k: sum(v) / len(v) for k, v in by_row.items() if v}


def mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan)


def curve(folder: Path) -> list[float | None]:
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    return [r.get("reward/math") for r in map(json.loads, path.read_text().splitlines()) if "step" in r]


def report(args, out: Path) -> None:
    base_file = out / "base.jsonl"
    if not base_file.exists():
        sys.exit(f"error: {base_file}: no base evaluation yet (run without --report)")
    base = per_row(rows_of(base_file))
    groups = sorted({group_of(k) for k in base})
    print(f"\nheld-out: {TEST} ({args.samples} samples per row) and {args.gsm8k} GSM8K test rows; "
          f"{args.steps} GRPO steps of {CONFIG}")
    head = " ".join(f"{g:>14}" for g in groups)
    print(f"{'model':18} {'held-out pass@1':>16} {'paired rise':>16} {head} {'train wall s':>12} {'train CPU s':>11}")

    def line(name: str, rates: dict[str, float], rise: str, timing: dict | None) -> None:
        cells = []
        for g in groups:
            m, se = mean_se([v for k, v in rates.items() if group_of(k) == g])
            cells.append(f"{m:.3f}+-{se:.3f}".rjust(14))
        held = [v for k, v in rates.items() if group_of(k) != "gsm8k"]
        m, se = mean_se(held)
        t = f"{timing['wall_s']:12.0f} {timing['cpu_s']:11.0f}" if timing else f"{'':12} {'':11}"
        print(f"{name:18} {f'{m:.3f}+-{se:.3f}':>16} {rise:>16} {' '.join(cells)} {t}")

    line("base", base, "", None)
    curves: dict[str, dict[int, list]] = defaultdict(dict)
    for arm in args.arms:
        for seed in args.seeds:
            folder = out / arm / f"seed{seed}"
            curves[arm][seed] = curve(folder / "train")
            result = folder / "trained.jsonl"
            if not result.exists():
                print(f"{arm + ' s' + str(seed):18} (not run yet)")
                continue
            rates = per_row(rows_of(result))
            diffs = [rates[k] - base[k] for k in base if k in rates and group_of(k) != "gsm8k"]
            m, se = mean_se(diffs)
            line(f"{arm} s{seed}", rates, f"{m:+.3f}+-{se:.3f}", json.loads((folder / "train" / "timing.json").read_text()))
    (out / "curves.json").write_text(json.dumps(curves))
    print("\nreward/math per window of 5 steps (mean over the window), per arm and seed:")
    for arm, by_seed in curves.items():
        for seed, c in by_seed.items():
            windows = [statistics.fmean(v for v in c[i:i + 5] if v is not None) for i in range(0, len(c), 5)
                       if any(v is not None for v in c[i:i + 5])]
            print(f"  {arm:8} s{seed}: " + " ".join(f"{w:.3f}" for w in windows))
    plot(curves, out / "reasoning_rise.png")


def plot(curves: dict[str, dict[int, list]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(curves)), figsize=(6 * max(1, len(curves)), 4), sharey=True, squeeze=False)
    for ax, (arm, by_seed) in zip(axes[0], curves.items()):
        for seed, c in by_seed.items():
            ax.plot(range(1, len(c) + 1), [math.nan if v is None else v for v in c], lw=1, label=f"seed {seed}")
        ax.set_title(arm)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    axes[0][0].set_ylabel("training reward/math (final answer right)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds (run.seed)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--samples", type=int, default=4, help="completions per held-out row")
    ap.add_argument("--gsm8k", type=int, default=64, help="GSM8K test rows also evaluated (0: none)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "reasoning-rise")
    ap.add_argument("--report", action="store_true", help="only print the table of what --out holds")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        return report(args, args.out)
    sources = [(TEST, "multistep-test")]
    if args.gsm8k:
        if not GSM8K.exists():
            sys.exit(f"error: {GSM8K}: no such file (--gsm8k 0 leaves GSM8K out)")
        sources.append((str(gsm8k_rows(args.gsm8k, args.out)), "gsm8k-test"))
    evaluate(args, None, sources, args.out / "base.jsonl")
    for seed in args.seeds:
        for arm in args.arms:
            folder = args.out / arm / f"seed{seed}"
            train(args, arm, seed, folder / "train")
            evaluate(args, folder / "train" / "final", sources, folder / "trained.jsonl")
            report(args, args.out)


if __name__ == "__main__":
    main()
