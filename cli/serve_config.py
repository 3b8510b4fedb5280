"""``cohort serve``'s config file: the server, its limits, and each service's options, validated once.

One YAML file serves every kind of service (``cohort serve verifiers``, ``cohort serve sandbox``,
``cohort serve tools``); each reads the shared ``server`` section and its own::

    server: {host: 0.0.0.0, port: 50051, grace_s: 30}
    limits: {workers: 16, scoring_procs: 0}      # verifier servers
    verifiers:                                   # the verifiers a server hosts, each with its options
      math: {workers: 4}
      code: {sandbox_endpoints: [sandbox:50051]}
      judge: {backend: openai, url: http://vllm:8000/v1, model: Qwen/Qwen2.5-7B-Instruct}
    sandbox: {pool_size: 8}
    tools: {names: [calculator]}

Precedence, lowest first: the defaults, the file, the environment (:data:`ENV_KEYS`, the one place that reads
a ``COHORT_*`` setting of a service), the command line. Every model is frozen and refuses unknown keys; a
verifier's options are its own model's (:mod:`cohort.verifiers.options`), checked when the server loads it.
docs/config.md ("Serve config") is generated from these models and :data:`ENV_KEYS`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from cohort.verifiers.options import explain

__all__ = ["ENV_KEYS", "ServeConfig", "ServeConfigError", "load_serve_config"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class TlsSection(_Section):
    """Serve TLS (all null: plaintext)."""

    cert: str | None = None
    """PEM certificate chain (with ``key``)."""
    key: str | None = None
    """PEM private key of ``cert``."""
    client_ca: str | None = None
    """PEM CA: require client certificates it signed (mutual TLS)."""


class ServerSection(_Section):
    """Where and how every kind of service listens (``--host`` and the other flags override it)."""

    host: str = "127.0.0.1"
    """Address to bind. Loopback by default; ``0.0.0.0`` in containers."""
    port: int = Field(50051, ge=0, le=65535)
    """Port to bind; 0 picks a free one (written to ``--port-file``)."""
    metrics_port: int | None = Field(None, ge=0, le=65535)
    """Serve Prometheus metrics over HTTP on this port (verifier servers); null: none."""
    max_message_mb: float = Field(8.0, ge=0.001)
    """Largest request in MiB (larger: RESOURCE_EXHAUSTED)."""
    grace_s: float = Field(30.0, ge=0)
    """Seconds in-flight calls may run after SIGTERM."""
    drain_delay_s: float = Field(0.0, ge=0)
    """Seconds to stay NOT_SERVING before stopping (for load balancers)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Logging level."""
    tls: TlsSection = TlsSection()
    """Serve TLS."""


class LimitsSection(_Section):
    """A verifier server's limits (documented in docs/remote-verifiers.md)."""

    workers: int = Field(16, ge=1)
    """Threads scoring groups concurrently."""
    scoring_procs: int = Field(0, ge=0)
    """Worker processes for pure-Python (GIL-bound) verifiers such as format and arith: a batch is split across
    them, one per core is a good start. 0 scores them in threads."""
    max_queued_groups: int = Field(16384, ge=1)
    """Admitted-but-unscored groups before RESOURCE_EXHAUSTED."""
    max_groups_per_batch: int = Field(4096, ge=1)
    """Groups per call before INVALID_ARGUMENT."""
    max_rollouts_per_group: int = Field(1024, ge=1)
    """Rollouts per group before INVALID_ARGUMENT."""


class PythonToolSection(_Section):
    """The sandbox's ``python`` tool (grpo.tool.v1, docs/tools.md)."""

    wall_s: float = Field(0.0, ge=0)
    """Wall time of one call in seconds (formerly ``COHORT_TOOL_WALL_S``); 0: 5 s."""
    slots_per_core: float = Field(0.0, ge=0)
    """Calls that run at once, per CPU (formerly ``COHORT_TOOL_SLOTS_PER_CORE``); 0: 2, at least 4 in all."""
    sessions: bool = False
    """Keep one interpreter per session id (stateful calls; formerly ``COHORT_TOOL_SESSIONS``)."""
    max_sessions: int = Field(0, ge=0)
    """Live sessions at most (formerly ``COHORT_TOOL_MAX_SESSIONS``); 0: the sandbox's default, per core."""


class SandboxSection(_Section):
    """``cohort serve sandbox``: SandboxService and its ``python`` tool."""

    pool_size: int = Field(0, ge=0)
    """Slots per pool (formerly ``COHORT_SANDBOX_POOL_SIZE``); 0: max(4, 2 x CPUs)."""
    max_calls_per_tenant: int = Field(0, ge=0)
    """RPC threads one tenant may hold (formerly ``COHORT_SANDBOX_MAX_CALLS_PER_TENANT``); 0: half of them."""
    python: str = "/usr/bin/python3"
    """The interpreter inside the sandbox; its prefix is bound read-only (formerly ``COHORT_SANDBOX_PYTHON``)."""
    cgroups: bool = True
    """Put each slot in its own memory+pids cgroup where the machine allows it (formerly
    ``COHORT_SANDBOX_CGROUPS``)."""
    cpu_cgroups: bool = True
    """Give each slot a CPU cgroup too, its quota and an equal weight (formerly ``COHORT_SANDBOX_CPU_CGROUPS``)."""
    python_tool: PythonToolSection = PythonToolSection()
    """The ``python`` tool served beside SandboxService."""


