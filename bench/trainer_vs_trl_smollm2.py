#!/usr/bin/env python
"""Cohort vs TRL 1.16 GRPOTrainer on a real model: SmolLM2-135M-Instruct on GSM8K, in the same run (CPU).

Run as ``python bench/trainer_vs_trl.py --model smollm2`` (or this file directly). Both sides get:

- the same model folder (``named_model_folder('smollm2-135m-instruct')``, float32) and tokenizer;
- the same prompts: the first ``--rows`` GSM8K train rows (``../shared/data/gsm8k``), a one-shot ``EXAMPLE``,
  the question and ``SUFFIX``, after the system prompt ``SYSTEM``, through the tokenizer's chat template (TRL gets the
  conversation, Cohort renders it itself; the TRL side checks that the token ids are identical), in the
  same order (``torch.randperm(rows, seed 0)``, TRL's RepeatSampler and Cohort's PromptSampler);
- G=8, 4 prompts a step (32 completions, one generation round and one optimizer step), at most 128
  completion tokens, temperature 1, beta 0.04, ``--steps`` measured steps after ``--warmup`` steps;
- the same rewards: ``math`` (weight 1) + ``format`` (weight 0.2, ``think=optional, mode=soft``) from
  the same two verifier services on loopback, started once by this driver (their memory is not in
  either side's figure): Cohort through ``scoring.verifiers[].endpoints``, TRL through the Cohort TRL
  adapter (``cohort.integrations.trl.CohortReward``, one reward function holding both verifiers).

Everything else is TRL's default (``GRPOConfig()`` of TRL 1.16, printed by the TRL side as ``trl
defaults``) and Cohort is configured to the same values, except where listed in ``DIFFERENCES`` (printed
with the results). Each side runs in its own process under ``/usr/bin/time -v`` (peak RSS per side);
TRL in ``.venv-peer`` (created when missing, as ``scripts/ci-trl`` does), Cohort as ``cohort train``.

Phases per step (seconds, mean over the measured steps):
  generation  TRL: ``transformers.generate``; Cohort: ``time/generate_s`` (its rollout engine)
  scoring     the time the learner waits for rewards. TRL: ``_calculate_rewards``; Cohort:
              ``verify/idle_s`` (its verifiers work while it computes the reference log-probs)
  ref/old lp  TRL: ``_get_per_token_logps_and_entropies`` outside ``compute_loss`` (reference model;
              TRL computes no old log-probs with num_iterations=1); Cohort: ``time/logprobs_s``
  update      TRL: compute_loss + backward + optimizer step (all micro-batches); Cohort: ``time/update_s``
  other       step wall time minus the above (data, bookkeeping, logging)

    python bench/trainer_vs_trl.py --model smollm2 [--steps 10] [--warmup 2] [--repeats 1] [--threads 2]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GSM8K = (ROOT / ".." / "shared" / "data" / "gsm8k" / "train.jsonl").resolve()
if not GSM8K.exists():  # a clone without ../shared (a CI machine): the repository's own first 64 train rows
    GSM8K = ROOT / "examples" / "data" / "gsm8k-mini" / "train.jsonl"
PEER = ROOT / ".venv-peer"
MODEL = "smollm2-135m-instruct"
SYSTEM = "You are a concise assistant."
SUFFIX = "\nGive the final number inside <answer></answer>."
EXAMPLE = ("Example question: What is fifteen more than a quarter of 48?\nExample solution: A quarter of 48 is 48 / 4 = 12. "
           "Fifteen more is 12 + 15 = 27.\n<answer>27</answer>\n\nQuestion: ")
"""A one-shot example before each question. Without it, SmolLM2-135M never wrote <answer> tags nor a right
answer in 64 samples at temperature 1 (8 groups of 8, three prompt wordings), so every group had one reward, no
signal, and Cohort skipped every update; with it, 2 of 4 probe groups had signal (from the format reward)."""
FORMAT_OPTIONS = {"think": "optional", "mode": "soft"}
VERIFIERS = [("math", 1.0, {}), ("format", 0.2, FORMAT_OPTIONS)]
DIFFERENCES = [
    "TRL use_bias_correction_kl=False (its default is True): both sides use the textbook k3 KL",
    "Cohort optim.micro_batch_size={mb} rows (at most) per forward/backward, cut by length and packed by prompt "
    "(TRL: per_device_train_batch_size={mb}, gradient_accumulation_steps={ga}: the same {b} completions per "
    "optimizer step)",
    "Cohort skips the update when no group has signal (all rewards of every group equal); TRL runs it",
    "activation checkpointing: TRL gradient_checkpointing={trl_gc} (its default: True), Cohort "
    "optim.gradient_checkpointing={cohort_gc}",
    "Cohort samples with its own KV-cached decoder (trainer/engines), TRL with transformers generate()",
]


# --------------------------------------------------------------------------------------------- shared
def write_rows(path: Path, n: int) -> None:
    """The first n GSM8K train rows as task rows: prompt = EXAMPLE + question + SUFFIX, answer = text after ####."""
    with open(GSM8K) as src, open(path, "w") as out:
        for i, line in enumerate(src):
            if i == n:
                break
            row = json.loads(line)
            out.write(json.dumps({"id": f"gsm8k/{i}", "prompt": EXAMPLE + row["question"] + SUFFIX,
                                  "answer": row["answer"].split("####")[-1].strip()}) + "\n")


