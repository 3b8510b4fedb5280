#!/usr/bin/env python
"""Cohort's GRPO learner vs TRL 1.16 GRPOTrainer on the same tiny offline workload, in the same run.

Workload: ``../shared/bench/trl_workload`` (WORKLOAD.md): the same checkpoint, tokenizer, 256 prompts,
prompt order (randperm seed 0), 8 prompts x G=8 per step, temperature 1, 32 new tokens, beta 0.04 (k3,
no bias correction), epsilon 0.2, loss_type grpo, group scaling (unbiased std, eps 1e-4), AdamW lr 1e-4
constant, grad clip 1.0, fp32, 2 torch threads, 20 steps. Rewards are WORKLOAD.md section 4
(``correct + format_bonus``): TRL computes them in-process with its plain-Python functions; Cohort gets
them from the ``arith`` verifier service (``correct_weight=1, format_weight=0.1``) on loopback, started
by ``cohort train`` itself (its RSS is reported separately: it is another process).

Cohort runs the update in micro-batches of at most 32 rows by default (``--micro-batch``), cut by
length where that saves padded tokens, with the rows of one prompt packed into one sequence (prompt
once, tree attention mask): the same gradient (the normaliser is computed over the whole batch, as the
workload's 16 x 4 side run), less activation memory. Only rows that enter the loss are forwarded
(zero-variance groups carry no signal).

TRL runs in its own venv ``.venv-peer`` (created when missing: torch==2.13.0 first, then trl==1.16.0).
Each repeat runs TRL then Cohort back to back, each under ``/usr/bin/time -v``.

Prints, per trainer: seconds per step (median of steps 3-20, step end to step end), peak RSS, reward at
step 20 and the mean reward over steps 16-20, then the ratios Cohort / TRL.

    python bench/trainer_vs_trl.py [--repeats 2] [--num-iterations 1] [--workload ../shared/bench/trl_workload]

``--model smollm2`` runs the real-model comparison instead (SmolLM2-135M-Instruct on GSM8K, per-phase
times): ``bench/trainer_vs_trl_smollm2.py``, which takes the other arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOAD = (ROOT / ".." / "shared" / "bench" / "trl_workload").resolve()
sys.path.insert(0, str(ROOT / "bench"))
from trainer_vs_trl_smollm2 import ensure_peer_venv  # noqa: E402  (one TRL venv: .venv-peer, this checkout in it)


def timed(cmd: list[str], env: dict[str, str], log: Path) -> int:
    """Run under /usr/bin/time -v; return the peak RSS in KiB ('Maximum resident set size')."""
    with open(log, "w") as f:
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    text = log.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed ({proc.returncode}); log {log}:\n{text[-3000:]}")
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))


def cohort_config(workload: Path, out: Path, mu: int, threads: int = 2, micro_batch: int | None = 32) -> str:
    cfg = {
        "model": {"path": str(workload / "model"), "tokenizer_path": str(workload / "tokenizer")},
        "data": {"path": str(workload / "data" / "train.jsonl"), "shuffle_seed": 0},
        "scoring": {"verifiers": [{"name": "arith", "weight": 1.0,
                                   "options": {"correct_weight": "1.0", "format_weight": "0.1"}}]},
        "grpo": {"prompts_per_step": 8, "num_generations": 8, "beta": 0.04, "epsilon": 0.2, "loss_type": "grpo",
                 "scale_rewards": "group", "adv_eps": 1e-4, "num_iterations": mu, "mask_truncated_completions": False},
        "rollout": {"engine": "transformers", "temperature": 1.0, "top_p": 1.0, "max_completion_length": 32},
        "optim": {"learning_rate": 1e-4, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
                  "adam_epsilon": 1e-8, "max_grad_norm": 1.0, "lr_scheduler_type": "constant",
                  "micro_batch_size": micro_batch},
        "run": {"output_dir": str(out), "max_steps": 20 // mu, "seed": 0, "torch_threads": threads, "resume": False,
                "tensorboard": False, "progress": False, "plot": False},
    }
    return json.dumps(cfg)  # JSON is YAML


def run_trl(python: Path, workload: Path, tmp: Path, tag: str, mu: int, env: dict[str, str], threads: int) -> dict:
    rss = timed([str(python), str(workload / "trl_bench.py"), "--workload", str(workload), "--num-iterations", str(mu),
                 "--threads", str(threads), "--tag", tag, "--out-dir", str(tmp), "--quiet"], env, tmp / f"{tag}.log")
    result = json.loads((tmp / f"{tag}.json").read_text())
    steps = result["per_step"]
    rewards = []  # mu=2: TRL logs a reward on generation rounds only; its second step trains on the same round
    for s in steps:
        rewards.append(rewards[-1] if s["reward"] is None and rewards else s["reward"])
    return {"s_per_step": statistics.median(s["wall_s"] for s in steps if s["step"] >= 3),
            "peak_rss_mib": rss / 1024, "reward_20": rewards[19], "reward_16_20": statistics.mean(rewards[15:20]),
            "rewards": rewards, "foreign_cpu": result["summary"]["foreign_cpu_frac_measured"]}


def run_cohort(workload: Path, tmp: Path, tag: str, mu: int, env: dict[str, str], threads: int,
               micro_batch: int | None) -> dict:
    out = tmp / tag
    cfg_path = tmp / f"{tag}.yaml"
    cfg_path.write_text(cohort_config(workload, out, mu, threads, micro_batch))
    rss = timed([sys.executable, "-m", "cohort.cli", "train", "--config", str(cfg_path)], env, tmp / f"{tag}.log")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # mu=2: one record per generation round holding two optimizer steps; report per optimizer step
    elapsed = [r["time/elapsed_s"] for r in records]
    walls = [b - a for a, b in zip([0.0, *elapsed], elapsed)]
    per_opt = [w / mu for w in walls]
    rewards = [r["reward/mean"] for r in records for _ in range(mu)]
    first_measured = 3 // mu if mu > 1 else 3
    return {"s_per_step": statistics.median(per_opt[first_measured - 1 :]), "peak_rss_mib": rss / 1024,
            "reward_20": rewards[19], "reward_16_20": statistics.mean(rewards[15:20]), "rewards": rewards,
            "idle_frac": statistics.median(r["verify/idle_frac"] for r in records[2:])}


def measure_verifier_rss(env: dict[str, str]) -> float:
    """Peak RSS of a `cohort serve arith` process after scoring a workload-sized batch."""
    code = (
        "import resource, subprocess, sys, time\n"
        "from cohort.rpc.launch import ServiceProcess\n"
        "from cohort.trainer.config import ScoringSection, VerifierSpec\n"
        "from cohort.trainer.scoring import Scorer\n"
        "from cohort.verifiers.records import Task\n"
        "with ServiceProcess(['arith']) as p:\n"
        "    s = Scorer(ScoringSection(verifiers=[VerifierSpec(name='arith')]), {'arith': [p.endpoint]})\n"
        "    for _ in range(20): s.submit([Task.with_answer('1+2=', '3')] * 8, ['3', '12345'] * 32, [False] * 64).result()\n"
        "    s.close()\n"
        "    status = open(f'/proc/{p.proc.pid}/status').read()\n"
        "    print([l.split()[1] for l in status.splitlines() if l.startswith('VmHWM')][0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    if "--model" in sys.argv[1:]:  # --model tiny (this workload, the default) | smollm2 (the sibling script)
        at = sys.argv.index("--model")
        model, rest = sys.argv[at + 1], sys.argv[1:at] + sys.argv[at + 2 :]
        if model == "smollm2":
            sibling = Path(__file__).with_name("trainer_vs_trl_smollm2.py")
            os.execv(sys.executable, [sys.executable, str(sibling), *rest])
        if model != "tiny":
            raise SystemExit(f"--model: tiny or smollm2, not {model!r}")
        sys.argv[1:] = rest
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--num-iterations", type=int, default=1, choices=[1, 2])
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads for both (the workload says 2)")
    ap.add_argument("--micro-batch", type=int, default=32,
                    help="Cohort's micro-batch (rows per forward/backward); 0 = the whole batch. Same maths: the "
                         "loss normaliser is computed over the whole batch (WORKLOAD.md: 16 x 4 is the same maths)")
    ap.add_argument("--keep", type=Path, default=None, help="keep logs and results in this folder")
    args = ap.parse_args()
    workload = args.workload.resolve()
    if not (workload / "WORKLOAD.md").exists():
        raise SystemExit(f"no workload at {workload}")
    python = ensure_peer_venv()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="trainer_vs_trl_"))
    tmp.mkdir(parents=True, exist_ok=True)
    trl, ours = [], []
    for r in range(args.repeats):
        trl.append(run_trl(python, workload, tmp, f"trl_mu{args.num_iterations}_r{r}", args.num_iterations, env,
                           args.threads))
        ours.append(run_cohort(workload, tmp, f"cohort_mu{args.num_iterations}_r{r}", args.num_iterations, env,
                               args.threads, args.micro_batch or None))
        print(f"repeat {r}: TRL {trl[-1]['s_per_step']:.3f} s/step {trl[-1]['peak_rss_mib']:.0f} MiB "
              f"reward@20 {trl[-1]['reward_20']:.4f} | Cohort {ours[-1]['s_per_step']:.3f} s/step "
              f"{ours[-1]['peak_rss_mib']:.0f} MiB reward@20 {ours[-1]['reward_20']:.4f} "
              f"idle {ours[-1]['idle_frac']:.3f} (other processes' CPU share during TRL: "
              f"{trl[-1]['foreign_cpu']:.0%})", flush=True)
    service_rss = measure_verifier_rss(env)

    def med(rows, key):
        return statistics.median(x[key] for x in rows)

    keys = ("s_per_step", "peak_rss_mib", "reward_20", "reward_16_20")
    t = {k: med(trl, k) for k in keys}
    o = {k: med(ours, k) for k in keys}
    print(f"\nmu={args.num_iterations}, torch threads {args.threads}, Cohort micro-batch {args.micro_batch or 64}, "
          f"{args.repeats} repeat(s), medians; steps 3-20 for time; logs in {tmp}")
    print(f"{'':24}{'TRL 1.16':>12}{'Cohort':>12}{'Cohort/TRL':>12}   goal")
    print(f"{'s/step':24}{t['s_per_step']:12.3f}{o['s_per_step']:12.3f}{o['s_per_step'] / t['s_per_step']:12.2f}   <= 0.5")
    print(f"{'peak RSS MiB (trainer)':24}{t['peak_rss_mib']:12.0f}{o['peak_rss_mib']:12.0f}"
          f"{o['peak_rss_mib'] / t['peak_rss_mib']:12.2f}   <= 0.8")
    both = o["peak_rss_mib"] + service_rss
    print(f"{'  + arith service MiB':24}{'':12}{both:12.0f}{both / t['peak_rss_mib']:12.2f}   (trainer + verifier)")
    print(f"{'reward at step 20':24}{t['reward_20']:12.4f}{o['reward_20']:12.4f}{'':12}   >= TRL")
    print(f"{'reward, steps 16-20':24}{t['reward_16_20']:12.4f}{o['reward_16_20']:12.4f}")
    print(f"{'verify/idle_frac':24}{'':12}{med(ours, 'idle_frac'):12.3f}")
    print("reward curves (per step): ")
    for name, rows in (("TRL", trl), ("Cohort", ours)):
        for i, x in enumerate(rows):
            print(f"  {name} r{i}: " + " ".join(f"{v:.3f}" for v in x["rewards"]))


if __name__ == "__main__":
    main()
