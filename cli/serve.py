"""``cohort serve verifiers|sandbox|tools``: host a kind of service over gRPC, configured by a serve config file
(:mod:`cohort.cli.serve_config`); ``cohort serve front ors|openenv|nemo-gym``: put a served verifier behind another
standard (the fronts of :mod:`cohort.integrations`, their own flags)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup

from cohort.cli import app, fail


class _ServeGroup(TyperGroup):
    """``cohort serve KIND``; the names of the first invocation still work: ``cohort serve math format`` is
    ``cohort serve verifiers math format``, ``cohort serve calculator`` is ``cohort serve tools calculator``
    (``cohort serve sandbox`` is already a kind)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["tools" if args[0] in TOOL_NAMES else "verifiers", *args]
        return super().parse_args(ctx, args)


TOOL_NAMES = ("calculator",)
serve_app = typer.Typer(
    cls=_ServeGroup, no_args_is_help=True,
    help="Serve verifiers, the sandbox or tools over gRPC (health, reflection, graceful drain), configured by a "
    "serve config file (--config; docs/config.md, \"Serve config\"): see `cohort list-verifiers` for the verifiers.")
app.add_typer(serve_app, name="serve")

# The flags every kind of service takes; None: the config file's value (or its default).
CONFIG = typer.Option(None, "--config", "-c", help="Serve config file (YAML): server, limits and each service's options. "
                      "COHORT_* variables override it, flags override both.")
HOST = typer.Option(None, help="Address to bind (default 127.0.0.1: loopback; use 0.0.0.0 in containers).")
PORT = typer.Option(None, min=0, max=65535, help="Port to bind (default 50051); 0 picks a free one (see --port-file).")
PORT_FILE = typer.Option(None, help="Write the bound port to this file once serving.")
MAX_MESSAGE_MB = typer.Option(None, min=0.001, help="Largest request in MiB (default 8; larger: RESOURCE_EXHAUSTED).")
GRACE = typer.Option(None, min=0, help="Seconds in-flight calls may run after SIGTERM (default 30).")
DRAIN_DELAY = typer.Option(None, min=0, help="Seconds to stay NOT_SERVING before stopping, for load balancers (default 0).")
LOG_LEVEL = typer.Option(None, help="Logging level: DEBUG, INFO (default), WARNING or ERROR.")
TLS_CERT = typer.Option(None, help="PEM certificate chain: serve TLS (with --tls-key).")
TLS_KEY = typer.Option(None, help="PEM private key of --tls-cert.")
CLIENT_CA = typer.Option(None, help="PEM CA: require client certificates it signed (mutual TLS).")


def _server_flags(host, port, max_message_mb, grace, drain_delay, log_level, tls_cert, tls_key, client_ca) -> dict:
    """The ``server`` keys the flags set (None: not given)."""
    return {"server.host": host, "server.port": port, "server.max_message_mb": max_message_mb, "server.grace_s": grace,
             "server.drain_delay_s": drain_delay, "server.log_level": log_level and log_level.upper(),
             "server.tls.cert": tls_cert and str(tls_cert), "server.tls.key": tls_key and str(tls_key),
             "server.tls.client_ca": client_ca and str(client_ca)}


def _configure(kind: str, config: Path | None, flags: dict, port_file: Path | None):
    """The serve config (file, then COHORT_* variables, then flags), logging set, and the runtime's options;
    bad input is one line and exit 2."""
    import logging

    from cohort.cli.serve_config import ServeConfigError, load_serve_config
    from cohort.rpc.runtime import RuntimeOptions, configure_logging
    from cohort.rpc.tls import ServerTls, TlsError

    level = flags.get("server.log_level")
    if level is not None and not isinstance(logging.getLevelName(level), int):
        fail(f"cohort serve: --log-level {level.lower()!r} is not one of DEBUG, INFO, WARNING, ERROR")
    try:
        cfg = load_serve_config(config, overrides={k: v for k, v in flags.items() if v is not None})
    except ServeConfigError as exc:
        fail(f"cohort serve {kind}: {exc}")
    configure_logging(cfg.server.log_level)
    tls = cfg.server.tls
    try:
        server_tls = ServerTls.from_options(tls.cert, tls.key, tls.client_ca)
    except TlsError as exc:
        fail(f"error: {exc}")
    server = cfg.server
    options = RuntimeOptions(
        host=server.host, port=server.port, max_message_bytes=int(server.max_message_mb * 1024 * 1024),
        grace_s=server.grace_s, drain_delay_s=server.drain_delay_s, port_file=port_file, tls=server_tls)
    return cfg, options


