"""Peak memory of one learner step, side by side in one run: today's path against the new defaults, and the memory
plan's estimate (``cohort plan``, ``trainer/memory.py``) against each measured peak.

A Qwen2.5-0.5B geometry (random init: vocabulary 151,936, hidden 896, intermediate 4,864, 14 heads, 2 KV heads,
tied embeddings), ``--rows`` rows of ``--tokens`` tokens (a quarter prompt, the rest completion), each arm in a
fresh process, two optimizer steps (the second is the steady state: AdamW's moments allocated). The peak is the
process's maximum resident set above its own resident set just before the model is built (interpreter, torch and transformers left out), read from ``getrusage`` (the CPU) or
``torch.cuda.max_memory_allocated`` (a GPU).

Arms:
- ``before``: the path before issue 47: float32, the whole batch in one forward, float32 (B, T, V) logits;
- ``float32``: float32 with the new log-prob path (the LM head in chunks) and the token-budget micro-batch;
- ``bf16``: ``model.dtype: bfloat16`` (float32 masters, bf16 autocast), chunked head, token-budget micro-batch;
- ``bf16+ckpt``: the same with gradient checkpointing (what the GPU example configs set).

    python bench/learner_memory.py                       # 4 layers, 16 rows x 512 tokens (the CPU figures)
    python bench/learner_memory.py --layers 24 --device cuda
Prints a table and one JSON line (``--json FILE`` writes it too).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ARMS = ("before", "float32", "bf16", "bf16+ckpt")
QWEN05 = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
          "num_key_value_heads": 2, "tie_word_embeddings": True, "model_type": "qwen2", "rms_norm_eps": 1e-6,
          "max_position_embeddings": 32768, "rope_theta": 1000000.0}


def overrides(arm: str, rows: int, completion: int) -> list[str]:
    dtype = "float32" if arm in ("before", "float32") else "bfloat16"
    out = ["model.tiny=null", "model.path=.", f"model.dtype={dtype}", "grpo.beta=0.0", "grpo.prompts_per_step=1",
           "rollout.generation_chunks=1",
           f"grpo.num_generations={rows}", f"rollout.max_completion_length={completion}", "optim.learning_rate=1e-6"]
    if arm == "before":
        out.append(f"optim.micro_batch_size={rows}")
    if arm == "bf16+ckpt":
        out.append("optim.gradient_checkpointing=true")
    return out


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_arm(arm: str, geometry: dict, rows: int, tokens: int, device: str, extra: tuple[str, ...] = ()) -> dict:
    """Two learner steps in this process (called in a fresh process per arm); the second one timed. ``extra``:
    more config overrides (bench/gpu_accept.py: the plan's micro-batch)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from cohort.trainer import forward, memory
    from cohort.trainer.config import load_config
    from cohort.trainer.learner import Learner, UpdateBatch

    completion = tokens - tokens // 4
    cfg = load_config(None, overrides(arm, rows, completion) + [f"model.device={device}", *extra])
    if arm == "before":
        forward._chunked_head = lambda model: False  # the path before: float32 (B, T, V) logits
    torch.manual_seed(0)
    base = rss_bytes()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    model = AutoModelForCausalLM.from_config(Qwen2Config(**geometry), dtype=torch.float32).to(device)
    learner = Learner(model, cfg)
    ids = torch.randint(0, geometry["vocab_size"], (rows, tokens))
    adv = torch.linspace(-1, 1, rows)[:, None].expand(rows, completion).contiguous()
    batch = UpdateBatch(ids, torch.ones_like(ids), torch.ones(rows, completion, dtype=torch.bool), adv, None, None)
    learner.step(batch)  # the first step creates AdamW's moments: the second is the steady state's peak
    start = time.perf_counter()
    stats = learner.step(batch)
    seconds = time.perf_counter() - start
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    p = memory.plan(cfg, geometry, device, None, prompt_tokens=tokens // 4)
    parts = {k: v for k, v in p.parts.items() if k not in ("engine", "reference", "runtime")}  # not in this step
    estimate = sum(parts.values())
    return {"arm": arm, "peak_gib": peak / memory.GIB, "plan_gib": estimate / memory.GIB,
            "plan_over_measured": estimate / max(peak, 1), "micro_batch": p.micro_batch, "step_s": seconds,
            "loss": stats["loss/total"], "parameters": sum(x.numel() for x in model.parameters())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # the child's own arm
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, dict(QWEN05, num_hidden_layers=args.layers), args.rows, args.tokens,
                                 args.device)))
        return
    results = []
    for arm in args.arms:
        child = subprocess.run([sys.executable, __file__, "--arm", arm, "--layers", str(args.layers), "--rows",
                                str(args.rows), "--tokens", str(args.tokens), "--device", args.device],
                               capture_output=True, text=True)
        if child.returncode:
            results.append({"arm": arm, "error": (child.stderr.strip().splitlines() or ["?"])[-1]})
        else:
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        r = results[-1]
        if "error" in r:
            print(f"{arm:>10}  failed: {r['error']}")
        else:
            print(f"{arm:>10}  peak {r['peak_gib']:6.2f} GiB  plan {r['plan_gib']:6.2f} GiB  "
                  f"(plan/measured {r['plan_over_measured']:.2f})  micro-batch {r['micro_batch']}  step {r['step_s']:.1f} s")
    ok = {r["arm"]: r for r in results if "error" not in r}
    summary = {"date": time.strftime("%Y-%m-%d"), "device": args.device, "layers": args.layers, "rows": args.rows,
               "tokens": args.tokens, "arms": results}
    if "before" in ok:
        for arm in ARMS[1:]:
            if arm in ok:
                summary[f"before_over_{arm}"] = ok["before"]["peak_gib"] / ok[arm]["peak_gib"]
                print(f"before / {arm}: {summary[f'before_over_{arm}']:.2f}x lower peak")
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
