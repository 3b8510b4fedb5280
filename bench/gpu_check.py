"""GPU check: the transformers rollout engine and the learner on a random-init ~0.5B Llama.

    python bench/gpu_check.py [--device cuda] [--size 0.5b|tiny] [--prompts 16] [--generations 8]
                              [--prompt-len 64] [--completion-len 256] [--steps 3] [--out FILE.json]

Nothing is downloaded: the model is a randomly initialised Llama with the shape of a 0.5B model
(hidden 896, 24 layers, 14 query / 2 KV heads, MLP 4864, vocab 151936, untied; ~0.63B parameters
with the untied head), in bfloat16 on CUDA; the tokenizer is a word-level one with one token per
id (ids only matter here). Per step: sample G completions for P random prompts with the engine
(``TransformersEngine.generate``, KV-cached, EOS disabled so every row runs to the full length),
then one ``Learner.step`` (AdamW, micro-batched) on the rollouts with random advantages.

Prints and writes JSON: generation tokens/s, learner tokens/s and step time (median over --steps
after one warm-up step), and peak GPU memory. ``--size tiny --device cpu`` is the dry run used on
machines without a GPU (checks the script end to end, figures meaningless).

TRL is not compared here: it is not installed on the lent GPU machines and cannot be carried.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = {
    # Qwen2.5-0.5B-like geometry as a plain Llama (head_dim 64)
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, vocab_size=512),
}


def word_tokenizer(vocab_size: int):
    """One token per id ("t0", "t1", ...): pad 0, eos 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t3"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t3",
                                   padding_side="left")


def build(size: str, device: str, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    geo = SIZES[size]
    tokenizer = word_tokenizer(geo["vocab_size"])
    cfg = LlamaConfig(**geo, max_position_embeddings=4096, tie_word_embeddings=False,
                      pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    model.to(dtype)
    model.config.use_cache = True
    return model, tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--completion-len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch
    import transformers

    from cohort.trainer.config import load_config
    from cohort.trainer.engines.hf import TransformersEngine
    from cohort.trainer.learner import Learner, UpdateBatch

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch.cuda.is_available() is false (use --device cpu --size tiny)")
    dtype = torch.bfloat16 if cuda else torch.float32
    batch_rows = args.prompts * args.generations
    if batch_rows % args.micro_batch:
        raise SystemExit(f"error: --micro-batch {args.micro_batch} must divide prompts*generations={batch_rows}")
    # the trainer's typed config for the engine and the learner (the model section is not used: built below)
    cfg = load_config(None, [
        f"grpo.prompts_per_step={args.prompts}", f"grpo.num_generations={args.generations}",
        f"rollout.max_completion_length={args.completion_len}", f"optim.micro_batch_size={args.micro_batch}",
        "optim.learning_rate=1e-6", f"run.max_steps={args.steps + 1}", "grpo.loss_type=dapo",
        "grpo.beta=0",  # no reference model: the check times the policy update alone (the embedded default has beta > 0)
    ])
    model, tokenizer = build(args.size, args.device, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    engine = TransformersEngine(cfg.rollout, model, tokenizer, seed=0)
    engine.eos_id = -1  # no early stop: every row generates completion_len tokens (fixed work per step)
    learner = Learner(model, cfg)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for step in range(args.steps + 1):
        prompts = torch.randint(4, SIZES[args.size]["vocab_size"], (args.prompts, args.prompt_len), generator=gen)
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        sync()
        t0 = time.perf_counter()
        batch = engine.generate(prompts.tolist(), args.generations)
        sync()
        t1 = time.perf_counter()
        dev = lambda x: x.to(args.device)  # noqa: E731
        update = UpdateBatch(dev(batch.input_ids), dev(batch.attention_mask), dev(batch.completion_mask.bool()),
                             dev(torch.randn(batch_rows, generator=gen)[:, None].expand_as(batch.completion_mask)),
                             None, None)
        metrics = learner.step(update)
        sync()
        t2 = time.perf_counter()
        gen_tokens = int(batch.completion_mask.sum())
        train_tokens = int(batch.attention_mask.sum())
        rows.append({"step": step, "generate_s": t1 - t0, "learner_s": t2 - t1, "gen_tokens": gen_tokens,
                     "train_tokens": train_tokens, "loss": metrics["loss/total"]})
        print(f"step {step}{' (warm-up)' if step == 0 else ''}: generate {t1 - t0:.2f}s "
              f"({gen_tokens / (t1 - t0):.0f} tok/s), learner {t2 - t1:.2f}s "
              f"({train_tokens / (t2 - t1):.0f} tok/s)", flush=True)
    timed = rows[1:] or rows
    med = lambda k: statistics.median(r[k] for r in timed)  # noqa: E731
    result = {
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "size": args.size, "params": n_params, "dtype": str(dtype).removeprefix("torch."),
        "prompts": args.prompts, "generations": args.generations, "prompt_len": args.prompt_len,
        "completion_len": args.completion_len, "micro_batch": args.micro_batch, "timed_steps": len(timed),
        "generate_s": med("generate_s"), "generate_tokens_per_s": med("gen_tokens") / med("generate_s"),
        "learner_step_s": med("learner_s"), "learner_tokens_per_s": med("train_tokens") / med("learner_s"),
        "step_s": med("generate_s") + med("learner_s"),
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "steps": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
