"""Off-policy correction of the asynchronous pipeline, measured: the decoupled objective
(``rollout.is_correction=token``: clip against the learner's proximal policy, weight by the truncated
pi_prox / pi_behaviour) against naive off-policy PPO (``none``: clip against the behaviour policy), at
``rollout.max_staleness`` 1 and 4, on the embedded task with the same seed and number of steps.

On this task generation outpaces the learner, so the pipeline runs as far ahead as its admission bound lets
it and consumed groups are about k versions old (the measured mean is printed next to each result).

    .venv/bin/python bench/async_correction.py [--steps 80] [--seeds 0 1] [--out /tmp/async_correction]

Prints, per (staleness, correction): the mean reward of the last 10 steps per seed, its mean over seeds,
and the mean consumed staleness.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def run(out: Path, steps: int, seed: int, staleness: int, correction: str) -> list[dict]:
    folder = out / f"k{staleness}_{correction}_s{seed}"
    cmd = [sys.executable, "-m", "cohort.cli", "train", f"run.output_dir={folder}", f"run.max_steps={steps}",
           f"run.seed={seed}", "run.target_reward=null", "run.resume=false", "run.tensorboard=false",
           "run.plot=false", "run.progress=false", f"rollout.max_staleness={staleness}",
           f"rollout.is_correction={correction}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd[3:])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--staleness", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--out", type=Path, default=Path("/tmp/async_correction"))
    args = parser.parse_args()
    report = {}
    print(f"{'staleness':>9} {'correction':>10} {'final reward per seed':>28} {'mean':>6} {'consumed staleness':>18}")
    for k in args.staleness:
        for correction in ("token", "none"):
            finals, lags = [], []
            for seed in args.seeds:
                records = run(args.out, args.steps, seed, k, correction)
                finals.append(statistics.fmean(r["reward/mean"] for r in records[-10:]))
                lags += [r["async/staleness_mean"] for r in records[k:]]
            report[f"k{k}_{correction}"] = {"final": finals, "mean": statistics.fmean(finals),
                                            "staleness": statistics.fmean(lags)}
            print(f"{k:>9} {correction:>10} {' '.join(f'{f:.3f}' for f in finals):>28} "
                  f"{statistics.fmean(finals):>6.3f} {statistics.fmean(lags):>18.2f}", flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
