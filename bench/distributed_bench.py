"""Step time of the learner in 1 process and in 2 processes (DDP, FSDP2) on the same work.

    python bench/distributed_bench.py [--rows 32] [--steps 5] [--hidden 128] [--layers 4] [--threads 2]

The work per step is fixed: a global batch of ``rows`` sequences (prompt 6 + completion 16
tokens), one optimizer step (``Learner.step``, micro-batches of 8 rows, AdamW) and, separately,
sampling the 16-token completions of those rows with the transformers engine (FSDP2: gathered
once per call). The 1-process baseline uses ``--threads`` torch threads; each of the 2 ranks uses
``threads / 2``, so both get the same cores; a 1-thread single process is measured too. Every run
is a fresh subprocess (``OMP_NUM_THREADS`` set to its thread count). Prints seconds per step and
the ratio to the faster of the two 1-process baselines, measured in the same run (on a small,
shared CPU, several OpenMP threads can be far slower than one). On one small CPU the ranks compete for the same
cores, so this measures overhead rather than speed-up; on GPUs each rank has its own device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def config(args):
    from cohort.trainer.config import load_config

    heads = max(2, args.hidden // 32)
    return load_config(None, [
        f"model.tiny={{hidden_size: {args.hidden}, intermediate_size: {4 * args.hidden}, "
        f"num_hidden_layers: {args.layers}, num_attention_heads: {heads}}}",
        f"grpo.prompts_per_step={args.rows // 4}", "grpo.num_generations=4", "grpo.loss_type=dapo",
        "optim.micro_batch_size=8", "rollout.max_completion_length=16", f"distributed.parallel={args.parallel}",
        "grpo.beta=0"])  # the batch has no reference log-probs (the default beta > 0 would need them)


def measure(args) -> dict[str, float]:
    import torch

    from cohort.trainer.distributed import for_generation, setup, unwrap, wrap
    from cohort.trainer.engines.hf import TransformersEngine
    from cohort.trainer.learner import Learner, UpdateBatch
    from cohort.trainer.models import build_policy

    comm = setup(args.parallel)
    torch.set_num_threads(max(1, args.threads // comm.world_size))
    cfg = config(args)
    policy, tokenizer = build_policy(cfg.model)
    policy = wrap(policy, comm)
    learner = Learner(policy, cfg, comm)
    engine = for_generation(TransformersEngine(cfg.rollout, unwrap(policy), tokenizer, comm.rank), policy, comm)
    g = torch.Generator().manual_seed(0)
    rows, tp, t = args.rows, 6, 16
    ids = torch.randint(4, 19, (rows, tp + t), generator=g)
    mask = torch.ones(rows, t, dtype=torch.bool)
    adv = torch.randn(rows, generator=g)[:, None].expand(rows, t)  # (B, T)
    mine = torch.tensor(comm.shard(list(range(rows))))  # this rank's rows (whole groups of 4)
    batch = UpdateBatch(ids[mine], torch.ones_like(ids[mine]), mask[mine], adv[mine], None, None)
    prompts = [ids[i, :tp].tolist() for i in range(0, rows, 4)]
    prompts = comm.shard(prompts)
    update_s, generate_s = [], []
    for step in range(args.steps + 1):  # the first is warm-up
        comm.barrier()
        t0 = time.perf_counter()
        learner.step(batch)
        comm.barrier()
        t1 = time.perf_counter()
        engine.generate(prompts, 4)
        comm.barrier()
        t2 = time.perf_counter()
        if step:
            update_s.append(t1 - t0)
            generate_s.append(t2 - t1)
    out = {"update_s": statistics.median(update_s), "generate_s": statistics.median(generate_s)}
    comm.close()
    return out


def launch(parallel: str, args, threads: int) -> dict[str, float]:
    """One measurement in fresh processes: ``none`` in one process, ddp / fsdp2 under torchrun (2 ranks)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        launcher = ([sys.executable] if parallel == "none" else
                    [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"])
        cmd = [*launcher, __file__, "--worker", parallel, "--out", str(out), "--rows", str(args.rows),
               "--steps", str(args.steps), "--hidden", str(args.hidden), "--layers", str(args.layers),
               "--threads", str(threads)]
        per_process = threads if parallel == "none" else max(1, threads // 2)
        env = {**os.environ, "OMP_NUM_THREADS": str(per_process), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"torchrun {parallel} failed:\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=32, help="global batch (sequences per step), a multiple of 8")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="torch threads in total (split over the ranks)")
    ap.add_argument("--worker", choices=["none", "ddp", "fsdp2"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:  # inside torchrun
        args.parallel = args.worker
        result = measure(args)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.out).write_text(json.dumps(result))
        sys.stdout.flush()
        os._exit(0)  # some FSDP2 workers abort in interpreter teardown after a clean shutdown
    results = {"1 process, 1 thread": launch("none", args, 1),
               f"1 process, {args.threads} threads": launch("none", args, args.threads)}
    for parallel in ("ddp", "fsdp2"):
        results[f"2 processes {parallel}"] = launch(parallel, args, args.threads)
    base = min(list(results.values())[:2], key=lambda r: r["update_s"])  # the faster 1-process configuration
    print(f"work: {args.rows} rows x 16 completion tokens, model hidden {args.hidden} x {args.layers} layers, "
          f"{args.threads} torch threads in total, median of {args.steps} steps")
    print(f"{'run':<24}{'update s/step':>14}{'ratio':>8}{'generate s':>12}{'ratio':>8}")
    for name, r in results.items():
        print(f"{name:<24}{r['update_s']:>14.3f}{r['update_s'] / base['update_s']:>8.2f}"
              f"{r['generate_s']:>12.3f}{r['generate_s'] / base['generate_s']:>8.2f}")


if __name__ == "__main__":
    main()
