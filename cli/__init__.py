"""The ``cohort`` command. Each sub-module registers its commands on ``app``.

Heavy imports (torch, SymPy, grpc) happen inside the commands, so ``cohort --help``
stays fast and the verifier images never import torch.
"""

from __future__ import annotations

import importlib
from typing import NoReturn

import typer

app = typer.Typer(
    name="cohort",
    help="Cohort: GRPO training with rewards from verifier services over gRPC.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)

# Command modules; each does `from cohort.cli import app` and decorates its commands.
COMMAND_MODULES = ["serve", "verify", "sandbox", "train", "plan", "eval", "conformance", "scaffold", "catalogue"]


def fail(message: str, code: int = 2) -> NoReturn:
    """Every command's way out on bad input (exit 2) or a failure (another ``code``): one line on stderr (red on a
    terminal), never a traceback."""
    typer.secho(message, err=True, fg="red")
    raise typer.Exit(code)


def train_config(files: list, overrides: list[str]):
    """The ``TrainConfig`` of ``-c`` files and overrides (``train``, ``plan``), or one line and exit 2."""
    from pydantic import ValidationError

    from cohort.trainer.config import explain, load_config

    for path in files:
        if not path.is_file():
            fail(f"error: config file {path} does not exist")
    try:
        return load_config(files, overrides)
    except ValidationError as exc:
        fail(f"error: invalid config: {explain(exc)}")
    except (ValueError, OSError) as exc:
        fail(f"error: invalid config: {exc}")


def _load_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"cohort.cli.{name}")


def main() -> None:
    _load_commands()
    app()