class ToolsSection(_Section):
    """``cohort serve tools``: tool servers without a sandbox."""

    names: tuple[Literal["calculator"], ...] = ("calculator",)
    """The tools to serve (``calculator``; the ``python`` tool is the sandbox's)."""


class ServeConfig(_Section):
    """The whole file; each ``cohort serve`` subcommand reads ``server`` and its own sections."""

    server: ServerSection = ServerSection()
    """Where and how the service listens."""
    limits: LimitsSection = LimitsSection()
    """Verifier servers' limits."""
    allow: tuple[str, ...] | None = None
    """Verifier plugins that may load (formerly ``COHORT_VERIFIERS_ALLOW``, comma-separated); null: all."""
    verifiers: dict[str, dict[str, Any]] = {}
    """Verifier name -> its options (its own model: see the verifiers' sections below). ``cohort serve verifiers``
    without names hosts every verifier listed here."""
    sandbox: SandboxSection = SandboxSection()
    """The sandbox service."""
    tools: ToolsSection = ToolsSection()
    """Tool servers."""
    _listed: tuple[str, ...] = PrivateAttr(())
    _from_env: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def listed(self) -> tuple[str, ...]:
        """The verifiers the file lists (the environment's ``COHORT_*`` options add none)."""
        return self._listed

    def name_sources(self, message: str) -> str:
        """``message`` with each key that came from the environment followed by its variable's name."""
        return _name_sources(self._from_env, message)


ENV_KEYS: dict[str, tuple[str, ...]] = {
    # verifier plugins
    "COHORT_VERIFIERS_ALLOW": ("allow",),
    "COHORT_MATH_WORKERS": ("verifiers.math.workers",),
    "COHORT_SANDBOX_ENDPOINT": ("verifiers.code.sandbox_endpoints",),
    "COHORT_SANDBOX_TLS_CA": ("verifiers.code.sandbox_tls.ca",),
    "COHORT_SANDBOX_TLS_CERT": ("verifiers.code.sandbox_tls.cert",),
    "COHORT_SANDBOX_TLS_KEY": ("verifiers.code.sandbox_tls.key",),
    "COHORT_SANDBOX_TLS_SERVER_NAME": ("verifiers.code.sandbox_tls.server_name",),
    "COHORT_SANDBOX_POOL_SIZE": ("verifiers.code.pool_size", "sandbox.pool_size"),
    "COHORT_JUDGE_BACKEND": ("verifiers.judge.backend",),
    "COHORT_JUDGE_MODEL": ("verifiers.judge.model",),
    "COHORT_JUDGE_URL": ("verifiers.judge.url",),
    "COHORT_JUDGE_API": ("verifiers.judge.api",),
    "COHORT_JUDGE_API_KEY_FILE": ("verifiers.judge.api_key_file",),
    "COHORT_JUDGE_API_KEY_ENV": ("verifiers.judge.api_key_env",),
    "COHORT_JUDGE_CONCURRENCY": ("verifiers.judge.concurrency",),
    "COHORT_JUDGE_RATE": ("verifiers.judge.rate_per_s",),
    "COHORT_JUDGE_TIMEOUT_S": ("verifiers.judge.timeout_s",),
    "COHORT_JUDGE_MAX_TOKENS": ("verifiers.judge.max_tokens",),
    "COHORT_JUDGE_CACHE_SIZE": ("verifiers.judge.cache_size",),
    "COHORT_JUDGE_THREADS": ("verifiers.judge.threads",),
    "COHORT_JUDGE_DEVICE": ("verifiers.judge.device",),
    "COHORT_JUDGE_MAX_FIELD_TOKENS": ("verifiers.judge.max_field_tokens",),
    "COHORT_RG_WORKERS": ("verifiers.reasoning_gym.workers",),
    "COHORT_RG_BUDGET_S": ("verifiers.reasoning_gym.budget_s",),
    "COHORT_RG_MEMORY_MB": ("verifiers.reasoning_gym.memory_mb",),
    "COHORT_NEMO_GYM_URL": ("verifiers.nemo_gym.url",),
    "COHORT_NEMO_GYM_TIMEOUT_S": ("verifiers.nemo_gym.timeout_s",),
    "COHORT_NEMO_GYM_CONCURRENCY": ("verifiers.nemo_gym.concurrency",),
    "COHORT_ORS_URL": ("verifiers.ors.url",),
    "COHORT_ORS_TIMEOUT_S": ("verifiers.ors.timeout_s",),
    "COHORT_ORS_CONCURRENCY": ("verifiers.ors.concurrency",),
    "COHORT_ORS_ENV": ("verifiers.ors.env",),
    "COHORT_OPENENV_URL": ("verifiers.openenv.url",),
    "COHORT_OPENENV_TIMEOUT_S": ("verifiers.openenv.timeout_s",),
    "COHORT_OPENENV_CONCURRENCY": ("verifiers.openenv.concurrency",),
    "COHORT_PRIME_TASKSET": ("verifiers.prime_verifiers.taskset",),
    "COHORT_PRIME_TASKSET_CONFIG": ("verifiers.prime_verifiers.taskset_config",),
    "COHORT_PRIME_TIMEOUT_S": ("verifiers.prime_verifiers.timeout_s",),
    # the sandbox service and its python tool
    "COHORT_SANDBOX_MAX_CALLS_PER_TENANT": ("sandbox.max_calls_per_tenant",),
    "COHORT_SANDBOX_PYTHON": ("sandbox.python",),
    "COHORT_SANDBOX_CGROUPS": ("sandbox.cgroups",),
    "COHORT_SANDBOX_CPU_CGROUPS": ("sandbox.cpu_cgroups",),
    "COHORT_TOOL_WALL_S": ("sandbox.python_tool.wall_s",),
    "COHORT_TOOL_SLOTS_PER_CORE": ("sandbox.python_tool.slots_per_core",),
    "COHORT_TOOL_SESSIONS": ("sandbox.python_tool.sessions",),
    "COHORT_TOOL_MAX_SESSIONS": ("sandbox.python_tool.max_sessions",),
}
"""Each former ``COHORT_*`` setting of a service -> the serve-config key(s) it overrides (a value in the
environment wins over the file; an empty one is ignored). The only place ``cohort serve`` reads them."""