def _starting(what: str, options) -> None:
    import logging

    # loading a verifier (SymPy for math), the sandbox's self-test: seconds before "serving ..." on a busy machine
    where = f"{options.host}:{options.port}" if options.port else f"{options.host} (a free port)"
    logging.getLogger("cohort.grpc").info("starting %s on %s ...", what, where)


@serve_app.command("verifiers")
def serve_verifiers(
    names: list[str] = typer.Argument(None, help="Verifiers to host (see `cohort list-verifiers`); none: every "
                                      "verifier of the config's `verifiers` section."),
    config: Path | None = CONFIG, host: str | None = HOST, port: int | None = PORT, port_file: Path | None = PORT_FILE,
    metrics_port: int | None = typer.Option(None, min=0, max=65535, help="Serve Prometheus metrics over HTTP on this "
                                            "port (0: a free one, written to PORT_FILE.metrics)."),
    workers: int | None = typer.Option(None, min=1, help="Threads scoring groups concurrently (default 16)."),
    scoring_procs: int | None = typer.Option(
        None, min=0, help="Worker processes for pure-Python (GIL-bound) verifiers such as format and arith: "
        "a batch is split across them, one per core is a good start. 0 (the default) scores them in threads."),
    max_queued_groups: int | None = typer.Option(None, min=1, help="Admitted-but-unscored groups before RESOURCE_EXHAUSTED (default 16384)."),
    max_groups_per_batch: int | None = typer.Option(None, min=1, help="Groups per call before INVALID_ARGUMENT (default 4096)."),
    max_rollouts_per_group: int | None = typer.Option(None, min=1, help="Rollouts per group before INVALID_ARGUMENT (default 1024)."),
    max_message_mb: float | None = MAX_MESSAGE_MB, grace: float | None = GRACE, drain_delay: float | None = DRAIN_DELAY,
    log_level: str | None = LOG_LEVEL, tls_cert: Path | None = TLS_CERT, tls_key: Path | None = TLS_KEY,
    client_ca: Path | None = CLIENT_CA,
) -> None:
    """Serve verifiers over gRPC (grpo.verifier.v1) with health, reflection, metrics and graceful drain.

    Exit codes: 0 after a drain on SIGTERM/SIGINT, 1 the address cannot be bound (e.g. in use), 2 bad input
    (an unknown verifier name, a config key or option its model does not know).
    """
    import asyncio

    from cohort.rpc.runtime import BindError
    from cohort.verifiers import registry
    from cohort.verifiers.hosting.host import ServerLimits
    from cohort.verifiers.hosting.server import serve as serve_hosted

    flags = _server_flags(host, port, max_message_mb, grace, drain_delay, log_level, tls_cert, tls_key, client_ca)
    flags.update({"server.metrics_port": metrics_port, "limits.workers": workers, "limits.scoring_procs": scoring_procs,
                  "limits.max_queued_groups": max_queued_groups, "limits.max_groups_per_batch": max_groups_per_batch,
                  "limits.max_rollouts_per_group": max_rollouts_per_group})
    cfg, options = _configure("verifiers", config, flags, port_file)
    served = list(names or cfg.listed)
    if not served:
        fail("cohort serve verifiers: no verifier to serve: name some (see `cohort list-verifiers`) or list them "
             "under `verifiers:` in --config")
    if len(set(served)) != len(served):
        fail(f"error: verifier names repeated: {served}")
    try:  # every verifier's options checked before any starts (math's pool takes seconds)
        given = {n: registry.parse_options(n, registry.factory(n, cfg.allow), cfg.verifiers.get(n)) for n in served}
    except registry.OptionsError as exc:
        fail(f"cohort serve verifiers: {cfg.name_sources(str(exc))}")
    except registry.PluginError as exc:
        fail(f"error: {exc}")
    _starting(", ".join(served), options)
    try:
        verifiers = registry.load_many(given, allow=cfg.allow)
    except registry.PluginError as exc:
        fail(f"error: {exc}")
    lim = cfg.limits
    limits = ServerLimits(
        max_groups_per_batch=lim.max_groups_per_batch, max_rollouts_per_group=lim.max_rollouts_per_group,
        max_queued_groups=lim.max_queued_groups, workers=lim.workers, scoring_procs=lim.scoring_procs,
    )
    try:
        asyncio.run(serve_hosted(verifiers, options, limits, cfg.server.metrics_port))
    except BindError as exc:
        _fail_to_bind(exc)


