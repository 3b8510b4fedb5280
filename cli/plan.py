"""``cohort plan [-c FILE ...] [overrides]``: the memory a run's learner step needs, by part, before anything loads."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail, train_config


@app.command()
def plan(
    overrides: list[str] = typer.Argument(None, help="Overrides, as for cohort train."),
    config: list[Path] = typer.Option([], "--config", "-c", help="YAML files layered as for cohort train."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto (the configured model.device's kind)."),
    memory_gib: float = typer.Option(None, "--memory-gib", help="The device's memory (default: the GPU's own, "
                                                                 "or unknown on the CPU)."),
    prompt_tokens: int = typer.Option(None, help="Prompt length assumed for every row (default 256, or what the "
                                                   "model's positions leave beside the completion if fewer)."),
) -> None:
    """Estimate one learner step's peak memory by part (weights, compute copy, gradients, optimizer, activations,
    logits, reference, engine) from the model's config.json only, and the micro-batch it would pick. Exit 0 when
    it fits, 1 when it does not (with the largest micro-batch token budget that fits)."""
    cfg = train_config(config, overrides or [])
    from cohort.trainer import memory

    kind = device
    if kind == "auto":
        kind = "cuda" if cfg.model.device.startswith("cuda") else "cpu"
        if cfg.model.device == "auto":
            import torch

            kind = "cuda" if torch.cuda.is_available() else "cpu"
    total = None if memory_gib is None else int(memory_gib * memory.GIB)
    if total is None and kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail("error: --device cuda on a machine without one: give --memory-gib (e.g. 80 for an H100)")
        total = torch.cuda.get_device_properties(0).total_memory
    try:
        model_config = memory.model_config(cfg)
    except (ValueError, OSError) as exc:
        fail(f"error: {exc}")
    if prompt_tokens is None:
        room = int(model_config.get("max_position_embeddings") or 1 << 20) - cfg.rollout.max_completion_length
        prompt_tokens = max(1, min(256, room))
    p = memory.plan(cfg, model_config, kind, total, prompt_tokens)
    typer.echo(f"model.dtype={cfg.model.dtype} on {kind}, batch {cfg.batch_size} rows x "
               f"({prompt_tokens} prompt + {cfg.rollout.max_completion_length} completion) tokens")
    for line in p.lines():
        typer.echo(line)
    if not p.fits():
        budget = memory.largest_budget_that_fits(cfg, model_config, kind, total, prompt_tokens)
        fail(f"does not fit: set optim.micro_batch_tokens={budget}" if budget else
             "does not fit at one row a micro-batch: LoRA (model.lora.rank=16), optim.gradient_checkpointing=true "
             "or a smaller model", 1)
