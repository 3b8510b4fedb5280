"""``cohort verifiers``: what is installed, from the entry points (no server, no network).

Every verifier registered under ``cohort.verifiers`` (Cohort's built-ins, the adapters of other standards in
``cohort.verifiers.interop``, and any other package's plugins), each with its description, the reference
kinds it needs and its server-side options (its ``Options`` model: :mod:`cohort.verifiers.options`); then the
other direction, the fronts that put a Cohort verifier behind another ecosystem's trainer, with whether
their library is importable here.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import typer

from cohort.cli import app

FRONTS = [  # (how to run it, what it is, the module it needs)
    ("cohort serve front nemo-gym", "a NeMo-Gym resources server (POST /verify)", None),
    ("cohort serve front ors", "an Open Reward Standard environment", "openreward"),
    ("cohort serve front openenv", "an OpenEnv environment server", "openenv"),
    ("cohort.integrations.trl.CohortReward", "a TRL GRPOTrainer reward function", "trl"),
    ("cohort.integrations.verl", "a verl reward function", "verl"),
]


def _kind(ep: Any) -> str:
    module = ep.value.partition(":")[0]
    dist = getattr(ep, "dist", None)
    if dist is not None and dist.name not in ("cohort-rl", "cohort_rl"):
        return f"plugin ({dist.name} {dist.version})"
    return "adapter" if module.startswith("cohort.verifiers.interop.") else "built-in"


def _options(made_by: Any) -> list[dict[str, Any]]:
    from cohort.verifiers.registry import options_model

    model = options_model(made_by)
    if model is None:
        return []
    out = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        shown = getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        out.append({"name": name, "type": shown, "required": field.is_required(),
                    "default": default if isinstance(default, (str, int, float, bool, type(None))) else repr(default),
                    "doc": (field.description or "").strip()})
    return out


def catalogue() -> dict[str, list[dict[str, Any]]]:
    """The installed verifiers (loaded, not started) and the fronts, as plain data."""
    from cohort.verifiers.registry import available

    verifiers = []
    for name, ep in available().items():
        row: dict[str, Any] = {"name": name, "kind": _kind(ep), "entry_point": ep.value}
        try:
            made_by = ep.load()
        except Exception as exc:  # a missing extra, a broken plugin: listed, not fatal
            row.update(loadable=False, error=f"{type(exc).__name__}: {exc}"[:200])
            verifiers.append(row)
            continue
        kinds = getattr(made_by, "reference_kinds", None)
        row.update(loadable=True, version=getattr(made_by, "version", None),
                   description=" ".join(str(getattr(made_by, "description", "") or "").split()),
                   reference_kinds=list(kinds) if isinstance(kinds, (tuple, list)) else None,
                   options=_options(made_by))
        verifiers.append(row)
    fronts = [{"run": run, "what": what, "needs": needs,
               "available": needs is None or importlib.util.find_spec(needs) is not None} for run, what, needs in FRONTS]
    return {"verifiers": verifiers, "fronts": fronts}


@app.command("verifiers")
def verifiers_command(
    as_json: bool = typer.Option(False, "--json", help="Print the catalogue as JSON."),
) -> None:
    """List the installed verifiers (built-ins, adapters of other standards, plugins) with the reference kinds
    each needs and its server-side options, then the fronts that serve a Cohort verifier to other trainers."""
    data = catalogue()
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="installed verifiers (cohort serve NAME)", show_lines=True)
    for col in ("name", "kind", "reference kinds", "options (server-side)", "description"):
        table.add_column(col, overflow="fold")
    for v in data["verifiers"]:
        if not v["loadable"]:
            table.add_row(v["name"], v["kind"], "", "", f"[red]not loadable[/]: {v['error']}")
            continue
        kinds = "any" if v["reference_kinds"] == [] else ", ".join(v["reference_kinds"] or ["?"])
        options = "\n".join(f"{o['name']}: {o['type']}" + ("" if o["required"] else f" = {o['default']!r}")
                            for o in v["options"]) or "none"
        table.add_row(v["name"], v["kind"], kinds, options, v["description"])
    fronts = Table(title="Cohort verifiers behind other trainers", show_lines=False)
    for col in ("run", "what", "library here"):
        fronts.add_column(col, overflow="fold")
    for f in data["fronts"]:
        fronts.add_row(f["run"], f["what"], "built in" if f["needs"] is None else
                       (f"{f['needs']}: yes" if f["available"] else f"{f['needs']}: [yellow]not installed[/]"))
    console = Console()
    console.print(table)
    console.print(fronts)
