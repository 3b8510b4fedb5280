"""``cohort serve``: host verifiers (or the sandbox) as a gRPC service."""

from __future__ import annotations

from pathlib import Path

import typer

from cohort.cli import app, fail


@app.command()
def serve(
    names: list[str] = typer.Argument(
        ..., help="Verifier names to host (see `cohort list-verifiers`), or `sandbox` alone (it also serves the "
        "`python` tool), or `calculator` alone (a tool server)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Loopback by default; use 0.0.0.0 in containers."),
    port: int = typer.Option(50051, min=0, max=65535, help="Port to bind; 0 picks a free one (see --port-file)."),
    port_file: Path | None = typer.Option(None, help="Write the bound port to this file once serving."),
    metrics_port: int | None = typer.Option(None, min=0, max=65535, help="Serve Prometheus metrics over HTTP on this port (0: a free one, written to PORT_FILE.metrics)."),
    workers: int = typer.Option(16, min=1, help="Threads scoring groups concurrently."),
    scoring_procs: int = typer.Option(
        0, min=0, help="Worker processes for pure-Python (GIL-bound) verifiers such as format and arith: "
        "a batch is split across them, one per core is a good start. 0 scores them in threads."),
    max_queued_groups: int = typer.Option(16384, min=1, help="Admitted-but-unscored groups before RESOURCE_EXHAUSTED."),
    max_groups_per_batch: int = typer.Option(4096, min=1, help="Groups per call before INVALID_ARGUMENT."),
    max_rollouts_per_group: int = typer.Option(1024, min=1, help="Rollouts per group before INVALID_ARGUMENT."),
    max_message_mb: float = typer.Option(8.0, min=0.001, help="Largest request in MiB (larger: RESOURCE_EXHAUSTED)."),
    grace: float = typer.Option(30.0, min=0, help="Seconds in-flight calls may run after SIGTERM."),
    drain_delay: float = typer.Option(0.0, min=0, help="Seconds to stay NOT_SERVING before stopping (for load balancers)."),
    log_level: str = typer.Option("INFO", help="Logging level: DEBUG, INFO, WARNING or ERROR."),
    tls_cert: Path | None = typer.Option(None, help="PEM certificate chain: serve TLS (with --tls-key)."),
    tls_key: Path | None = typer.Option(None, help="PEM private key of --tls-cert."),
    client_ca: Path | None = typer.Option(None, help="PEM CA: require client certificates it signed (mutual TLS)."),
) -> None:
    """Serve verifiers over gRPC (grpo.verifier.v1) with health, reflection, metrics and graceful drain.

    Exit codes: 0 after a drain on SIGTERM/SIGINT, 1 the address cannot be bound (e.g. in use) or the
    sandbox fails its self-test, 2 bad input (an unknown verifier name).
    """
    import asyncio

    from cohort.rpc.runtime import BindError, RuntimeOptions, configure_logging
    from cohort.rpc.tls import ServerTls, TlsError

    import logging

    if not isinstance(logging.getLevelName(log_level.upper()), int):
        fail(f"cohort serve: --log-level {log_level!r} is not one of DEBUG, INFO, WARNING, ERROR")
    configure_logging(log_level.upper())
    try:
        tls = ServerTls.from_options(tls_cert, tls_key, client_ca)
    except TlsError as exc:
        fail(f"error: {exc}")
    # loading a verifier (SymPy for math), the sandbox's self-test: seconds before "serving ..." on a busy machine
    logging.getLogger("cohort.grpc").info("starting %s on %s ...", ", ".join(names),
                                          f"{host}:{port}" if port else f"{host} (a free port)")
    options = RuntimeOptions(
        host=host, port=port, max_message_bytes=int(max_message_mb * 1024 * 1024), grace_s=grace,
        drain_delay_s=drain_delay, port_file=port_file, tls=tls,
    )
    if "sandbox" in names:
        if names != ["sandbox"]:
            raise typer.BadParameter("`sandbox` is served alone: run it as its own service", param_hint="NAMES")
        from cohort.sandbox.executor import SandboxError
        from cohort.sandbox.server import serve as serve_sandbox

        try:
            asyncio.run(serve_sandbox(options))
        except BindError as exc:
            _fail_to_bind(exc)
        except SandboxError as exc:
            fail(f"cohort serve sandbox: the sandbox cannot run code here: {exc}", 1)
        return
    if "calculator" in names:  # a tool server (grpo.tool.v1), like the sandbox's `python` tool
        if names != ["calculator"]:
            raise typer.BadParameter("`calculator` is served alone: run it as its own service", param_hint="NAMES")
        from cohort.tools import calculator
        from cohort.tools.server import serve as serve_tools

        try:
            asyncio.run(serve_tools([calculator.Calculator()], calculator.VERSION, options))
        except BindError as exc:
            _fail_to_bind(exc)
        return

    from cohort.verifiers import registry
    from cohort.verifiers.hosting.server import ServerLimits
    from cohort.verifiers.hosting.server import serve as serve_verifiers

    try:
        verifiers = registry.load_many(names)
    except registry.PluginError as exc:
        fail(f"error: {exc}")
    limits = ServerLimits(
        max_groups_per_batch=max_groups_per_batch, max_rollouts_per_group=max_rollouts_per_group,
        max_queued_groups=max_queued_groups, workers=workers, scoring_procs=scoring_procs,
    )
    try:
        asyncio.run(serve_verifiers(verifiers, options, limits, metrics_port))
    except BindError as exc:
        _fail_to_bind(exc)