@serve_app.command("sandbox")
def serve_sandbox(
    config: Path | None = CONFIG, host: str | None = HOST, port: int | None = PORT, port_file: Path | None = PORT_FILE,
    pool_size: int | None = typer.Option(None, min=0, help="Slots per pool (default max(4, 2 x CPUs))."),
    max_message_mb: float | None = MAX_MESSAGE_MB, grace: float | None = GRACE, drain_delay: float | None = DRAIN_DELAY,
    log_level: str | None = LOG_LEVEL, tls_cert: Path | None = TLS_CERT, tls_key: Path | None = TLS_KEY,
    client_ca: Path | None = CLIENT_CA,
) -> None:
    """Serve the sandbox (grpo.sandbox.v1) and its `python` tool (grpo.tool.v1) over gRPC.

    Exit codes: 0 after a drain on SIGTERM/SIGINT, 1 the address cannot be bound or the sandbox fails its
    self-test, 2 bad input (a config key it does not know).
    """
    import asyncio

    from cohort.rpc.runtime import BindError
    from cohort.sandbox.executor import SandboxError
    from cohort.sandbox.policy import SandboxConfig
    from cohort.sandbox.server import serve as serve_hosted

    flags = _server_flags(host, port, max_message_mb, grace, drain_delay, log_level, tls_cert, tls_key, client_ca)
    flags["sandbox.pool_size"] = pool_size
    cfg, options = _configure("sandbox", config, flags, port_file)
    _starting("sandbox", options)
    box, tool = cfg.sandbox, cfg.sandbox.python_tool
    try:
        config = SandboxConfig(interpreter=box.python, use_cgroups=box.cgroups, cpu_cgroups=box.cpu_cgroups)
    except (ValueError, OSError) as exc:  # no such interpreter, no bwrap
        fail(f"cohort serve sandbox: the sandbox cannot run code here: {exc}", 1)
    try:
        asyncio.run(serve_hosted(options, config=config, pool_size=box.pool_size, max_calls_per_tenant=box.max_calls_per_tenant,
                                 tool_wall_s=tool.wall_s, tool_slots_per_core=tool.slots_per_core,
                                 tool_sessions=tool.sessions, tool_max_sessions=tool.max_sessions))
    except BindError as exc:
        _fail_to_bind(exc)
    except SandboxError as exc:
        fail(f"cohort serve sandbox: the sandbox cannot run code here: {exc}", 1)


@serve_app.command("tools")
def serve_tools(
    names: list[str] = typer.Argument(None, help=f"Tools to serve ({', '.join(TOOL_NAMES)}); none: the config's "
                                      "`tools.names`. The `python` tool is the sandbox's (`cohort serve sandbox`)."),
    config: Path | None = CONFIG, host: str | None = HOST, port: int | None = PORT, port_file: Path | None = PORT_FILE,
    max_message_mb: float | None = MAX_MESSAGE_MB, grace: float | None = GRACE, drain_delay: float | None = DRAIN_DELAY,
    log_level: str | None = LOG_LEVEL, tls_cert: Path | None = TLS_CERT, tls_key: Path | None = TLS_KEY,
    client_ca: Path | None = CLIENT_CA,
) -> None:
    """Serve tools without a sandbox (grpo.tool.v1) over gRPC.

    Exit codes: 0 after a drain on SIGTERM/SIGINT, 1 the address cannot be bound, 2 bad input.
    """
    import asyncio

    from cohort.rpc.runtime import BindError
    from cohort.tools import calculator
    from cohort.tools.server import serve as serve_hosted

    flags = _server_flags(host, port, max_message_mb, grace, drain_delay, log_level, tls_cert, tls_key, client_ca)
    if names:
        flags["tools.names"] = names
    cfg, options = _configure("tools", config, flags, port_file)
    _starting(", ".join(cfg.tools.names), options)
    made = {"calculator": calculator.Calculator}
    try:
        asyncio.run(serve_hosted([made[n]() for n in cfg.tools.names], calculator.VERSION, options))
    except BindError as exc:
        _fail_to_bind(exc)


# ``cohort serve front KIND``: a served Cohort verifier behind another standard (cohort.integrations). Not
# ``cohort serve ors``: that is the *adapter* verifier ``ors`` (theirs behind ours), so the fronts have a group
# of their own and no name means both.
front_app = typer.Typer(no_args_is_help=True, help="Serve a Cohort verifier behind another standard (ORS, OpenEnv, "
                        "NeMo-Gym), scoring through `cohort serve verifiers` at --endpoint (docs/interop-ours.md).")