_LISTS = {"allow"}
"""Keys whose environment value is a comma-separated list."""


class ServeConfigError(ValueError):
    """A config file that cannot be read or does not validate: one line, naming the key."""


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, tuple[Any, str]]:
    """{config key: (value, variable)} of the ``COHORT_*`` variables set in ``environ`` (default: this
    process's)."""
    env = os.environ if environ is None else environ
    found: dict[str, tuple[Any, str]] = {}
    for name, keys in ENV_KEYS.items():
        raw = env.get(name, "").strip()
        if not raw:
            continue
        for key in keys:
            found[key] = ([p.strip() for p in raw.split(",") if p.strip()] if key in _LISTS else raw, name)
    return found


def _name_sources(sources: Mapping[str, str], message: str) -> str:
    """Each key of ``message`` that came from the environment followed by its variable (a section's error, e.g.
    ``verifiers.code.sandbox_tls: ...``, by the variables of its keys)."""
    named: dict[str, list[str]] = {}
    for key, variable in sources.items():
        named.setdefault(key, []).append(variable)
        named.setdefault(key.rsplit(".", 1)[0] + ":", []).append(variable)
    for key, variables in sorted(named.items(), key=lambda kv: -len(kv[0])):
        stem, colon = key.removesuffix(":"), ":" if key.endswith(":") else ""
        pattern = rf"(?<![\w.]){re.escape(stem)}{colon}" + ("" if colon else r"(?![\w.])")
        message = re.sub(pattern, lambda m: f"{stem} ({', '.join(sorted(variables))}){colon}", message)
    return message


def _set(tree: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        node = tree.get(part)
        if node is None:
            node = tree[part] = {}
        elif not isinstance(node, dict):
            raise ServeConfigError(f"{part} must be a mapping to take {key} from the environment")
        tree = node
    tree[last] = value


def load_serve_config(path: Path | None = None, environ: Mapping[str, str] | None = None,
                      overrides: Mapping[str, Any] | None = None) -> ServeConfig:
    """The file at ``path`` (none: the defaults), then the environment's ``COHORT_*`` settings, then
    ``overrides`` (``{"server.port": 0}``: the command line's). Raises :class:`ServeConfigError`."""
    raw: Any = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ServeConfigError(f"config file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ServeConfigError(f"config file {path} is not YAML: {' '.join(str(exc).split())}") from None
        if not isinstance(raw, dict):
            raise ServeConfigError(f"config file {path}: expected a mapping of sections, got {type(raw).__name__}")
    listed = raw.get("verifiers")
    listed = tuple(listed) if isinstance(listed, dict) else ()
    from_env = env_overrides(environ)
    for key, (value, _) in from_env.items():
        _set(raw, key, value)
    for key, value in (overrides or {}).items():
        _set(raw, key, value)
    for name, given in (raw.get("verifiers") or {}).items():
        if given is None:  # `math:` with nothing under it: its defaults
            raw["verifiers"][name] = {}
    sources = {key: name for key, (_, name) in from_env.items() if key not in (overrides or {})}
    try:
        cfg = ServeConfig.model_validate(raw)
    except ValidationError as exc:
        raise ServeConfigError(_name_sources(sources, explain(exc, ServeConfig))) from None
    cfg._listed, cfg._from_env = listed, sources
    return cfg
