"""``cohort train [-c FILE ...] [section.field=value ...]``: GRPO training (no file: the embedded default)."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail, train_config


@app.command(context_settings={"allow_extra_args": False})
def train(
    overrides: list[str] = typer.Argument(
        None, help="Overrides such as grpo.beta=0.04 run.max_steps=50 (applied last)."),
    config: list[Path] = typer.Option([], "--config", "-c",
                                      help="YAML layered over the embedded default: give only what differs. "
                                           "Repeatable: each file over the ones before (later ones win)."),
    print_config: bool = typer.Option(False, "--print-config",
                                      help="Print the resolved config (and its layers) and exit."),
) -> None:
    """Train a policy with GRPO against verifier services (no --config: the embedded tiny task).

    Re-running with the same run.output_dir resumes from its newest checkpoint; run.resume=false starts
    fresh there (its old checkpoints are deleted), or pick a new run.output_dir. Exit codes: 0 done,
    1 the run failed, 2 bad config or input (a missing model folder, a malformed data row, an unreachable or
    misconfigured verifier endpoint: checked in seconds, before the model is built), 130 / 143 stopped by
    SIGINT / SIGTERM (Ctrl-C, kill): the step in flight finished and saved first; the same command resumes.
    """
    from cohort.trainer.config import dump_config

    cfg = train_config(config, overrides or [])
    if print_config:
        typer.echo(dump_config(cfg))
        return
    import os
    import signal
    import sys

    if cfg.model.device.startswith("cuda"):  # before anything starts: a GPU asked for and missing is a config error
        from cohort.trainer.distributed import local_device

        try:
            local_device(cfg.model.device)
        except ValueError as exc:
            fail(f"error: invalid config: {exc}")
        except RuntimeError as exc:  # CUDA refused the device (busy, exclusive-process mode)
            fail(f"error: {exc}", 1)
        from cohort.trainer.memory import check_fits

        try:  # the memory plan (cohort plan) against the GPU, before the model loads
            check_fits(cfg)
        except ValueError as exc:
            fail(f"error: {exc}")

    from cohort.trainer.placement import PlacementError, check_config

    try:  # no two processes on one GPU unless rollout.colocate (trainer.placement)
        check_config(cfg)
    except PlacementError as exc:
        fail(f"error: invalid config: {exc}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cohort.trainer.preflight import check as check_inputs

    try:  # a missing model folder, a bad row, an unreachable endpoint: reported now, not minutes into the start
        check_inputs(cfg)
    except ValueError as exc:
        fail(f"error: {exc}")
    # SIGTERM unwinds like Ctrl-C, so local verifier services are stopped and the metrics file closed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from cohort.trainer import spawn_workers

    early = spawn_workers.start_early(cfg)  # rollout workers start up while this process imports the trainer
    from cohort.trainer.train import run

    try:
        records = run(cfg, early)
    except (ValueError, RuntimeError, OSError) as exc:  # OSError: a write the run needs failed (a full disk)
        fail(f"error: {exc}", 1)
    if records:
        last = records[-1]
        curve = f", curve in {cfg.run.output_dir}/reward_curve.png" if cfg.run.plot else ""
        reward = "n/a" if last.get("reward/mean") is None else f"{last['reward/mean']:.3f}"
        masked, outage = int(last.get("verify/masked_rounds", 0)), last.get("verify/outage_s", 0.0)
        typer.echo(f"done: step {last['step']}, reward/mean {reward}; {masked} fully masked round(s) not counted "
                   f"as steps, verifiers unavailable {outage:.1f} s; metrics in {cfg.run.output_dir}/metrics.jsonl{curve}")
