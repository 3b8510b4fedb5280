#!/usr/bin/env python
"""What each CPU fast path still buys: each one timed against the same work without it, on one workload.

Workloads (``--model``):

- ``tiny``: the shared TRL workload (``../shared/bench/trl_workload``, WORKLOAD.md): its 1M-parameter
  Llama, 8 prompts x G=8, 32 completion tokens, micro-batches of 32 rows (``bench/trainer_vs_trl.py``).
- ``smollm2``: SmolLM2-135M-Instruct (``named_model_folder``), 4 GSM8K prompts x G=8 through the chat
  template (the system prompt and suffix of ``bench/trainer_vs_trl_smollm2.py``), 128 completion
  tokens, micro-batches of 8 rows.
- ``embedded``: the main job's own tiny Llama and char tokenizer, 8 sums x G=8, 8 tokens (for a clone
  without ``../shared``: the smoke test).

All: fp32, ``--threads`` torch threads (2), temperature 1, top-p 1, beta 0.04 (reference log-probs in
the update), the default ``optim.micro_batch_cost_tokens``. The completions are sampled once (lean
decoder, seed 0) and reused by the log-prob and update measurements, so lengths vary as in training.

Paths, each fast variant against the variant without it (``PAIRS``):

1. ``generate``: the lean KV-cached decoder (``engines/llama_decode.py``, prompts prefilled once) vs the
   transformers module's decode loop (``TransformersEngine._decode_generic``), same settings and seed;
   compared per generated token (sampled lengths differ once rows finish at different steps).
2. ``logprobs/*``: no-grad ``forward.batched_logprobs`` of the batch (reference / old log-probs):
   LLAMA_CPU (rows packed by prompt, lean forward) vs MODULE, and the
   micro-batch dynamic programme (``forward_cost > 0``) vs fixed micro-batches (``0``) under LLAMA_CPU.
3. ``update/*``: one ``Learner.step`` (forward+backward over its micro-batches, clip, AdamW): the same
   four pairs.

Each round runs every variant of a path once, in turn (the order alternates between rounds), so a load
change hits both alike; reported times are medians over ``--rounds`` (>= 3 for a verdict), after
``--warmup`` untimed rounds. ratio = fast / plain seconds of the medians (per token for ``generate``),
gain = 1 - ratio; ``paired`` is the median over rounds of each round's own fast / plain (robust to a load
that changes between rounds).
When a packed group would pass ``packing.MAX_PACKED_TOKENS`` LLAMA_CPU runs the module's forward: the
back-end pairs are then reported as not applied (gain 0). A lean *unpacked* forward measured here bought
under 10% on both workloads (tiny -6%/+4%, SmolLM2 -2%/+4% for log-probs/update) and was removed.

    python bench/fast_paths.py --model tiny|smollm2|embedded [--rounds 3] [--warmup 1] [--threads 2] [--paths generate ...]
                               [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = (ROOT / ".." / "shared" / "bench" / "trl_workload").resolve()
GSM8K = (ROOT / ".." / "shared" / "data" / "gsm8k" / "train.jsonl").resolve()
if not GSM8K.exists():  # a clone without ../shared: the repository's own first GSM8K rows
    GSM8K = ROOT / "examples" / "data" / "gsm8k-mini" / "train.jsonl"
SYSTEM = "You are a concise assistant."  # as bench/trainer_vs_trl_smollm2.py
SUFFIX = "\nGive the final number inside <answer></answer>."

PAIRS = {  # path -> (fast variant, plain variant)
    "generate": ("lean_decoder", "transformers_decode"),
    "logprobs/llama_cpu_backend": ("llama_cpu", "module"),
    "logprobs/micro_batch_dp": ("llama_cpu", "llama_cpu_cost0"),
    "update/llama_cpu_backend": ("llama_cpu", "module"),
    "update/micro_batch_dp": ("llama_cpu", "llama_cpu_cost0"),
}


def load_workload(name: str, threads: int) -> dict[str, Any]:
    """The model, tokenizer, prompts (token ids, P of them), config overrides of one workload."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    if name == "tiny":
        if not (WORKLOAD / "WORKLOAD.md").exists():
            raise SystemExit(f"no TRL workload at {WORKLOAD}")
        tok = AutoTokenizer.from_pretrained(str(WORKLOAD / "tokenizer"))
        model = AutoModelForCausalLM.from_pretrained(str(WORKLOAD / "model"), dtype=torch.float32)
        rows = [json.loads(line) for line in (WORKLOAD / "data" / "train.jsonl").read_text().splitlines()]
        perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0)).tolist()
        prompts = [tok(rows[i]["prompt"], add_special_tokens=False)["input_ids"] for i in perm[:8]]
        return {"model": model, "tok": tok, "prompts": prompts, "g": 8, "max_new": 32, "micro_batch": 32}
    if name == "smollm2":
        from cohort.trainer.config import DataSection
        from cohort.trainer.data import encode_prompts
        from cohort.trainer.gguf_models import named_model_folder
        from cohort.verifiers.records import Task

        folder = str(named_model_folder("smollm2-135m-instruct"))
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        with open(GSM8K) as f:
            rows = [json.loads(next(f)) for _ in range(4)]
        tasks = [Task.with_answer(r["question"] + SUFFIX, r["answer"].split("####")[-1].strip()) for r in rows]
        prompts = encode_prompts(tasks, tok, DataSection(path=str(GSM8K), system_prompt=SYSTEM, chat_template="on"))
        return {"model": model, "tok": tok, "prompts": prompts, "g": 8, "max_new": 128, "micro_batch": 8}
    if name == "embedded":  # the main job's own tiny Llama and char tokenizer: nothing outside this repository
        from cohort.trainer.config import TinyModel
        from cohort.trainer.models import char_tokenizer, tiny_llama

        torch.manual_seed(0)
        tok = char_tokenizer()
        model = tiny_llama(TinyModel(), tok)
        prompts = [tok(f"{a}+{b}=", add_special_tokens=False)["input_ids"] for a, b in
                   [(3, 4), (12, 7), (25, 30), (8, 9), (40, 2), (17, 17), (6, 51), (33, 21)]]
        return {"model": model, "tok": tok, "prompts": prompts, "g": 8, "max_new": 8, "micro_batch": 32}
    raise SystemExit(f"--model: tiny, smollm2 or embedded, not {name!r}")


