"""``cohort new-verifier``: write a ready-to-install verifier plugin package."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from cohort.cli import app, fail

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@app.command("new-verifier")
def new_verifier(
    name: str = typer.Argument(..., help="Verifier name (lowercase letters, digits, underscores), e.g. `units`."),
    directory: Path = typer.Option(Path("."), "--dir", help="Where to create the package folder cohort-verifier-NAME."),
) -> None:
    """Create a Python verifier plugin (entry point `cohort.verifiers`, conformance test, README) that
    passes the conformance kit as written. Then: pip install -e it, `cohort serve NAME`, pytest."""
    from cohort.verifiers import registry

    from cohort.conformance.plugin_template import render

    if not NAME_RE.match(name):
        fail(f"error: verifier name {name!r} must match {NAME_RE.pattern} (e.g. `units`, `json_schema`)")
    try:
        taken = name in registry.available()
    except registry.PluginError:
        taken = False
    if taken:
        fail(f"error: a verifier named {name!r} is already registered ({registry.available()[name].value})")
    files = render(name)
    root = directory / f"cohort-verifier-{name.replace('_', '-')}"
    if root.exists() and any(root.iterdir()):
        fail(f"error: {root} already exists and is not empty")
    try:
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"error: cannot write the package under {root}: {exc.strerror}", 1)
    typer.echo(f"created {root} ({len(files)} files). Next:")
    typer.echo(f"  pip install -e '{root}[test]'")
    typer.echo(f"  cohort serve {name} --port 50051")
    typer.echo(f"  (cd {root} && pytest)")