def timed(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, float]:
    """Run under /usr/bin/time -v; return the peak RSS in MiB and the CPU seconds (user + system, whole
    process: loading included), a figure that other jobs on a shared machine disturb less than wall time."""
    with open(log, "w") as f:
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    text = log.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed ({proc.returncode}); log {log}:\n{text[-4000:]}")
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", text).group(1)) for k in ("User", "System"))
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024, cpu


# --------------------------------------------------------------------------------------------- TRL side
def trl_side(spec: dict) -> None:
    """Runs in .venv-peer: TRL's GRPOTrainer with CohortReward; writes per-step phases to spec['out']."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import trl.extras.profiling as trl_prof
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from cohort.integrations.trl import CohortReward
    from cohort.verifiers.client import WeightedVerifier

    torch.set_num_threads(spec["threads"])
    rows = [json.loads(line) for line in Path(spec["rows"]).read_text().splitlines()]
    data = Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": r["prompt"]}],
                               "answer": r["answer"]} for r in rows])
    tok = AutoTokenizer.from_pretrained(spec["model"])
    # the prompt ids TRL will generate from must be Cohort's (trainer.data.encode_prompts): checked here
    for r, ids in zip(rows, spec["cohort_prompt_ids"]):
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": r["prompt"]}],
                                       tokenize=False, add_generation_prompt=True)
        assert tok(text, add_special_tokens=False)["input_ids"] == ids, "prompt token ids differ between the sides"

    events: list[tuple[str, float, float]] = []  # TRL's own ProfilingContext timings, captured
    orig = trl_prof.ProfilingContext._log_metrics

    def capture(self, duration):
        end = time.perf_counter()
        events.append((self.name.split(".", 1)[-1], end - duration, end))
        return orig(self, duration)

    trl_prof.ProfilingContext._log_metrics = capture
    steps: dict[int, dict] = {}
    tokens: list[tuple[float, int]] = []

    class Timing(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.last = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            self.opt_s = time.perf_counter() - self.t_opt

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            steps.setdefault(state.global_step, {}).update(begin=self.begin, end=now, wall_s=now - self.last,
                                                           optimizer_s=self.opt_s)
            self.last = now

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "train_runtime" not in logs:
                steps.setdefault(state.global_step, {})["logs"] = dict(logs)

    endpoints = spec["endpoints"]
    reward = CohortReward([WeightedVerifier(name, w, [endpoints[name]], opts) for name, w, opts in VERIFIERS],
                          reference_column="answer")
    inner = reward.__call__

    class Counted:  # counts completion tokens (up to and including EOS) per generation round
        __name__ = reward.__name__

        def __call__(self, *a, completion_ids=None, **kw):
            tokens.append((time.perf_counter(), sum(len(c) for c in completion_ids)))
            return inner(*a, completion_ids=completion_ids, **kw)

    # TRL's defaults on a CPU (its bf16=True default needs a GPU; the issue fixes float32 anyway)
    defaults = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl_defaults_"), use_cpu=True, bf16=False)
    g, p = spec["num_generations"], spec["prompts_per_step"]
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_smollm2_"),
        # fixed by the issue
        num_generations=g, max_completion_length=spec["max_completion_length"], beta=0.04, temperature=1.0,
        bf16=False, fp16=False, use_cpu=True, max_steps=spec["steps"],
        # 4 prompts x G per optimizer step, in TRL's default micro-batch of 8 rows
        per_device_train_batch_size=spec["micro_batch"], gradient_accumulation_steps=p * g // spec["micro_batch"],
        use_bias_correction_kl=False,  # DIFFERENCES: Cohort's KL is the textbook k3
        # bookkeeping
        seed=0, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        gradient_checkpointing=spec["gradient_checkpointing"],
    )
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=[Counted()], args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Timing()])
    bwd: list[tuple[float, float]] = []
    backward = trainer.accelerator.backward

    def timed_backward(loss, **kw):
        t = time.perf_counter()
        out = backward(loss, **kw)
        bwd.append((t, time.perf_counter()))
        return out

    trainer.accelerator.backward = timed_backward
    try:
        trainer.train()
    finally:
        reward.close()

    losses = [(s, e) for n, s, e in events if n == "compute_loss"]
    per_step = []
    for s in sorted(k for k in steps if "end" in steps[k]):
        d = steps[s]
        inside = [(n, a, b) for n, a, b in events if d["begin"] - 1e-6 <= a and b <= d["end"] + 1e-6]

        def total(name, keep=lambda a, b: True):
            return sum(b - a for n, a, b in inside if n == name and keep(a, b))

        in_loss = lambda a, b: any(la <= a and b <= lb for la, lb in losses)  # noqa: E731
        rec = {"step": s, "wall_s": d["wall_s"], "generate_s": total("transformers.generate"),
               "score_s": total("_calculate_rewards"),
               "logprobs_s": total("_get_per_token_logps_and_entropies", lambda a, b: not in_loss(a, b)),
               "update_s": total("compute_loss") + sum(b - a for a, b in bwd if d["begin"] <= a and b <= d["end"])
               + d["optimizer_s"],
               "tokens": sum(n for t, n in tokens if d["begin"] <= t <= d["end"]),
               "reward": d.get("logs", {}).get("reward")}
        per_step.append(rec)
    base = defaults.to_dict()
    diff = {k: v for k, v in cfg.to_dict().items() if k not in ("output_dir", "logging_dir", "run_name")
            and isinstance(v, (int, float, bool, str, type(None))) and base.get(k, v) != v}
    used = {k: getattr(getattr(cfg, k), "value", getattr(cfg, k)) for k in ("learning_rate", "lr_scheduler_type", "optim", "weight_decay", "adam_beta1",
                                          "adam_beta2", "adam_epsilon", "max_grad_norm", "epsilon", "epsilon_high",
                                          "loss_type", "scale_rewards", "num_iterations", "top_p", "top_k",
                                          "repetition_penalty", "mask_truncated_completions", "gradient_checkpointing",
                                          "steps_per_generation", "generation_batch_size", "disable_dropout")}
    Path(spec["out"]).write_text(json.dumps({"per_step": per_step, "changed_from_defaults": diff, "settings": used,
                                             "torch_threads": torch.get_num_threads()}, default=str))


# --------------------------------------------------------------------------------------------- Cohort side
def cohort_config(spec: dict, out: Path, trl_settings: dict) -> str:
    s = trl_settings  # TRL's values where the issue does not fix them
    cfg = {
        "model": {"name": MODEL},
        "data": {"path": spec["rows"], "shuffle_seed": 0, "system_prompt": SYSTEM, "chat_template": "on"},
        "scoring": {"verifiers": [{"name": n, "weight": w, "options": o, "endpoints": [spec["endpoints"][n]]}
                                  for n, w, o in VERIFIERS]},
        "grpo": {"prompts_per_step": spec["prompts_per_step"], "num_generations": spec["num_generations"],
                 "beta": 0.04, "epsilon": s["epsilon"], "epsilon_high": s["epsilon_high"], "loss_type": s["loss_type"],
                 "scale_rewards": s["scale_rewards"], "num_iterations": s["num_iterations"],
                 "mask_truncated_completions": s["mask_truncated_completions"]},
        "rollout": {"engine": "transformers", "temperature": 1.0, "top_p": s["top_p"],
                    "max_completion_length": spec["max_completion_length"], "generation_chunks": 1},
        "optim": {"learning_rate": s["learning_rate"], "weight_decay": s["weight_decay"], "adam_beta1": s["adam_beta1"],
                  "adam_beta2": s["adam_beta2"], "adam_epsilon": s["adam_epsilon"], "max_grad_norm": s["max_grad_norm"],
                  "lr_scheduler_type": s["lr_scheduler_type"], "micro_batch_size": spec["micro_batch"],
                  "gradient_checkpointing": spec["cohort_gradient_checkpointing"]},
        "run": {"output_dir": str(out), "max_steps": spec["steps"], "seed": 0, "torch_threads": spec["threads"],
                "resume": False, "tensorboard": False, "progress": False, "plot": False, "target_reward": None},
    }
    return json.dumps(cfg)  # JSON is YAML


def cohort_steps(out: Path) -> list[dict]:
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows, last = [], 0.0
    for r in recs:
        rows.append({"step": r["step"], "wall_s": r["time/elapsed_s"] - last, "generate_s": r["time/generate_s"],
                     "score_s": r["verify/idle_s"], "logprobs_s": r.get("time/logprobs_s", float("nan")),
                     "update_s": r["time/update_s"],
                     "tokens": round(r["throughput/tokens_per_s"] * r["time/step_s"]), "reward": r["reward/mean"],
                     "updated": "loss/total" in r, "rows_in_loss": r.get("rollout/rows_in_loss")})  # a round with no signal in any group skips its update
        last = r["time/elapsed_s"]
    return rows


# --------------------------------------------------------------------------------------------- driver
def ensure_peer_venv() -> Path:
    python = PEER / "bin" / "python"
    check = "import trl, torch, cohort.integrations.trl; assert trl.__version__ == '1.16.0'"
    if python.exists() and subprocess.run([str(python), "-c", check], capture_output=True, cwd="/").returncode == 0:
        return python
    print(f"creating {PEER} (torch==2.13.0, trl==1.16.0, this checkout editable)", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "trl==1.16.0"], check=True)
    subprocess.run([*pip, "-e", str(ROOT)], check=True)
    return python


PHASES = ("generate_s", "score_s", "logprobs_s", "update_s")


def summary(rows: list[dict], warmup: int) -> dict:
    meas = [r for r in rows if r["step"] > warmup]
    out = {k: statistics.mean(r[k] for r in meas) for k in ("wall_s", *PHASES)}
    out["other_s"] = out["wall_s"] - sum(out[k] for k in PHASES)
    out["median_wall_s"] = statistics.median(r["wall_s"] for r in meas)
    toks = sum(r["tokens"] for r in meas)
    out["tok_per_s"] = toks / sum(r["wall_s"] for r in meas)
    out["tok_per_s_gen"] = toks / sum(r["generate_s"] for r in meas)
    out["reward_mean"] = statistics.mean(r["reward"] for r in meas)
    return out


def run_pair(args, spec: dict, tmp: Path, tag: str, env: dict[str, str], peer: Path) -> tuple[dict, dict]:
    spec_path = tmp / f"{tag}_trl_spec.json"
    spec_path.write_text(json.dumps({**spec, "out": str(tmp / f"{tag}_trl.json")}))
    t0 = time.time()
    trl_rss, trl_cpu = timed([str(peer), str(Path(__file__).resolve()), "--side", "trl", "--spec", str(spec_path)], env,
                    tmp / f"{tag}_trl.log")
    trl = json.loads((tmp / f"{tag}_trl.json").read_text())
    print(f"{tag}: TRL done in {time.time() - t0:.0f} s", flush=True)
    out = tmp / f"{tag}_cohort"
    cfg_path = tmp / f"{tag}_cohort.yaml"
    cfg_path.write_text(cohort_config(spec, out, trl["settings"]))
    t0 = time.time()
    cohort_rss, cohort_cpu = timed([args.cohort_python, "-m", "cohort.cli", "train", "--config", str(cfg_path)], env,
                       tmp / f"{tag}_cohort.log")
    print(f"{tag}: Cohort done in {time.time() - t0:.0f} s", flush=True)
    return ({"rss_mib": trl_rss, "cpu_s": trl_cpu, "steps": trl["per_step"], "trl": trl},
            {"rss_mib": cohort_rss, "cpu_s": cohort_cpu, "steps": cohort_steps(out)})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", choices=["driver", "trl"], default="driver", help=argparse.SUPPRESS)
    ap.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=10, help="measured steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads, both sides")
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward (TRL's default is 8)")
    ap.add_argument("--rows", type=int, default=256, help="first N GSM8K train rows")
    ap.add_argument("--trl-gradient-checkpointing", choices=["on", "off"], default="on", help="TRL's default: on")
    ap.add_argument("--cohort-gradient-checkpointing", choices=["on", "off"], default="on",
                    help="Cohort's optim.gradient_checkpointing (its default is off; on here, as TRL's)")
    ap.add_argument("--cohort-python", default=sys.executable)
    ap.add_argument("--keep", type=Path, default=None, help="keep logs and results in this folder")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = ap.parse_args(argv)
    if args.side == "trl":
        trl_side(json.loads(args.spec.read_text()))
        return {}

    from cohort.rpc.launch import LocalServices
    from cohort.trainer.config import DataSection
    from cohort.trainer.data import encode_prompts, load_examples
    from cohort.trainer.gguf_models import named_model_folder
    from transformers import AutoTokenizer

    peer = ensure_peer_venv()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="trainer_vs_trl_smollm2_"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows_path = tmp / "gsm8k_rows.jsonl"
    write_rows(rows_path, args.rows)
    model = str(named_model_folder(MODEL))
    data = DataSection(path=str(rows_path), system_prompt=SYSTEM, chat_template="on")
    prompt_ids = encode_prompts(load_examples(data), AutoTokenizer.from_pretrained(model), data)
    total = args.warmup + args.steps
    results = []
    with LocalServices([n for n, _, _ in VERIFIERS]) as endpoints:
        spec = {"model": model, "rows": str(rows_path), "endpoints": endpoints, "threads": args.threads,
                "steps": total, "prompts_per_step": args.prompts_per_step, "num_generations": args.num_generations,
                "max_completion_length": args.max_completion_length, "micro_batch": args.micro_batch,
                "gradient_checkpointing": args.trl_gradient_checkpointing == "on",
                "cohort_gradient_checkpointing": args.cohort_gradient_checkpointing == "on", "cohort_prompt_ids": prompt_ids}
        for r in range(args.repeats):
            results.append(run_pair(args, spec, tmp, f"r{r}", env, peer))
    report = print_report(args, results, tmp)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


def print_report(args, results: list[tuple[dict, dict]], tmp: Path) -> dict:
    trl0 = results[0][0]["trl"]
    print(f"\nSmolLM2-135M-Instruct, GSM8K, {args.prompts_per_step} prompts x G={args.num_generations}, "
          f"<= {args.max_completion_length} tokens, beta 0.04, fp32, CPU, {args.threads} torch threads; "
          f"steps {args.warmup + 1}-{args.warmup + args.steps} measured (means), {len(results)} repeat(s); logs in {tmp}")
    print("TRL settings (GRPOConfig defaults unless changed): " + json.dumps(trl0["settings"]))
    print("TRL changed from its defaults: " + json.dumps(trl0["changed_from_defaults"]))
    b = args.prompts_per_step * args.num_generations
    print("differences between the sides: "
          + "; ".join(d.format(mb=args.micro_batch, ga=b // args.micro_batch, b=b, trl_gc=args.trl_gradient_checkpointing == "on",
                                cohort_gc=args.cohort_gradient_checkpointing == "on") for d in DIFFERENCES))
    report = {"repeats": []}
    for i, (trl, ours) in enumerate(results):
        t, o = summary(trl["steps"], args.warmup), summary(ours["steps"], args.warmup)
        report["repeats"].append({"trl": {**t, "rss_mib": trl["rss_mib"], "cpu_s": trl["cpu_s"]},
                                  "cohort": {**o, "rss_mib": ours["rss_mib"], "cpu_s": ours["cpu_s"]}})
        print(f"\nrepeat {i}")
        print(f"{'s/step (mean)':28}{'TRL 1.16':>10}{'Cohort':>10}{'Cohort/TRL':>12}")
        for key, label in (("generate_s", "  generation"), ("score_s", "  scoring (wait)"),
                           ("logprobs_s", "  ref/old log-probs"), ("update_s", "  update"), ("other_s", "  other"),
                           ("wall_s", "total"), ("median_wall_s", "total (median)")):
            ratio = o[key] / t[key] if t[key] > 0 else float("nan")
            print(f"{label:28}{t[key]:10.2f}{o[key]:10.2f}{ratio:12.2f}" + ("   goal <= 0.6" if key == "wall_s" else ""))
        print(f"{'peak RSS MiB':28}{trl['rss_mib']:10.0f}{ours['rss_mib']:10.0f}{ours['rss_mib'] / trl['rss_mib']:12.2f}"
              "   goal <= 0.8")
        print(f"{'process CPU s (all steps)':28}{trl['cpu_s']:10.0f}{ours['cpu_s']:10.0f}{ours['cpu_s'] / trl['cpu_s']:12.2f}"
              "   (user + system, loading included)")
        print(f"{'completion tok/s (step)':28}{t['tok_per_s']:10.1f}{o['tok_per_s']:10.1f}{o['tok_per_s'] / t['tok_per_s']:12.2f}")
        print(f"{'completion tok/s (generate)':28}{t['tok_per_s_gen']:10.1f}{o['tok_per_s_gen']:10.1f}"
              f"{o['tok_per_s_gen'] / t['tok_per_s_gen']:12.2f}")
        print(f"{'reward (mean, measured)':28}{t['reward_mean']:10.3f}{o['reward_mean']:10.3f}")
        for name, side in (("TRL", trl), ("Cohort", ours)):
            print(f"  reward per step {name:7}" + " ".join(f"{r['reward']:.3f}" for r in side["steps"]))
            print(f"  tokens per step {name:7}" + " ".join(f"{r['tokens']}" for r in side["steps"]))
        skipped = [r["step"] for r in ours["steps"] if not r["updated"]]
        print(f"  Cohort steps without an update (no group with signal): {skipped or 'none'}")
        print("  Cohort rows in the loss per step (groups without signal are left out; TRL keeps all "
              f"{b}): " + " ".join(str(int(r["rows_in_loss"] or 0)) for r in ours["steps"]))
    return report


if __name__ == "__main__":
    main()
