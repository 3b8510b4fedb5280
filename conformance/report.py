"""The pass/fail table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from cohort.conformance.runner import CheckResult

STYLE = {"pass": "[green]PASS[/]", "fail": "[bold red]FAIL[/]", "skip": "[yellow]SKIP[/]"}


def render(results: Sequence[CheckResult], endpoint: str, verifier: str, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"conformance of {verifier!r} at {endpoint}", show_lines=False, expand=False)
    table.add_column("rule", style="bold", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for r in results:
        table.add_row(r.rule, STYLE[r.status], f"{r.seconds:.2f}s", r.detail)
    console.print(table)
    failed = [r.rule for r in results if r.status == "fail"]
    skipped = [r.rule for r in results if r.status == "skip"]
    passed = len(results) - len(failed) - len(skipped)
    line = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if failed:
        console.print(f"[bold red]NOT CONFORMANT[/]: {line} (failed: {', '.join(failed)})")
    else:
        console.print(f"[bold green]CONFORMANT[/]: {line}")