def config(w: dict[str, Any]):
    from cohort.trainer.config import load_config

    p = len(w["prompts"])
    return load_config(None, [f"grpo.prompts_per_step={p}", f"grpo.num_generations={w['g']}", "grpo.beta=0.04",
                              "rollout.temperature=1.0", "rollout.top_p=1.0",
                              f"rollout.max_completion_length={w['max_new']}",
                              f"optim.micro_batch_size={w['micro_batch']}", "optim.learning_rate=1e-4"])


def timed_rounds(variants: dict[str, Callable[[], float | None]], rounds: int, warmup: int) -> dict[str, list[float]]:
    """Run every variant once per round, in turn (reversed order every other round); each call returns
    its own measure (None: its wall time). Warm-up rounds are not kept."""
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            measure = variants[n]()
            seconds = time.perf_counter() - start if measure is None else measure
            if r >= warmup:
                out[n].append(seconds)
    return out


def run(model_name: str = "tiny", rounds: int = 3, warmup: int = 1, threads: int = 2,
        log: Callable[[str], None] = print, paths: list[str] | None = None,
        partial: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Time the pairs of ``PAIRS`` whose name starts with one of ``paths`` (all when None) on one workload,
    log-probs first, then updates, then generation; ``partial`` gets the result so far after each of the
    three. The result table: see the module docstring."""
    chosen = [n for n in PAIRS if paths is None or any(n.startswith(p) for p in paths)]
    from cohort.trainer.engines.hf import TransformersEngine
    from cohort.trainer.forward import LLAMA_CPU, MODULE, batched_logprobs
    from cohort.trainer.learner import Learner, UpdateBatch
    from cohort.trainer.packing import MAX_PACKED_TOKENS, packed_lengths

    class PlainEngine(TransformersEngine):
        """The engine with the transformers module's decode loop for every model."""

        def _decode(self, prompt_ids, prompt_mask, num_generations, max_new):
            was_training = self.policy.training
            self.policy.eval()
            try:
                g = num_generations
                return self._decode_generic(prompt_ids.repeat_interleave(g, 0), prompt_mask.repeat_interleave(g, 0),
                                            max_new)
            finally:
                self.policy.train(was_training)

    w = load_workload(model_name, threads)
    cfg = config(w)
    model, tok, prompts, g = w["model"], w["tok"], w["prompts"], w["g"]
    engines = {"lean_decoder": TransformersEngine(cfg.rollout, model, tok, seed=0),
               "transformers_decode": PlainEngine(cfg.rollout, model, tok, seed=0)}
    counts: dict[str, list[int]] = {n: [] for n in engines}

    def generate(name: str) -> Callable[[], float]:
        def call() -> float:
            engines[name].generator.manual_seed(0)
            start = time.perf_counter()
            batch = engines[name].generate(prompts, g)
            seconds = time.perf_counter() - start
            counts[name].append(int(batch.completion_mask.sum()))
            return seconds / counts[name][-1]  # seconds per generated token
        return call

    sample = engines["lean_decoder"]
    sample.generator.manual_seed(0)
    batch = sample.generate(prompts, g)  # the completions every later measurement reuses
    ids, mask, t = batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1]
    comp = batch.completion_mask.sum(1)
    longest_pack = max(packed_lengths(ids, mask, t)[1])
    packs = longest_pack <= MAX_PACKED_TOKENS
    log(f"{model_name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"{len(prompts)} prompts x G={g}, prompt tokens {min(map(len, prompts))}-{max(map(len, prompts))}, "
        f"completion tokens min/median/max {int(comp.min())}/{int(comp.median())}/{int(comp.max())} of {w['max_new']}, "
        f"micro-batch {w['micro_batch']}, forward_cost {cfg.optim.micro_batch_cost_tokens}, torch threads "
        f"{torch.get_num_threads()}; longest packed group {longest_pack} tokens "
        f"({'packed' if packs else f'> {MAX_PACKED_TOKENS}: LLAMA_CPU runs unpacked'})")

    cost = cfg.optim.micro_batch_cost_tokens
    backends = {"module": (MODULE, cost), "llama_cpu": (LLAMA_CPU, cost), "llama_cpu_cost0": (LLAMA_CPU, 0)}
    lp_of = {}

    def logprobs(name: str) -> Callable[[], None]:
        fwd, c = backends[name]

        def call() -> None:
            lp_of[name] = batched_logprobs(model, ids, mask, t, cfg.rollout.temperature, w["micro_batch"], c, fwd)
        return call

    reference = batched_logprobs(model, ids, mask, t, 1.0, w["micro_batch"])  # (B, T) module, frozen values
    advantages = torch.randn(ids.shape[0], 1, generator=torch.Generator().manual_seed(0)).expand(-1, t)  # (B, T)
    update = UpdateBatch(ids, mask, batch.completion_mask.bool(), advantages.contiguous(), None, reference)
    learner = Learner(model, cfg)
    if learner.forward.name != LLAMA_CPU.name:
        raise SystemExit(f"{model_name}: the learner chose {learner.forward.name}, not llama_cpu")

    def step(name: str) -> Callable[[], None]:
        fwd, c = backends[name]

        def call() -> None:
            learner.forward, learner.forward_cost = fwd, c
            learner.step(update)
        return call

    def needed(kind: str) -> list[str]:
        names = {v for n in chosen if n.startswith(kind) for v in PAIRS[n]}
        return [n for n in (backends if kind != "generate" else engines) if n in names]

    times: dict[str, dict[str, list[float]]] = {}
    valid = batch.completion_mask.bool()
    result = {"model": model_name, "rounds": rounds, "threads": torch.get_num_threads(), "times": times,
              "generated_tokens": counts, "packed": packs, "longest_packed_group": longest_pack,
              "logprob_max_abs_diff": {}, "pairs": {}}
    for kind, make in (("logprobs", logprobs), ("update", step), ("generate", generate)):
        if needed(kind):
            log(f"timing {kind}: {', '.join(needed(kind))} ...")
            times[kind] = timed_rounds({n: make(n) for n in needed(kind)}, rounds, warmup)
            result["logprob_max_abs_diff"] = {n: float((lp - lp_of["module"])[valid].abs().max())
                                              for n, lp in lp_of.items()} if "module" in lp_of else {}
            result["pairs"] = pair_table(times, packs, chosen)
            if partial is not None:
                partial(result)
    learner.optimizer.zero_grad(set_to_none=True)
    print_table(result, log)
    return result


