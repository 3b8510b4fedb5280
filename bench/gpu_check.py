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
after one warm-up step), and peak GPU memory.

``--overlap`` then runs the same steps as the asynchronous pipeline does at staleness 1: a second process
(a rollout worker with its own copy of the model on the same device, ``trainer.rollout_worker``'s weight
thread) generates step s + 1 while this process updates on step s, and after each update the new weights
go to it through ``trainer.wire`` (gloo, through host memory: the pipeline's own transport). It reports
the pipelined step time against the lock-step one (generate + update), each side's time when they share
the device, and the weight sync's cost (flatten + copy to the host + broadcast); on a GPU twice, with the
weights in pageable host memory (``overlap``), then in page-locked memory at both ends (``overlap_pinned``). ``--size tiny --device cpu`` is the dry run used on
machines without a GPU (checks the script end to end, figures meaningless).

TRL is not compared here: it is not installed on the lent GPU machines and cannot be carried.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

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


def on_device(device: str):
    """(cuda?, the model's dtype there, a synchronise for timing): bfloat16 on CUDA, float32 on the CPU."""
    import torch

    cuda = device.startswith("cuda")
    return cuda, torch.bfloat16 if cuda else torch.float32, torch.cuda.synchronize if cuda else (lambda: None)


def random_prompts(size: str, prompts: int, length: int, gen):
    import torch

    return torch.randint(4, SIZES[size]["vocab_size"], (prompts, length), generator=gen).tolist()


def update_of(batch, device: str, gen):
    """The learner's rows for a generated batch, with random advantages (the check times the update alone)."""
    import torch

    from cohort.trainer.learner import UpdateBatch

    dev = lambda x: x.to(device)  # noqa: E731
    advantages = torch.randn(len(batch), generator=gen)[:, None].expand_as(batch.completion_mask)
    return UpdateBatch(dev(batch.input_ids), dev(batch.attention_mask), dev(batch.completion_mask.bool()),
                       dev(advantages), None, None)


def _worker(args: dict, cfg_data: dict, init: str, pin: bool) -> None:
    """The rollout worker's side of ``--overlap``: its own model on the same device, the newest weights from
    the weight thread of ``trainer.rollout_worker`` (staleness 1: batch s with a version >= s - 1), each
    batch to the learner with its version and timings."""
    import torch

    from cohort.trainer import rollout_worker, wire
    from cohort.trainer.config import TrainConfig
    from cohort.trainer.engines.hf import TransformersEngine

    a = argparse.Namespace(**args)
    _, dtype, sync = on_device(a.device)
    model, tokenizer = build(a.size, a.device, dtype)
    engine = TransformersEngine(TrainConfig.model_validate(cfg_data).rollout, model, tokenizer, seed=1)
    engine.stop_ids = torch.tensor([-1], device=a.device)
    links = wire.Links.join(init, 1, 2)
    weights = rollout_worker._Weights(links, model, pin)
    gen = torch.Generator().manual_seed(1)
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        version = weights.version
        weights.apply_newest(model, engine, at_least=max(0, step - 1))
        sync()
        t1 = time.perf_counter()
        batch = engine.generate(random_prompts(a.size, a.prompts, a.prompt_len, gen), a.generations)
        sync()
        t2 = time.perf_counter()
        wire.send({"step": step, "version": weights.version, "batch": batch, "weights_s": t1 - t0,
                   "loaded": weights.version != version, "generate_s": t2 - t1}, wire.LEARNER, links.up)
    weights.join(timeout=600)
    links.leave()


def overlapped(args, cfg, model, learner, lockstep: dict, pin: bool) -> dict:
    """``--overlap``: the learner's side. Step s consumes the batch generated for it (at most one version
    old), updates, and starts the broadcast of version s + 1 while the worker generates step s + 1.
    ``pin``: both ends hold the weights in page-locked host memory (one buffer here, reused once the previous
    broadcast is done), else in pageable memory as the CPU path does."""
    import torch

    from cohort.trainer import wire

    _, _, sync = on_device(args.device)
    rendezvous = tempfile.TemporaryDirectory()
    init = f"file://{rendezvous.name}/rendezvous"
    ctx = torch.multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_worker, args=(vars(args), cfg.model_dump(), init, pin), daemon=True)
    proc.start()
    links = wire.Links.join(init, wire.LEARNER, 2)
    t = time.perf_counter()
    numel = sum(p.numel() for p in model.parameters())
    buffer = torch.empty(numel, dtype=next(model.parameters()).dtype, pin_memory=pin)  # pageable, or page-locked

    def to_host():
        return wire.flat_parameters(model, buffer)  # into this arm's buffer (its own would be page-locked on a GPU)

    flat = to_host()
    works = wire.broadcast_weights(0, flat, links.weights)
    gen = torch.Generator().manual_seed(2)
    rows = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        _, got = wire.receive(links.up, 1)
        t1 = time.perf_counter()
        learner.step(update_of(got["batch"], args.device, gen))
        sync()
        t2 = time.perf_counter()
        for work in works:  # the previous version's broadcast (the worker's weight thread takes it)
            work.wait()
        t2a = time.perf_counter()
        flat = to_host()
        t2b = time.perf_counter()
        works = wire.broadcast_weights(step + 1, flat, links.weights)
        t3 = time.perf_counter()
        rows.append({"step": step, "step_s": t3 - t0, "wait_s": t1 - t0, "learner_s": t2 - t1, "weights_out_s": t3 - t2,
                     "previous_broadcast_s": t2a - t2, "to_host_s": t2b - t2a, "broadcast_start_s": t3 - t2b,
                     "staleness": step - got["version"], "worker_generate_s": got["generate_s"],
                     "worker_weights_s": got["weights_s"], "worker_loaded": got["loaded"]})
        print(f"pipelined ({'pinned' if pin else 'pageable'}) step {step}{' (warm-up)' if step == 0 else ''}: "
              f"{t3 - t0:.2f}s (waited {t1 - t0:.2f}s, "
              f"learner {t2 - t1:.2f}s, weights out {t3 - t2:.2f}s = previous broadcast {t2a - t2:.2f}s + to host "
              f"{t2b - t2a:.2f}s + start {t3 - t2b:.2f}s; worker generated {got['generate_s']:.2f}s, "
              f"staleness {step - got['version']})", flush=True)
    for work in works:
        work.wait()
    broadcast_s = time.perf_counter() - t3  # the last version's broadcast, not overlapped with anything
    for work in wire.end_weights(links.weights):
        work.wait()
    proc.join(timeout=600)
    links.leave()
    rendezvous.cleanup()
    timed = rows[1:] or rows
    med = lambda k: statistics.median(r[k] for r in timed)  # noqa: E731
    lock = lockstep["step_s"]
    return {
        "pinned": pin, "step_s": med("step_s"), "lockstep_step_s": lock, "speedup": lock / med("step_s"),
        "ideal_speedup": lock / max(lockstep["generate_s"], lockstep["learner_step_s"]),
        "learner_s": med("learner_s"), "learner_alone_s": lockstep["learner_step_s"],
        "worker_generate_s": med("worker_generate_s"), "generate_alone_s": lockstep["generate_s"],
        "wait_s": med("wait_s"), "weights_out_s": med("weights_out_s"), "last_broadcast_s": broadcast_s,
        "previous_broadcast_s": med("previous_broadcast_s"), "to_host_s": med("to_host_s"),
        "broadcast_start_s": med("broadcast_start_s"),
        "worker_weights_in_s": med("worker_weights_s"), "staleness_max": max(r["staleness"] for r in timed),
        "weight_bytes": flat.numel() * flat.element_size(), "wall_s": time.perf_counter() - t,
        "steps": rows,
    }


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
    ap.add_argument("--overlap", action="store_true",
                    help="then the same steps pipelined: generation in a second process, staleness 1 (on a GPU "
                         "twice: weights through pageable, then page-locked host memory)")
    args = ap.parse_args()

    import torch
    import transformers

    from cohort.trainer.config import load_config
    from cohort.trainer.engines.hf import TransformersEngine
    from cohort.trainer.learner import Learner

    cuda, dtype, sync = on_device(args.device)
    if cuda and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch.cuda.is_available() is false (use --device cpu --size tiny)")
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
    engine.stop_ids = torch.tensor([-1], device=args.device)  # no stop token: every row generates completion_len tokens
    learner = Learner(model, cfg)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for step in range(args.steps + 1):
        prompts = random_prompts(args.size, args.prompts, args.prompt_len, gen)
        sync()
        t0 = time.perf_counter()
        batch = engine.generate(prompts, args.generations)
        sync()
        t1 = time.perf_counter()
        metrics = learner.step(update_of(batch, args.device, gen))
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
    write(result, args.out)  # before --overlap: a failure there keeps the lock-step figures
    if args.overlap:  # pageable host memory (as the CPU path), then page-locked where there is a GPU
        result["overlap"] = overlapped(args, cfg, model, learner, result, pin=False)
        write(result, args.out)
        if cuda:
            result["overlap_pinned"] = overlapped(args, cfg, model, learner, result, pin=True)
            write(result, args.out)
    print(json.dumps(result, indent=2))


def write(result: dict, out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
