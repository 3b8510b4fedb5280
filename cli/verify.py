"""``cohort verify``: score a JSONL file of rollouts against verifier endpoints."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail


def _pairs(values: list[str], what: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, rest = v.partition("=")
        if not sep or not name or not rest:
            raise typer.BadParameter(f"expected NAME=VALUE, got {v!r}", param_hint=what)
        out.append((name.strip(), rest.strip()))
    return out


@app.command()
def verify(
    file: Path = typer.Argument(..., help="JSONL, one group per line (format: the module `cohort.verifiers.records`)."),
    endpoint: list[str] = typer.Option(..., "--endpoint", "-e", help="NAME=HOST:PORT; repeat for several verifiers or replicas."),
    weight: list[str] = typer.Option([], "--weight", "-w", help="NAME=W (default 1.0 each)."),
    timeout: float = typer.Option(60.0, min=0.001, help="Seconds for the whole scoring call per batch."),
    retries: int = typer.Option(4, min=0, help="Retries (with failover) on UNAVAILABLE / RESOURCE_EXHAUSTED."),
    batch_size: int = typer.Option(256, min=1, help="Groups per batch (one BatchVerifyGroups per verifier per batch)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per rollout instead of a table."),
    max_rows: int = typer.Option(200, min=0, help="Rows shown in the table (totals always cover everything)."),
    tls_ca: Path | None = typer.Option(None, help="PEM CA of the servers' certificates: connect with TLS."),
    tls_cert: Path | None = typer.Option(None, help="PEM client certificate (mutual TLS; with --tls-key)."),
    tls_key: Path | None = typer.Option(None, help="PEM private key of --tls-cert."),
    tls_server_name: str | None = typer.Option(None, help="Name the servers' certificates must carry, if not the endpoint host."),
) -> None:
    """Score rollouts with one or more verifiers, print a table (or JSON) and totals.

    On a terminal the table is drawn to its width; into a pipe or a file it is plain text, one tab-separated
    line per rollout under a header line (group, idx, each verifier, reward, detail).

    Exit codes: 0 scored (whatever the verdicts), 2 bad input, 3 a verifier is unreachable at startup.
    """
    import asyncio

    from cohort.verifiers.records import RecordError, read_records

    endpoints: dict[str, list[str]] = {}
    for name, address in _pairs(endpoint, "--endpoint"):
        endpoints.setdefault(name, []).append(address)
    weights = {name: float_or_fail(w) for name, w in _pairs(weight, "--weight")}
    unknown = set(weights) - set(endpoints)
    if unknown:
        raise typer.BadParameter(f"weights for verifiers without an endpoint: {sorted(unknown)}", param_hint="--weight")
    if not file.is_file():
        fail(f"error: {file}: no such file")
    try:
        records = list(read_records(file))
    except RecordError as exc:
        fail(f"error: {exc}")
    if not records:
        fail(f"error: {file} holds no records")
    for rec in records:
        missing = {u.name for u in rec.task.verifiers or ()} - set(endpoints)
        if missing:
            fail(f"error: group {rec.task.id!r} asks for verifiers without an endpoint: {sorted(missing)}")
    from cohort.rpc.tls import ClientTls, TlsError
    from cohort.cli.verify_run import run_verify

    try:
        tls = ClientTls.from_options(tls_ca, tls_cert, tls_key, tls_server_name)
    except TlsError as exc:
        fail(f"error: {exc}")
    code = asyncio.run(run_verify(records, endpoints, weights, timeout, retries, batch_size, as_json, max_rows, tls=tls))
    raise typer.Exit(code)


def float_or_fail(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise typer.BadParameter(f"not a number: {text!r}", param_hint="--weight") from None