def _fail_to_bind(exc: BindError) -> None:
    """One line instead of grpc's traceback ("RuntimeError: Failed to bind"), exit 1."""
    hint = " (pick another port; 0 picks a free one)" if exc.in_use else ""
    fail(f"cohort serve: {exc}{hint}", 1)


@app.command("list-verifiers")
def list_verifiers() -> None:
    """List the verifiers registered through the `cohort.verifiers` entry points."""
    from rich.console import Console
    from rich.table import Table

    from cohort.verifiers import registry

    table = Table("name", "entry point")
    try:
        found = registry.available()
    except registry.PluginError as exc:
        fail(f"cohort list-verifiers: {exc}")
    for name, ep in found.items():
        table.add_row(name, ep.value)
    Console().print(table)


@app.command()
def health(
    endpoint: str = typer.Argument(..., help="host:port of a Cohort service."),
    service: str = typer.Option("", help="Service or verifier name; empty = overall health."),
    timeout: float = typer.Option(3.0, min=0.01, help="Seconds before giving up."),
    tls_ca: Path | None = typer.Option(None, help="PEM CA of the server's certificate: connect with TLS."),
    tls_cert: Path | None = typer.Option(None, help="PEM client certificate (mutual TLS; with --tls-key)."),
    tls_key: Path | None = typer.Option(None, help="PEM private key of --tls-cert."),
    tls_server_name: str | None = typer.Option(None, help="Name the server's certificate must carry, if not ENDPOINT's host."),
) -> None:
    """Check gRPC health: container health checks use it.

    Exit codes: 0 SERVING, 1 not serving or unreachable, 2 the server does not know SERVICE (the message
    lists the names it knows).
    """
    import grpc

    from cohort.rpc.launch import health_services, health_status
    from cohort.rpc.tls import ClientTls, TlsError

    try:
        tls = ClientTls.from_options(tls_ca, tls_cert, tls_key, tls_server_name)
    except TlsError as exc:
        fail(f"error: {exc}")
    try:
        status = health_status(endpoint, service, timeout, tls)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:  # grpc's health servicer sends no details
            known = health_services(endpoint, timeout, tls)
            serves = f"it serves: {', '.join(known)}" if known else "it does not list its services"
            fail(f"{endpoint}: service {service!r} is unknown to this server ({serves})")
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            from cohort.rpc.diagnose import explain

            fail(f"{endpoint}: {exc.code().name}: {explain(endpoint, exc.details() or '', tls)}", 1)
        details = (exc.details() or "").splitlines()
        fail(f"{endpoint}: {exc.code().name}: {details[0] if details else 'no details'}", 1)
    typer.echo(f"{endpoint} {service or '(overall)'}: {status}")
    raise typer.Exit(0 if status == "SERVING" else 1)