serve_app.add_typer(front_app, name="front")
VERIFIER = typer.Option(..., "--verifier", help="The Cohort verifier's name, e.g. math.")
ENDPOINT = typer.Option(..., "--endpoint", help="HOST:PORT of `cohort serve verifiers NAME`; repeat for replicas.")
FRONT_HOST = typer.Option("127.0.0.1", "--host", help="Address to bind (default loopback).")
FRONT_PORT_FILE = typer.Option(None, "--port-file", help="Write the bound port to this file once bound.")
TIMEOUT = typer.Option(60.0, "--timeout", min=0.01, help="Seconds per scoring call (with retries).")


@front_app.command("ors")
def serve_front_ors(
    rows: Path = typer.Option(..., "--rows", help="Task rows (answer rows of the row schema) served as split `train`."),
    verifier: str = VERIFIER, endpoint: list[str] = ENDPOINT,
    name: str = typer.Option("cohort", "--name", help="The environment's name (its URL path)."),
    host: str = FRONT_HOST, port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port to bind; 0 a free one."),
    port_file: Path | None = FRONT_PORT_FILE, timeout: float = TIMEOUT,
) -> None:
    """Serve task rows as an Open Reward Standard environment (HTTP + SSE; TRL's ORS integration calls it),
    scored by a Cohort verifier.

    Exit codes: 0 after Ctrl-C or SIGTERM, 2 bad input (no openreward SDK, bad rows, an unreachable verifier, a taken port).
    """
    from cohort.integrations import ors

    raise typer.Exit(ors.main(rows, verifier, endpoint, name=name, host=host, port=port, port_file=port_file,
                              timeout_s=timeout))


@front_app.command("openenv")
def serve_front_openenv(
    verifier: str = VERIFIER, endpoint: list[str] = ENDPOINT,
    rows: Path | None = typer.Option(None, "--rows", help="Task rows for reset(index=...); else reset takes a prompt "
                                     "and an answer."),
    host: str = FRONT_HOST, port: int = typer.Option(8001, "--port", min=0, max=65535, help="Port to bind; 0 a free one."),
    port_file: Path | None = FRONT_PORT_FILE,
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="Concurrent WebSocket sessions."),
    timeout: float = TIMEOUT,
) -> None:
    """Serve a Cohort verifier as an OpenEnv environment server (OpenEnv's own create_app: HTTP + WebSocket).

    Exit codes: 0 after Ctrl-C or SIGTERM, 2 bad input (no openenv, bad rows, an unreachable verifier, a taken port).
    """
    from cohort.integrations import openenv

    raise typer.Exit(openenv.main(verifier, endpoint, rows=rows, host=host, port=port, port_file=port_file,
                                  max_sessions=max_sessions, timeout_s=timeout))


@front_app.command("nemo-gym")
def serve_front_nemo_gym(
    verifier: str = VERIFIER, endpoint: list[str] = ENDPOINT,
    host: str = FRONT_HOST, port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to bind; 0 a free one."),
    port_file: Path | None = FRONT_PORT_FILE,
    answer_field: str = typer.Option("expected_answer", "--answer-field", help="The request field holding the gold answer."),
    tests_field: str = typer.Option("code_tests", "--tests-field", help="The request field holding unit tests (the row "
                                    "schema's code_tests form or its JSON), for the code verifier; '' for none."),
    option: list[str] = typer.Option([], "--option", metavar="KEY=VALUE", help="A verifier option; repeatable."),
    timeout: float = TIMEOUT,
) -> None:
    """Serve a Cohort verifier as a NeMo-Gym resources server (POST /verify, POST /seed_session).

    Exit codes: 0 after Ctrl-C or SIGTERM, 2 bad input (a bad --option, an unreachable verifier, a taken port).
    """
    from cohort.integrations import nemo_gym

    bad = [o for o in option if "=" not in o]
    if bad:
        fail(f"cohort serve front nemo-gym: --option expects KEY=VALUE, got {bad[0]!r}")
    raise typer.Exit(nemo_gym.main(verifier, endpoint, host=host, port=port, port_file=port_file,
                                   answer_field=answer_field, tests_field=tests_field,
                                   options=dict(o.split("=", 1) for o in option),
                                   timeout_s=timeout))


def _fail_to_bind(exc) -> None:
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
