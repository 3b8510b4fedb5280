#!/usr/bin/env python
"""TRL 1.16 ``GRPOTrainer`` on a Cohort task config: the ``trl`` arm of ``bench/reasoning_rise.py``.

Runs in ``.venv-peer`` (torch 2.13, trl 1.16, this checkout editable; ``scripts/ci-trl`` creates it), started
by ``reasoning_rise.py``, which then evaluates the saved model with ``cohort eval`` exactly as it evaluates
Cohort's arms. Written as a separate file because it imports TRL, which the main venv does not have.

    .venv-peer/bin/python bench/reasoning_trl.py -c examples/smollm2-multistep-addsub.yaml --out DIR --seed 0 --steps 30

What TRL gets from the Cohort config (``load_config``), value for value:

- the model folder (``named_model_folder(model.name)``, float32) and its tokenizer;
- the rows of ``data.sources`` (their ``messages`` as TRL's conversational prompts, ``answer`` as the reference);
- rewards: the same verifiers (``scoring.verifiers``, weights and options) as one ``CohortReward``, served by
  ``cohort serve`` processes this script starts on loopback (as ``cohort train`` starts its own; their CPU time
  counts in this process's reaped children, as it does for ``cohort train``);
- G = ``grpo.num_generations``, ``grpo.prompts_per_step`` prompts per optimizer step (``per_device_train_batch_size``
  G x prompts, in micro-batches of ``--micro-batch`` rows, TRL's default 8, through gradient accumulation),
  ``beta``, ``epsilon``, ``epsilon_high``, ``loss_type``, ``scale_rewards``, ``num_iterations``,
  ``mask_truncated_completions``; temperature, ``top_p``, ``max_completion_length``; the optimizer's learning rate,
  weight decay, Adam betas and epsilon, gradient clipping, scheduler and warm-up; ``run.seed`` as TRL's seed;
  no gradient checkpointing (Cohort's default).

Differences that remain (written to ``trl.json``): TRL samples with ``transformers.generate`` (Cohort with its own
KV-cached decoder), and takes an optimizer step even when no group has signal (Cohort skips the update; with ``beta: 0`` the gradient is zero but
Adam's momentum still moves the weights).

Writes ``OUT/final`` (``save_model``: weights and tokenizer, loadable by ``cohort eval --model``),
``OUT/metrics.jsonl`` (TRL's logs per step: ``reward``, ``rewards/cohort/mean``, completion lengths) and
``OUT/trl.json`` (the TRL settings used and the differences). Not resumable: a run killed half way starts over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

DIFFERENCES = [
    "TRL samples with transformers.generate, Cohort with its own KV-cached decoder",
    "prompt order: Cohort's PromptSampler draws epoch 0 in the permutation of TRL's RepeatSampler with the same "
    "seed (trainer/data.py); not checked here",
    "TRL takes an optimizer step when no group has signal (zero gradient, Adam momentum still applies); Cohort skips it",
]


def rows_of(cfg) -> list[dict]:
    """The training rows of every ``data.sources`` entry (JSONL with ``messages`` and ``answer``)."""
    rows = []
    for source in cfg.data.sources:
        if not source.path or not str(source.path).endswith(".jsonl"):
            sys.exit(f"error: {source.name}: only JSONL sources with messages and answer are supported here")
        lines = [line for line in Path(source.path).read_text().splitlines() if line.strip()]
        for line in lines[:source.limit]:
            row = json.loads(line)
            rows.append({"prompt": row["messages"], "answer": str(row["answer"]), "options": row.get("options", {})})
    if not any(r["options"] for r in rows):  # no verifier options per row: no options column
        for r in rows:
            del r["options"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("overrides", nargs="*", help="section.field=value, over the config (as cohort train takes them)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the config's run.torch_threads)")
    ap.add_argument("--micro-batch", type=int, default=8,
                    help="rows per forward/backward (TRL's default, 8; 0: the config's optim.micro_batch_size). At "
                         "32 rows of the multi-step task TRL peaked at 15 GB, Cohort at 3-5 GB")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from cohort.integrations.trl import CohortReward
    from cohort.rpc.launch import LocalServices
    from cohort.trainer.config import load_config
    from cohort.trainer.gguf_models import named_model_folder
    from cohort.verifiers.client import WeightedVerifier

    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(args.threads or cfg.run.torch_threads or 1)
    model = str(named_model_folder(cfg.model.name))
    tok = AutoTokenizer.from_pretrained(model)
    data = Dataset.from_list(rows_of(cfg))
    g, o = cfg.grpo, cfg.optim
    batch = g.prompts_per_step * g.num_generations
    micro = min(args.micro_batch or o.micro_batch_size, batch)
    if batch % micro:
        sys.exit(f"error: {batch} completions per step are not a multiple of the micro-batch, {micro} rows")
    args.out.mkdir(parents=True, exist_ok=True)
    trl_cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_reasoning_"), use_cpu=True, bf16=False, fp16=False,
        seed=args.seed, max_steps=args.steps, num_generations=g.num_generations,
        per_device_train_batch_size=micro, gradient_accumulation_steps=batch // micro,
        beta=g.beta, epsilon=g.epsilon, epsilon_high=g.epsilon_high, loss_type=g.loss_type,
        scale_rewards=g.scale_rewards, num_iterations=g.num_iterations,
        mask_truncated_completions=g.mask_truncated_completions, use_bias_correction_kl=False,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
        max_completion_length=cfg.rollout.max_completion_length,
        learning_rate=o.learning_rate, weight_decay=o.weight_decay, adam_beta1=o.adam_beta1,
        adam_beta2=o.adam_beta2, adam_epsilon=o.adam_epsilon, max_grad_norm=o.max_grad_norm,
        lr_scheduler_type=o.lr_scheduler_type, warmup_steps=o.warmup_steps, gradient_checkpointing=False,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
    )
    log = open(args.out / "metrics.jsonl", "w")

    class Log(TrainerCallback):
        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "train_runtime" not in logs:
                log.write(json.dumps({"step": state.global_step, **logs}) + "\n")
                log.flush()
                print(f"step {state.global_step}: reward {logs.get('reward', float('nan')):.3f}", flush=True)

    names = [v.name for v in cfg.scoring.verifiers]
    with LocalServices(names) as endpoints:
        reward = CohortReward([WeightedVerifier(v.name, v.weight, [endpoints[v.name]], dict(v.options))
                               for v in cfg.scoring.verifiers], reference_column="answer",
                              options_column="options" if "options" in data.column_names else None)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=trl_cfg, train_dataset=data,
                              processing_class=tok, callbacks=[Log()])
        try:
            trainer.train()
        finally:
            reward.close()
    trainer.save_model(str(args.out / "final"))
    tok.save_pretrained(str(args.out / "final"))
    used = {k: getattr(getattr(trl_cfg, k), "value", getattr(trl_cfg, k)) for k in (
        "learning_rate", "lr_scheduler_type", "weight_decay", "max_grad_norm", "beta", "epsilon", "epsilon_high",
        "loss_type", "scale_rewards", "num_generations", "per_device_train_batch_size",
        "gradient_accumulation_steps", "temperature", "top_p", "max_completion_length", "seed", "max_steps")}
    (args.out / "trl.json").write_text(json.dumps({"settings": used, "differences": DIFFERENCES}, default=str, indent=1))


if __name__ == "__main__":
    main()
