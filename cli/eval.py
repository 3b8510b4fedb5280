"""``cohort eval``: a model (checkpoint or base) on task rows, G samples per prompt, the training verifiers."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail


@app.command("eval")
def eval_(
    overrides: list[str] = typer.Argument(None, help="Config overrides, e.g. data.path=rows.jsonl rollout.temperature=0.6."),
    config: list[Path] = typer.Option([], "--config", "-c", help="YAML config (model, data, scoring, rollout), "
                                                                  "repeatable (later files win); default: the "
                                                                  "embedded one."),
    model: str | None = typer.Option(None, "--model", "-m", help="A checkpoint folder (e.g. runs/x/final) or a "
                                                                 "packaged model name; default: the config's model."),
    data: str | None = typer.Option(None, "--data", "-d", help="Task rows (JSONL, Parquet, datasets folder) instead "
                                                               "of the config's data."),
    split: str | None = typer.Option(None, help="Split of a datasets folder given with --data."),
    samples: int = typer.Option(4, "--samples", "-n", min=1, help="G: completions per prompt."),
    k: int = typer.Option(0, "-k", min=0, help="pass@k (default: the number of samples)."),
    limit: int | None = typer.Option(None, min=1, help="Only the first N rows."),
    batch_prompts: int = typer.Option(8, min=1, help="Prompts per generate call."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per rollout on stdout (table on stderr)."),
) -> None:
    """Evaluate a model: mean reward, pass@1 and pass@k per task source and per verifier, counts per status.

    Exit codes: 0 evaluated, 2 bad config or data, 1 a failure while running (e.g. a verifier unreachable).
    """
    import json
    import os

    from pydantic import ValidationError

    from cohort.trainer.config import load_config

    extra = list(overrides or [])
    if model is not None:  # a packaged model's name, else a folder (one that is missing is named as such below)
        from cohort.trainer.gguf_models import NAMED_MODELS

        kind = "name" if model in NAMED_MODELS and not Path(model).exists() else "path"
        extra += ["model.tiny=null", "model.path=null", "model.name=null", f"model.{kind}={model}"]
    if data is not None:
        extra += ["data.arithmetic=null", "data.path=null", "data.sources=null",
                  f"data.sources=[{json.dumps({'path': data, 'split': split})}]"]
    try:
        cfg = load_config(config, extra)
    except (ValidationError, ValueError, OSError) as exc:
        fail(f"error: invalid config: {exc}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cohort.trainer.preflight import check as check_inputs

    try:  # a missing model folder, a bad row, an unreachable endpoint: reported before the model loads
        check_inputs(cfg, "--model" if model is not None else None, weighted=False)
    except ValueError as exc:
        fail(f"error: {exc}")
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from cohort.trainer import tool_rollouts
    from cohort.trainer.evaluate import evaluate
    from cohort.trainer.train import verifier_endpoints

    console = Console(stderr=as_json)
    if not console.is_terminal:  # a pipe or a file: do not squeeze the table into 80 columns
        console.width = 160
    emit = (lambda row: print(json.dumps(row), flush=True)) if as_json else None
    try:
        with verifier_endpoints(cfg) as endpoints, tool_rollouts.local_servers(cfg) as cfg, \
                Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("eval", total=None)
            result = evaluate(cfg, endpoints, samples, k or samples, limit=limit, prompts_per_batch=batch_prompts,
                              on_rollout=emit, on_progress=lambda done, total: progress.update(task, completed=done,
                                                                                             total=total))
    except ValueError as exc:
        fail(f"error: {exc}")
    except RuntimeError as exc:
        fail(f"error: {exc}", 1)
    kk = k or samples
    tools = cfg.rollout.max_turns > 1
    table = Table("slice", "prompts", "rollouts", "usable", "reward", "pass@1", f"pass@{kk}",
                  *(("tool calls/rollout", "tool errors") if tools else ()), "statuses",
                  title=f"{cfg.model.path or cfg.model.name or 'tiny model'}: {samples} samples per prompt")
    for name, s in result.summary().items():
        table.add_row(name, str(s["prompts"]), str(s["rollouts"]), str(s["usable"]), f"{s['reward_mean']:.3f}",
                      f"{s['pass@1']:.3f}", f"{s[f'pass@{kk}']:.3f}",
                      *((f"{s['tool_calls_per_rollout']:.2f}", f"{s['tool_error_rate']:.3f}") if tools else ()),
                      " ".join(f"{st}:{n}" for st, n in sorted(s["statuses"].items())))
    console.print(table)