def pair_table(times: dict[str, dict[str, list[float]]], packs: bool,
               chosen: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Median times, ratio and gain of the ``chosen`` pairs timed so far (all of ``PAIRS`` by default);
    the LLAMA_CPU back-end is not applied when ``not packs`` (it then runs the module's forward)."""
    table = {}
    for path in chosen or PAIRS:
        fast, plain = PAIRS[path]
        kind = path.split("/")[0]
        if kind not in times:
            continue
        got = times[kind]
        if (not packs and path.endswith("llama_cpu_backend")) or fast not in got or plain not in got:
            table[path] = {"fast": fast, "plain": plain, "applied": False, "fast_s": None, "plain_s": None,
                           "ratio": 1.0, "gain": 0.0, "paired_ratio": 1.0}
            continue
        f, p = statistics.median(got[fast]), statistics.median(got[plain])
        paired = statistics.median(a / b for a, b in zip(got[fast], got[plain]))  # same round: same load
        table[path] = {"fast": fast, "plain": plain, "applied": True, "fast_s": f, "plain_s": p,
                       "ratio": f / p, "gain": 1 - f / p, "paired_ratio": paired}
    return table


def print_table(result: dict[str, Any], log: Callable[[str], None] = print) -> None:
    unit = {"generate": "s/token"}
    log(f"\n{result['model']}: median of {result['rounds']} rounds, {result['threads']} torch threads")
    log(f"{'path':28}{'fast':>16}{'plain':>20}{'fast':>12}{'plain':>12}{'ratio':>8}{'gain':>8}{'paired':>8}")
    for path, row in result["pairs"].items():
        u = unit.get(path.split("/")[0], "s")
        if not row["applied"]:
            log(f"{path:28}{row['fast']:>16}{row['plain']:>20}{'not applied on this workload':>32}"
                f"{row['ratio']:8.3f}{row['gain']:8.1%}{row['paired_ratio']:8.3f}")
            continue
        scale, fmt = (1e3, "{:9.3f}ms") if u == "s/token" else (1.0, "{:10.3f}s ")
        log(f"{path:28}{row['fast']:>16}{row['plain']:>20}{fmt.format(row['fast_s'] * scale):>12}"
            f"{fmt.format(row['plain_s'] * scale):>12}{row['ratio']:8.3f}{row['gain']:8.1%}{row['paired_ratio']:8.3f}")
    log("ratio: of the medians; paired: median over rounds of each round's fast/plain; generate: ms per generated "
        "token; log-prob max |diff| vs module: "
        + ", ".join(f"{n} {d:.2e}" for n, d in result["logprob_max_abs_diff"].items()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "smollm2", "embedded"], default="tiny")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per path (>= 3 for a verdict)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--paths", nargs="*", default=None,
                    help=f"only the pairs whose name starts with one of these (default: all of {', '.join(PAIRS)})")
    ap.add_argument("--json", type=Path, default=None, help="write the result here (also after each phase)")
    args = ap.parse_args(argv)

    def save(result: dict[str, Any]) -> None:
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))

    result = run(args.model, args.rounds, args.warmup, args.threads, paths=args.paths, partial=save)
    save(result)
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
