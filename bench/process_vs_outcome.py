"""Outcome-only vs outcome + process supervision on the embedded task: same seeds, same steps.

    .venv/bin/python bench/process_vs_outcome.py --steps 200 --seeds 0 1 2 --out runs/process_vs_outcome

Arm ``outcome`` is the embedded default (``math`` 0.8 + ``arith`` format 0.2). Arm ``outcome+process``
adds the ``steps`` verifier as ``kind: process`` (weight ``--process-weight``): its step rewards give
per-token process advantages on top of the same outcome advantages; its own scalar reward stays out
of ``reward/mean``, so both arms' ``reward/mean`` is the same quantity. On the embedded task (``a+b=``
with a one-number answer) a completion has one step, the final answer: the process advantage then
lands on the answer's tokens only (not on the EOS after it), and rollouts without a number get none.
Compares the default reward (0.8 ``reward/math`` + 0.2 ``reward/arith``, which is ``reward/mean`` of the first
two arms) per window of steps, and writes a PNG with the curves side by side. The control arm
``outcome+steps-as-outcome`` adds the same ``steps`` judgement to the scalar reward instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "trainer" / "default.yaml"
DEFAULT_VERIFIERS = ('[{name: math, weight: 0.8}, {name: arith, weight: 0.2, options: {correct_weight: "0", '
                     'format_weight: "1", require_eos: "1"}}')


ARMS = {  # the verifiers each arm adds to the embedded default's
    "outcome": "",
    "outcome+process": ", {{name: steps, weight: {w}, kind: process}}",
    # control: the same judgement folded into the scalar reward (steps' scalar reward: the mean of its step rewards)
    "outcome+steps-as-outcome": ", {{name: steps, weight: {w}}}",
}


def arm_overrides(arm: str, seed: int, steps: int, out: Path, process_weight: float) -> list[str]:
    verifiers = DEFAULT_VERIFIERS + ARMS[arm].format(w=process_weight) + "]"
    return [f"scoring.verifiers={verifiers}", f"run.seed={seed}", f"run.max_steps={steps}", "run.target_reward=null",
            f"run.output_dir={out / arm / f'seed{seed}'}", "run.resume=false", "run.progress=false", "run.plot=false",
            "run.tensorboard=false"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--process-weight", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path("runs/process_vs_outcome"))
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=["outcome", "outcome+process"])
    parser.add_argument("--from-curves", type=Path, nargs="+", default=[],
                        help="report and plot the curves.json of earlier runs (merged) instead of training")
    args = parser.parse_args()
    if args.from_curves:
        curves = {}
        for path in args.from_curves:
            curves.update({arm: {int(s): c for s, c in by_seed.items()} for arm, by_seed in json.loads(path.read_text()).items()})
        args.out.mkdir(parents=True, exist_ok=True)
        report(curves, args.steps)
        plot(curves, args.out / "process_vs_outcome.png")
        return

    from cohort.trainer.config import load_config
    from cohort.trainer.train import run

    curves: dict[str, dict[int, list[float]]] = {}
    for arm in args.arms:
        for seed in args.seeds:
            cfg = load_config(DEFAULT_CONFIG, arm_overrides(arm, seed, args.steps, args.out, args.process_weight))
            records = run(cfg)
            curves.setdefault(arm, {})[seed] = [default_reward(r) for r in records]
            extra = {k: records[-1][k] for k in ("steps/per_rollout", "steps/rewarded_frac") if k in records[-1]}
            print(f"{arm:16s} seed {seed}: default reward at step {len(records)} = {curves[arm][seed][-1]:.3f} {extra}",
                  flush=True)
    (args.out / "curves.json").write_text(json.dumps(curves))  # --arms runs can be merged from these files
    report(curves, args.steps)
    plot(curves, args.out / "process_vs_outcome.png")


def default_reward(record: dict) -> float:
    """The embedded default's reward (0.8 math + 0.2 arith format), whatever else an arm adds to its sum:
    ``reward/mean`` of the outcome and outcome+process arms (a process verifier adds nothing to the sum)."""
    return 0.8 * record["reward/math"] + 0.2 * record["reward/arith"]


def report(curves: dict[str, dict[int, list[float]]], steps: int) -> None:
    windows = [(1, 25), (26, 50), (51, 100), (101, 150), (151, steps)]
    print("\nmean default reward (0.8 math + 0.2 arith) over seeds, by window of steps:")
    print(f"{'steps':>10s} " + " ".join(f"{arm:>16s}" for arm in curves))
    for lo, hi in windows:
        if lo > steps:
            break
        cells = []
        for arm in curves:
            values = [v for c in curves[arm].values() for v in c[lo - 1 : hi]]
            cells.append(f"{statistics.fmean(values):16.3f}" if values else f"{'-':>16s}")
        print(f"{lo:>4d}-{min(hi, steps):<5d} " + " ".join(cells))
    for arm, by_seed in curves.items():
        first = {seed: next((k + 1 for k in range(len(c) - 4) if statistics.fmean(c[k : k + 5]) >= 0.9), None)
                 for seed, c in by_seed.items()}
        print(f"{arm}: first step with a 5-step mean >= 0.9, per seed: {first}")


def plot(curves: dict[str, dict[int, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (arm, by_seed) in zip(axes, curves.items()):
        for seed, c in by_seed.items():
            ax.plot(range(1, len(c) + 1), c, lw=1, label=f"seed {seed}")
        ax.set_title(arm)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    axes[0].set_ylabel("0.8 math + 0.2 arith format")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
