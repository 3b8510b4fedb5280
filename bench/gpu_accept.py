"""The GPU acceptance stages (run through bench/gpu_accept.sh, which sets up the import root): each one with a
time budget, the JSON rewritten after each. ``--dry-run``: the same stages on the CPU at tiny sizes (figures
meaningless; a test runs it so the script cannot rot between GPU loans)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

QWEN15 = {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
          "num_key_value_heads": 2, "num_hidden_layers": 28, "tie_word_embeddings": True, "model_type": "qwen2",
          "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 1000000.0}
SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
           "num_key_value_heads": 3, "num_hidden_layers": 30, "tie_word_embeddings": True, "model_type": "llama",
           "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "rope_theta": 100000.0}
TINY = {"vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "tie_word_embeddings": True, "model_type": "qwen2",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 512, "rope_theta": 10000.0}


def child_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def stage_tests(dry: bool) -> dict:
    """The model.device GPU tests, the precision gate's tests and the chunked head's (they skip nothing on a GPU)."""
    files = ["tests/trainer/test_device.py", "tests/trainer/test_precision.py", "tests/trainer/test_head.py"]
    if dry:
        files = ["tests/trainer/test_head.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *files],
                          capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=240)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return {"ok": proc.returncode == 0, "summary": tail}


def stage_precision(device: str) -> dict:
    """One update at lr 1e-6 on the device: the share of the masters that moved, mixed against pure bf16."""
    import torch

    from cohort.trainer.config import load_config
    from cohort.trainer.learner import Learner, UpdateBatch
    from cohort.trainer.models import build_policy

    out = {}
    for dtype in ("bfloat16", "bfloat16-pure"):
        cfg = load_config(None, ["model.tiny={hidden_size: 256, intermediate_size: 512, num_hidden_layers: 2, "
                                 "num_attention_heads: 4}", f"model.dtype={dtype}", f"model.device={device}",
                                 "optim.learning_rate=1e-6", "grpo.beta=0.0"])
        torch.manual_seed(0)
        policy, tok = build_policy(cfg.model)
        before = [p.detach().clone() for p in policy.parameters()]
        ids = torch.randint(4, len(tok), (8, 16))
        adv = torch.linspace(-1, 1, 8)[:, None].expand(8, 8).contiguous()
        Learner(policy, cfg).update(UpdateBatch(ids, torch.ones_like(ids), torch.ones(8, 8, dtype=torch.bool), adv,
                                                None, None), 1)
        moved = sum(int((p.detach() != q).sum()) for p, q in zip(policy.parameters(), before))
        out[dtype] = {"moved_share": moved / sum(q.numel() for q in before),
                      "master_dtype": str(next(policy.parameters()).dtype)}
    out["ok"] = out["bfloat16"]["moved_share"] >= 0.99 and out["bfloat16-pure"]["moved_share"] < 0.10
    return out


def stage_memory(device: str, dry: bool) -> dict:
    """One learner step (after a first) of a Qwen2.5-1.5B-geometry model at 64 rows x 512 tokens, with the plan's
    settings (bf16 over float32 masters, gradient checkpointing, the largest micro-batch the plan fits): the
    measured peak against the plan's."""
    import torch

    import learner_memory
    from cohort.trainer import memory
    from cohort.trainer.config import load_config

    geometry, rows, tokens = (TINY, 4, 64) if dry else (QWEN15, 64, 512)
    arm = "bf16+ckpt"
    completion = tokens - tokens // 4
    total = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 8 * memory.GIB
    cfg = load_config(None, learner_memory.overrides(arm, rows, completion))
    budget = memory.largest_budget_that_fits(cfg, geometry, device, total, prompt_tokens=tokens // 4)
    extra = (f"optim.micro_batch_tokens={budget}",) if budget else ()
    result = learner_memory.run_arm(arm, geometry, rows, tokens, device, extra)
    result["device_gib"] = total / memory.GIB
    result["ok"] = dry or abs(result["plan_over_measured"] - 1) <= 0.2  # a tiny model's peak is mostly noise
    return result


def stage_ipc(device: str, dry: bool) -> dict:
    """``rollout.vllm.transfer_backend=ipc``: a SmolLM2-135M-sized bf16 weight buffer (134.5 M elements; the dry
    run 1 M) pushed from this process, from the GPU, to a receiving process standing in for a vLLM server's worker
    (tests/vllm/standin.py ``receive_updates``: the GPU machine has no vLLM) through CUDA IPC on the same GPU, in
    16 MiB buckets: a full push, then two deltas of 1 % of the elements; bit for bit, with the sender's and the
    receiver's seconds. Then the same versions from host memory over gloo, for comparison. Without a GPU (the dry
    run) the IPC line says skipped and only gloo runs (the same protocol and receiving process)."""
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "vllm"))
    import standin

    from cohort.trainer.flat_layout import FlatLayout, FlatWeights

    numel = 1_000_000 if dry else 134_515_008
    layout = FlatLayout(("weights",), ((numel,),), torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    flat = torch.randn(numel, generator=gen).to(torch.bfloat16)
    host = []
    for _ in range(3):
        host.append(FlatWeights(flat, layout))
        flat = flat.clone()
        flat[torch.randint(0, numel, (numel // 100,), generator=gen)] += 1
    bucket = 16 * 2**20
    out: dict = {"elements": numel, "buffer_mb": numel * 2 / 1e6, "bucket_mib": bucket / 2**20}
    if device == "cuda":
        gpu = [FlatWeights(v.flat.to("cuda"), layout) for v in host]
        out["ipc"] = standin.run_transfer("ipc", gpu, bucket, sender_device=torch.device("cuda", 0),
                                          receiver_device_index=0, timeout_s=120)
    else:
        out["ipc"] = "skipped: CUDA IPC needs a GPU (the dry run sends the same buckets over gloo)"
    out["gloo"] = standin.run_transfer("gloo", host, bucket, timeout_s=120)
    runs = [r for k in ("ipc", "gloo") if isinstance(out[k], list) for r in out[k]]
    out["ok"] = all(r["equal"] for r in runs) and [r["kind"] for r in out["gloo"]] == ["full", "delta", "delta"]
    return out


def model_folder(geometry: dict, folder: Path) -> Path:
    """A random-init model of ``geometry`` with the char tokenizer (the machine has no network and no checkpoint
    small enough to carry): its folder, for ``model.path``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from cohort.trainer.models import char_tokenizer

    tok = char_tokenizer()
    config = AutoConfig.for_model(**dict(geometry, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                                         bos_token_id=tok.bos_token_id))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def run_train(args: list[str], out_dir: Path, seconds: float | None) -> dict:
    """``cohort train`` in a process of its own, stopped by SIGINT after ``seconds`` (it saves and exits 130);
    None: to its end (the dry run, whose start-up on a busy CPU can take minutes)."""
    cmd = [sys.executable, "-m", "cohort.cli", "train", f"run.output_dir={out_dir}", "run.resume=false",
           "run.progress=false", "run.plot=false", "run.tensorboard=false", *args]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=child_env())
    try:
        text, _ = proc.communicate(timeout=seconds or 900)
    except subprocess.TimeoutExpired:
        proc.send_signal(2)
        text, _ = proc.communicate(timeout=120)
    records = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()] \
        if (out_dir / "metrics.jsonl").exists() else []
    gen_s = sum(r.get("time/generate_s", 0.0) for r in records)
    upd_s = sum(r.get("time/update_s", 0.0) for r in records)
    tokens = sum(r.get("throughput/tokens_per_s", 0.0) * r.get("time/step_s", 0.0) for r in records)
    return {"exit": proc.returncode, "steps": len(records), "wall_s": time.perf_counter() - start,
            "last_reward": records[-1].get("reward/mean") if records else None,
            "policy_line": next((x for x in text.splitlines() if x.startswith("policy:")), ""),
            "generate_tokens_per_s": tokens / gen_s if gen_s else None,
            "update_tokens_per_s": tokens / upd_s if upd_s else None, "tail": text.strip().splitlines()[-3:]}


def stage_train(device: str, dry: bool, work: Path) -> dict:
    embedded = run_train([f"model.device={device}"] + (["run.max_steps=3"] if dry else []), work / "embedded",
                         None if dry else 150)
    embedded["ok"] = embedded["exit"] == 0 and (dry or (embedded["last_reward"] or 0) > 0.5)
    folder = model_folder(TINY if dry else SMOLLM2, work / "smollm2-geometry")
    smol = run_train([f"model.device={device}", "model.tiny=null", f"model.path={folder}",
                      "rollout.max_completion_length=128", "grpo.prompts_per_step=16", "grpo.num_generations=8",
                      "optim.learning_rate=1e-6"] + (["run.max_steps=2"] if dry else []), work / "smollm2",
                     None if dry else 180)
    smol["ok"] = smol["steps"] > 0 and smol["exit"] in (0, 130)
    return {"embedded": embedded, "smollm2_geometry": smol, "ok": embedded["ok"] and smol["ok"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="the CPU at tiny sizes")
    ap.add_argument("--stages", nargs="+", default=["tests", "precision", "memory", "ipc", "train"])
    args = ap.parse_args()
    import torch

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: no GPU here (bench/gpu_accept.sh --dry-run runs the stages on the CPU)")
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device,
              "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "torch": torch.__version__, "stages": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for name in args.stages:
            start = time.perf_counter()
            try:
                if name == "tests":
                    r = stage_tests(args.dry_run)
                elif name == "precision":
                    r = stage_precision(device)
                elif name == "memory":
                    r = stage_memory(device, args.dry_run)
                elif name == "ipc":
                    r = stage_ipc(device, args.dry_run)
                else:
                    r = stage_train(device, args.dry_run, Path(work))
            except Exception as exc:  # one stage's failure is reported in the JSON; the others still run
                r = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            r["seconds"] = time.perf_counter() - start
            result["stages"][name] = r
            print(f"{name}: {'ok' if r.get('ok') else 'FAILED'} in {r['seconds']:.0f} s", flush=True)
            if name == "ipc" and isinstance(r.get("ipc"), str):
                print(f"ipc: {r['ipc']}", flush=True)
            out.write_text(json.dumps(result, indent=1, default=str))
    result["ok"] = all(r.get("ok") for r in result["stages"].values())
    out.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, default=str))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
