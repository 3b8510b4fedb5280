"""``cohort conformance``: check a verifier server against the contract, over the wire."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail


@app.command()
def conformance(
    endpoint: str = typer.Argument(..., help="host:port of the verifier server (with --server-cmd: where it will listen; port 0 picks a free one)."),
    verifier: str = typer.Option(..., "--verifier", "-v", help="Verifier name the server registers."),
    cases: Path = typer.Option(..., "--cases", help="JSONL known-answer cases (see cohort.conformance.cases)."),
    server_cmd: str | None = typer.Option(
        None, help="Command that starts the server on ENDPOINT ({host}/{port} are filled in); enables the SIGTERM rule."
    ),
    rule: list[str] | None = typer.Option(None, "--rule", help="Run only these rules (repeatable); default: all."),
    connect_timeout: float = typer.Option(5.0, min=0.1, help="Seconds to wait for the endpoint to accept connections."),
    startup_timeout: float = typer.Option(60.0, min=1.0, help="Seconds a --server-cmd server may take to turn SERVING."),
    grace: float = typer.Option(30.0, min=1.0, help="Seconds the server may take to exit after SIGTERM."),
    first_call_timeout: float = typer.Option(
        15.0, min=0.1, help="Seconds each method's first call may take; past it the server is reported hung at once."),
    tls_ca: Path | None = typer.Option(None, help="PEM CA of the server's certificate: connect with TLS."),
    tls_cert: Path | None = typer.Option(None, help="PEM client certificate (mutual TLS; with --tls-key)."),
    tls_key: Path | None = typer.Option(None, help="PEM private key of --tls-cert."),
    tls_server_name: str | None = typer.Option(None, help="Name the server's certificate must carry, if not ENDPOINT's host."),
) -> None:
    """Run the conformance kit: health, reflection, ListVerifiers, known answers, completeness, order,
    determinism, status codes, concurrency, deadlines and (with --server-cmd) graceful SIGTERM.

    Prints a pass/fail table; exits 1 if any rule fails, 2 on bad input, an unreachable endpoint or a
    server that does not serve --verifier.
    """
    from rich.console import Console

    from cohort.conformance import (RULES, CasesError, EndpointUnreachable, KitOptions, ServerStartError, VerifierNotServed,
                                    load_cases, run_kit)
    from cohort.conformance.report import render

    if ":" not in endpoint or not endpoint.rpartition(":")[2].isdigit():
        fail(f"error: ENDPOINT must be host:port, got {endpoint!r}")
    unknown = sorted(set(rule or ()) - set(RULES))
    if unknown:
        fail(f"error: unknown rule(s) {', '.join(unknown)}; the rules are: {', '.join(RULES)}")
    try:
        loaded = load_cases(cases, verifier)
    except CasesError as exc:
        fail(f"error: {exc}")
    from cohort.rpc.tls import ClientTls, TlsError

    try:
        tls = ClientTls.from_options(tls_ca, tls_cert, tls_key, tls_server_name)
    except TlsError as exc:
        fail(f"error: {exc}")
    options = KitOptions(grace_s=grace, startup_s=startup_timeout, tls=tls, first_call_timeout_s=first_call_timeout)
    try:
        results = run_kit(endpoint, verifier, loaded, server_cmd=server_cmd, rules=rule or None, options=options,
                          connect_timeout_s=connect_timeout)
    except (EndpointUnreachable, VerifierNotServed) as exc:
        fail(f"error: {exc}")
    except ServerStartError as exc:
        fail(f"error: the server did not start: {exc}")
    render(results, endpoint, verifier, Console(width=160))
    raise typer.Exit(1 if any(r.status == "fail" for r in results) else 0)


@app.command("conformance-tools")
def conformance_tools(
    endpoint: str = typer.Argument(..., help="host:port of the grpo.tool.v1 server."),
    timeout: float = typer.Option(15.0, min=0.1, help="Seconds each call may take."),
) -> None:
    """Check a tool server (grpo.tool.v1, any language) against the contract: health, reflection, ListTools
    schemas and limits, result order and ids, a call's own faults reported in-band (never masked), output
    limits, empty and repeated-id batches.

    Prints a pass/fail table; exits 1 if any rule fails, 2 on bad input or an unreachable endpoint.
    """
    import grpc

    from cohort.conformance.report import render
    from cohort.conformance.tools import run_tool_kit
    from cohort.rpc.health import health_status

    if ":" not in endpoint or not endpoint.rpartition(":")[2].isdigit():
        fail(f"error: ENDPOINT must be host:port, got {endpoint!r}")
    try:
        health_status(endpoint, timeout_s=timeout)
    except grpc.RpcError as exc:
        fail(f"error: {endpoint} is unreachable ({exc.code().name})")
    results = run_tool_kit(endpoint, timeout)
    render(results, endpoint, "tool server")
    raise typer.Exit(1 if any(r.status == "fail" for r in results) else 0)
