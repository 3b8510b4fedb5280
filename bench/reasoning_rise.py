"""Held-out rise on reasoning tasks: multi-step word problems (outcome vs outcome + process) and code, two seeds.

    .venv/bin/python bench/reasoning_rise.py                                   # multistep: both arms, seeds 0 1, 20 steps
    .venv/bin/python bench/reasoning_rise.py --arms outcome --seeds 0          # one run
    .venv/bin/python bench/reasoning_rise.py --task code --out runs/code-rise  # the code task
    .venv/bin/python bench/reasoning_rise.py --report                          # the table from what --out holds

``--task multistep`` is ``examples/smollm2-multistep.yaml`` (``examples/data/multistep/``: word problems of
2 to 4 steps, graded by ``math`` on "The answer is N"). Arm ``outcome`` trains with that config; arm
``process`` adds the ``steps`` verifier as ``kind: process`` (per-token credit for each right ``a op b
= c`` step, on top of the same outcome advantages). Everything else is equal: model, prompts, group
size, learning rate, steps, training seed. Each trained model and the base model are evaluated by
``cohort eval`` with the config's own grader (``math`` only, so both arms are graded alike) on the
held-out rows, and on the first ``--bench-rows`` rows of GSM8K's test split put in the same chat format
(the real benchmark; a 135M model passes few of them).

``--task addsub`` is ``examples/smollm2-multistep-addsub.yaml``: the same stories at an easier level (adding and
taking away only, values up to 20), with a third arm ``grounded``: the ``steps`` process rewards with options
``grounded`` (a step counts only when it computes with the question's numbers or earlier right results) and
``answer_step: "false"`` (the final answer is left to ``math``), and an arm ``trl``: the outcome arm's config
trained by TRL 1.16's ``GRPOTrainer`` instead (``bench/reasoning_trl.py``, in ``.venv-peer``, created when missing as
``scripts/ci-trl`` does; the same model, rows, verifiers, group size, learning rate and steps), evaluated alike.
More arms (their comments in ``TASKS``): ``complete``, ``chain``, ``grounded-answer`` (other ``steps`` rules),
``outcome-ds`` (dynamic sampling), ``solution`` (process credit against each row's worked solution, the
``steps`` option ``solution``), ``partial`` (no process advantages: ``math`` + the share of the row's solution
written in place, one scalar reward) and ``trl-partial`` (that reward through TRL). For this task the table
adds the *solution steps* column: the share of each held-out row's worked solution the completions wrote in
place, answer aside.

``--task add`` is ``examples/smollm2-multistep-add.yaml``: the stories adding only (values up to 25), whose reward is
``math`` + the share of the row's worked solution written in place (arm ``partial``, the config: 8 prompts x 8 a
step), against ``outcome`` (``math`` alone), ``solution`` (process credit against the solution) and TRL (``trl``,
``trl-partial``); ``partial4``, ``outcome4`` and ``trl-partial4`` are the same at 4 prompts a step.

``--task code`` is ``examples/smollm2-code.yaml`` (``examples/data/code-functions/``: small functions, the
share of 4 hidden asserts passed in the sandbox as the reward; held-out functions never trained on).
Pass@1 counts a rollout that passes every hidden assert; the table also gives the share of hidden
asserts passed. Its real benchmark is HumanEval (the first ``--bench-rows`` problems, one completion
each at the config's temperature, 256 new tokens; prompts as the package gives them).

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
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
TASKS = {
    "multistep": {
        "config": "examples/smollm2-multistep.yaml", "test": "examples/data/multistep/test.jsonl",
        "arms": {
            "outcome": [],
            "process": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process}]",
                        "data.sources=[{path: examples/data/multistep/train.jsonl, name: multistep, "
                        "verifiers: [math, steps]}]"],
        },
        "bench": "gsm8k", "bench_rows": 64,
    },
    "addsub": {  # the same stories, adding and taking away only, values up to 20 (a level the base model partly does)
        "config": "examples/smollm2-multistep-addsub.yaml", "test": "examples/data/multistep/test-addsub.jsonl",
        "arms": {
            "outcome": [],
            "process": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process}]",
                        "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                        "verifiers: [math, steps]}]"],
            # per-step credit only for steps that compute with the question's numbers or earlier results, and
            # the final answer left to math (docs/reasoning.md: the plain process arm's length collapse)
            "grounded": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
                         "options: {grounded: 'true', answer_step: 'false'}}]",
                         "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                         "verifiers: [math, steps]}]"],
            # the outcome arm with dynamic sampling (DAPO): a group without signal is replaced by a new prompt's, up
            # to 4 times, so each update holds more groups that teach something (at base pass@1 ~6%, most do not)
            "outcome-ds": ["grpo.dynamic_sampling=true", "grpo.max_resample_rounds=4"],
            # grounded, and each of the question's numbers no right step used is a wrong step at the end: pays for
            # finishing the chain (the grounded arm learned one right step and a stop)
            "complete": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
                         "options: {grounded: 'true', answer_step: 'false', complete: 'true'}}]",
                         "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                         "verifiers: [math, steps]}]"],
            # complete, and connected: a right step whose result no later step uses earns nothing (the complete arm
            # learned side sums of the question's numbers, "6 + 4 = 10. 4 + 3 = 7. 3 + 3 = 6.")
            "chain": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
                      "options: {grounded: 'true', answer_step: 'false', complete: 'true', connected: 'true'}}]",
                      "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                      "verifiers: [math, steps]}]"],
            # the row's worked solution as the reference chain: a step earns credit only as the solution's step in
            # its place, and stopping short ends on a wrong step (the rule-based options above each invited a shortcut)
            "solution": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
                         "options: {answer_step: 'false'}}]",
                         "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                         "verifiers: [math, steps]}]"],
            # partial credit, no process advantages: math + the share of the row's worked solution written in place
            # (steps as kind outcome). The solution arm's per-token sums made one step and a stop the cheapest way
            "partial": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, "
                        "options: {answer_step: 'false'}}]",
                        "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                        "verifiers: [math, steps]}]"],
            # grounded with the answer step kept: a chain that stops early and guesses ends on a wrong step
            "grounded-answer": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, "
                                "kind: process, options: {grounded: 'true'}}]",
                                "data.sources=[{path: examples/data/multistep/train-addsub.jsonl, name: multistep, "
                                "verifiers: [math, steps]}]"],
            "trl": None,  # the outcome arm's config trained by TRL 1.16 (bench/reasoning_trl.py, in .venv-peer)
            # the partial arm through TRL (the same scalar reward: math + the share of the row's solution written in
            # place, each row's solution from its options column)
            "trl-partial": None,
        },
        "bench": "gsm8k", "bench_rows": 64,
    },
    "add": {  # the same stories, adding only, values up to 25: the chain is one pattern (add the next number)
        "config": "examples/smollm2-multistep-add.yaml", "test": "examples/data/multistep/test-add.jsonl",
        "arms": {
            # the config's reward, 8 prompts x 8 a step: math + the share of the row's worked solution written in place
            "partial": [],
            "outcome": ["scoring.verifiers=[{name: math, weight: 1.0}]",
                        "data.sources=[{path: examples/data/multistep/train-add.jsonl, name: multistep, "
                        "verifiers: [math]}]"],
            # the fifth attempt's 4 prompts a step (docs/reasoning.md): the two seeds fell into different shortcuts
            # in the first steps, when a step held one or two right answers
            "partial4": ["grpo.prompts_per_step=4"],
            "outcome4": ["grpo.prompts_per_step=4", "scoring.verifiers=[{name: math, weight: 1.0}]",
                         "data.sources=[{path: examples/data/multistep/train-add.jsonl, name: multistep, "
                         "verifiers: [math]}]"],
            # process credit against the row's worked solution, on top of math's outcome
            "solution": ["scoring.verifiers=[{name: math, weight: 1.0}, {name: steps, weight: 1.0, kind: process, "
                         "options: {answer_step: 'false'}}]"],
            "trl": None,  # the outcome arm trained by TRL 1.16 (bench/reasoning_trl.py, in .venv-peer)
            "trl-partial": None,  # the partial arm (the config) through TRL
            "trl-partial4": None,  # the partial4 arm through TRL
        },
        "bench": "gsm8k", "bench_rows": 64,
    },
    "code": {
        "config": "examples/smollm2-code.yaml", "test": "examples/data/code-functions/test.jsonl",
        "arms": {"outcome": []},
        "bench": "humaneval", "bench_rows": 164,
    },
}


def run(cmd: list[str], log: Path, spent=None) -> tuple[float, float]:
    """Run one cohort command (stdout to ``log``): (wall s, CPU s of it and its reaped children). On failure,
    ``spent(wall, cpu)`` is called before exiting (a killed training run's seconds still count when resumed)."""
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    print("$", " ".join(cmd[2:]), flush=True)
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        if spent is not None:
            spent(time.perf_counter() - t, cpu)
        sys.exit(f"error: {' '.join(cmd[2:4])} failed with exit code {proc.returncode}: {proc.stderr.strip()[-2000:]}")
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


def evaluations(args) -> dict[str, tuple[list[str], list[str]]]:
    """File stem -> (data.sources JSON overrides, extra eval arguments) of the evaluations of one model."""
    task = TASKS[args.task]
    held = [{"path": task["test"], "name": f"{args.task}-test"}]
    if not args.bench_rows:
        return {"": ([json.dumps(held)], [])}
    if task["bench"] == "gsm8k":  # same settings as the held-out rows: one evaluation
        if not GSM8K.exists():
            sys.exit(f"error: {GSM8K}: no such file (--bench-rows 0 leaves GSM8K out)")
        rows = {"path": str(gsm8k_rows(args.bench_rows, args.out)), "name": "gsm8k-test"}
        return {"": ([json.dumps([*held, rows])], [])}
    humaneval = [{"humaneval": True, "name": "humaneval", "limit": args.bench_rows}]  # its own prompts and budget
    return {"": ([json.dumps(held)], []),
            "-humaneval": ([json.dumps(humaneval)], ["-n", "1", "rollout.max_completion_length=256"])}


def evaluate(args, model: Path | None, stem: Path) -> None:
    """``cohort eval --json`` of ``model`` (None: the base) into ``<stem><kind>.jsonl``, unless already there."""
    for kind, (sources, extra) in evaluations(args).items():
        out = stem.with_name(stem.name + kind + ".jsonl")
        if out.exists() and out.stat().st_size:
            continue
        cmd = [*COHORT, "eval", "-c", TASKS[args.task]["config"], "-n", str(args.samples), "--batch-prompts", "16",
               "--json", "data.sources=" + sources[0], "run.seed=0", *extra]
        if args.task in ("multistep", "addsub", "add"):  # every model graded by math alone, whatever it trained on
            cmd.append("scoring.verifiers=[{name: math, weight: 1.0}]")
        if model is not None:
            cmd += ["--model", str(model)]
        tmp = out.with_suffix(".partial")
        run(cmd, tmp)
        tmp.rename(out)


def train(args, arm: str, seed: int, folder: Path) -> dict:
    """Train to ``--steps`` (resumed from the last checkpoint when one is there: a longer ``--steps`` trains
    on); its wall and CPU seconds over every invocation. A run trained further loses its old evaluations."""
    timing = folder / "timing.json"
    if (folder / "final").exists() and timing.exists() and len(curve(folder, "")) >= args.steps:
        return json.loads(timing.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    task = TASKS[args.task]
    resumes = task["arms"][arm] is not None  # a killed TRL run starts over: its seconds do not count
    earlier = json.loads(timing.read_text()) if timing.exists() and resumes else {"wall_s": 0.0, "cpu_s": 0.0}
    if not resumes:  # TRL on the same config (bench/reasoning_trl.py)
        sys.path.insert(0, str(ROOT / "bench"))
        from trainer_vs_trl_smollm2 import ensure_peer_venv  # noqa: E402

        cmd = [str(ensure_peer_venv()), str(ROOT / "bench" / "reasoning_trl.py"), "-c", task["config"],
               "--out", str(folder), "--seed", str(seed), "--steps", str(args.steps),
               *task["arms"].get(arm.partition("-")[2] or "outcome", [])]  # trl-X: arm X's overrides
    else:
        cmd = [*COHORT, "train", "-c", task["config"], f"run.output_dir={folder}", f"run.max_steps={args.steps}",
               f"run.seed={seed}", "run.resume=true", "run.save_every=5", "run.keep_checkpoints=1", "run.progress=false",
               "run.plot=false", *task["arms"][arm]]

    def record(wall: float, cpu: float) -> dict:
        total = {"wall_s": earlier["wall_s"] + wall, "cpu_s": earlier["cpu_s"] + cpu}
        timing.write_text(json.dumps(total))
        return total

    total = record(*run(cmd, folder / "train.log", record))
    for old in folder.parent.glob("trained*.jsonl"):
        old.unlink()  # evaluations of the model before this training
    return total


def rows_of(stem: Path) -> list[dict]:
    """The rollouts of every evaluation of one model (``<stem>.jsonl``, ``<stem>-humaneval.jsonl``)."""
    out = []
    for path in sorted(stem.parent.glob(stem.name + "*.jsonl")):
        out += [r for line in path.read_text().splitlines() if line.strip() and "id" in (r := json.loads(line))]
    return out


def group_of(row_id: str) -> str:
    """'ms-test/5/op3' -> 'op3'; 'cf-test/2/new-kind' -> 'new-kind'; 'gsm8k-test/7' -> 'gsm8k'; HumanEval/3 -> 'humaneval'."""
    if row_id.startswith("gsm8k"):
        return "gsm8k"
    if row_id.startswith("HumanEval"):
        return "humaneval"
    return row_id.rsplit("/", 1)[-1]


BENCHES = ("gsm8k", "humaneval")


def per_row(rollouts: list[dict], key: str = "passed") -> dict[str, float]:
    """Row id -> mean of ``key`` (passed: pass rate; reward) over its usable rollouts."""
    by_row: dict[str, list[float]] = defaultdict(list)
    for r in rollouts:
        if r["status"] == "ok":
            by_row[r["id"]].append(float(r[key]))
    return {k: sum(v) / len(v) for k, v in by_row.items() if v}


def mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan)


def curve(folder: Path, name: str) -> list[float | None]:
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    from cohort.trainer.metrics import read  # noqa: E402  (the trainer's reader: a torn last line is left out)

    rows = [r for r in read(path) if "step" in r]
    # TRL logs its summed "reward" and each verifier's mean as cohort/<name>/mean (bench/reasoning_trl.py)
    return [r.get(f"reward/{name}", r.get(f"cohort/{name}/mean", r.get("reward"))) for r in rows]


def solution_share(rollouts: list[dict], test: Path) -> dict[str, float]:
    """Row id -> the mean share of its worked solution's steps each completion wrote in place (``steps`` with the
    row's option ``solution``): how much of the chain a model gets right, answer aside. Rows without one: none."""
    from cohort.verifiers.base import GroupRequest, Reference, Rollout, VerifyContext  # noqa: E402
    from cohort.verifiers.steps import StepsVerifier  # noqa: E402

    options = {}
    for line in (ROOT / test).read_text().splitlines():
        row = json.loads(line)
        if "solution" in row.get("options", {}).get("steps", {}):
            options[row["id"]] = row["options"]["steps"]
    shares, verifier = [], StepsVerifier()
    for r in rollouts:
        if r["status"] == "ok" and r["id"] in options:
            group = GroupRequest("steps", (Rollout(0, r["completion"]),), Reference(), options=options[r["id"]])
            (scored,) = verifier.verify_group(group, VerifyContext())
            shares.append({"id": r["id"], "status": "ok", "share": scored.components["solution_frac"]})
    return per_row(shares, "share")


def report(args, out: Path) -> None:
    task = TASKS[args.task]
    base_rollouts = rows_of(out / "base")
    if not base_rollouts:
        sys.exit(f"error: {out}/base.jsonl: no base evaluation yet (run without --report)")
    base = per_row(base_rollouts)
    groups = sorted({group_of(k) for k in base}, key=lambda g: (g in BENCHES, g))
    print(f"\nheld-out: {task['test']} ({args.samples} samples per row), benchmark rows: {args.bench_rows}; "
          f"{args.steps} GRPO steps of {task['config']}; pass@1 +- standard error over rows")
    head = " ".join(f"{g:>14}" for g in groups)
    tests = "hidden asserts" if args.task == "code" else "solution steps"
    print(f"{'model':14} {'held-out pass@1':>16} {'paired rise':>16} {tests:>14} {head} {'steps':>5} "
          f"{'train wall s':>12} {'train CPU s':>11}")

    def line(name: str, rollouts: list[dict], rise: str, timing: dict | None, steps: str) -> None:
        rates = per_row(rollouts)
        cells = []
        for g in groups:
            m, se = mean_se([v for k, v in rates.items() if group_of(k) == g])
            cells.append(f"{m:.3f}+-{se:.3f}".rjust(14))
        m, se = mean_se([v for k, v in rates.items() if group_of(k) not in BENCHES])
        share = ""
        if args.task == "code":  # the reward is the share of hidden asserts passed
            sm, sse = mean_se([v for k, v in per_row(rollouts, "reward").items() if group_of(k) not in BENCHES])
            share = f"{sm:.3f}+-{sse:.3f}"
        elif shares := solution_share(rollouts, Path(task["test"])):  # the worked chain's steps written in place
            sm, sse = mean_se(list(shares.values()))
            share = f"{sm:.3f}+-{sse:.3f}"
        t = f"{timing['wall_s']:12.0f} {timing['cpu_s']:11.0f}" if timing else f"{'':12} {'':11}"
        print(f"{name:14} {f'{m:.3f}+-{se:.3f}':>16} {rise:>16} {share:>14} {' '.join(cells)} {steps:>5} {t}")

    line("base", base_rollouts, "", None, "0")
    curves: dict[str, dict[int, list]] = defaultdict(dict)
    reward_name = "code" if args.task == "code" else "math"
    for arm in args.arms:
        for seed in args.seeds:
            folder = out / arm / f"seed{seed}"
            curves[arm][seed] = curve(folder / "train", reward_name)
            rollouts = rows_of(folder / "trained")
            if not rollouts or not (folder / "train" / "timing.json").exists():
                print(f"{arm + ' s' + str(seed):14} (not run yet)")
                continue
            rates = per_row(rollouts)
            diffs = [rates[k] - base[k] for k in base if k in rates and group_of(k) not in BENCHES]
            m, se = mean_se(diffs)
            line(f"{arm} s{seed}", rollouts, f"{m:+.3f}+-{se:.3f}",
                 json.loads((folder / "train" / "timing.json").read_text()), str(len(curves[arm][seed])))
    (out / "curves.json").write_text(json.dumps(curves))
    print(f"\ntraining reward/{reward_name} per window of 5 steps (mean over the window), per arm and seed:")
    for arm, by_seed in curves.items():
        for seed, c in by_seed.items():
            windows = [statistics.fmean(v for v in c[i:i + 5] if v is not None) for i in range(0, len(c), 5)
                       if any(v is not None for v in c[i:i + 5])]
            print(f"  {arm:8} s{seed}: " + " ".join(f"{w:.3f}" for w in windows))
    plot(curves, out / "reasoning_rise.png", reward_name)


def plot(curves: dict[str, dict[int, list]], path: Path, reward_name: str) -> None:
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
    axes[0][0].set_ylabel(f"training reward/{reward_name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=list(TASKS), default="multistep")
    ap.add_argument("--arms", nargs="+", default=None,
                    help="default: every arm of the task but the trl ones (multistep: outcome process)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds (run.seed)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--samples", type=int, default=4, help="completions per held-out row")
    ap.add_argument("--bench-rows", type=int, default=None,
                    help="rows of the real benchmark also evaluated (GSM8K test: 64; HumanEval: 164; 0: none)")
    ap.add_argument("--out", type=Path, default=None, help="default: runs/<task>-rise")
    ap.add_argument("--report", action="store_true", help="only print the table of what --out holds")
    args = ap.parse_args()
    task = TASKS[args.task]
    args.arms = args.arms or [a for a in task["arms"] if not a.startswith("trl")]
    if unknown := [a for a in args.arms if a not in task["arms"]]:
        ap.error(f"--arms: {', '.join(unknown)}: not an arm of {args.task} (its arms: {', '.join(task['arms'])})")
    args.bench_rows = task["bench_rows"] if args.bench_rows is None else args.bench_rows
    args.out = (args.out or ROOT / "runs" / f"{args.task}-rise").resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        return report(args, args.out)
    evaluate(args, None, args.out / "base")
    for seed in args.seeds:
        for arm in args.arms:
            folder = args.out / arm / f"seed{seed}"
            train(args, arm, seed, folder / "train")
            evaluate(args, folder / "train" / "final", folder / "trained")
            report(args, args.out)


if __name__ == "__main__":
    main()
