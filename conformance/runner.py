"""Run the rules against an endpoint, optionally starting the server from a command first."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import grpc

from cohort.conformance.cases import Case
from cohort.conformance.checks import RULES
from cohort.conformance.target import CheckFailed, CheckSkipped, EndpointUnreachable, KitOptions, Target, VerifierNotServed
from cohort.rpc import health
from cohort.rpc.tls import ClientTls, channel

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    rule: str
    summary: str
    status: Status
    detail: str
    seconds: float


class ServerStartError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server binds it right after; fine on loopback)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host.strip("[]"), 0))
        return s.getsockname()[1]


class ServerProcess:
    """The server under test, started from ``--server-cmd`` in its own process group."""

    def __init__(self, command: str, endpoint: str, tls: ClientTls | None = None) -> None:
        self.tls = tls
        host, _, port = endpoint.rpartition(":")
        self.argv = [a.replace("{port}", port).replace("{host}", host) for a in shlex.split(command)]
        if not self.argv:
            raise ServerStartError("--server-cmd is empty")
        self.endpoint = endpoint
        self._log = tempfile.NamedTemporaryFile(prefix="cohort-conformance-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> None:
        try:
            self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise ServerStartError(f"cannot run {self.argv[0]!r}: {exc.strerror}") from None
        deadline = time.monotonic() + timeout_s
        with channel(self.endpoint, self.tls) as ch:
            stub = health.stub(ch)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerStartError(f"`{shlex.join(self.argv)}` exited with code {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if health.status(stub, timeout_s=1.0) == health.SERVING:
                        return
                except grpc.RpcError as exc:
                    if exc.code() is grpc.StatusCode.UNIMPLEMENTED:  # no health service: the health rule reports it
                        return
                time.sleep(0.05)
        self.kill()
        raise ServerStartError(f"`{shlex.join(self.argv)}` not SERVING on {self.endpoint} after {timeout_s:g}s:\n{self.log_tail()}")

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s) if self.proc is not None else None
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def log_tail(self, n: int = 20) -> str:
        self._log.flush()
        lines = Path(self._log.name).read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def close(self) -> None:
        self.kill()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)


def run_kit(
    endpoint: str,
    verifier: str,
    cases: Sequence[Case],
    server_cmd: str | None = None,
    rules: Sequence[str] | None = None,
    options: KitOptions | None = None,
    connect_timeout_s: float = 5.0,
) -> list[CheckResult]:
    """Run the rules (all by default, in registry order) and return one result per rule.

    Raises :class:`EndpointUnreachable` when nothing answers at ``endpoint``,
    :class:`ServerStartError` when ``server_cmd`` does not come up SERVING there, and
    :class:`VerifierNotServed` when ListVerifiers answers without ``verifier`` among its names.
    """
    unknown = sorted(set(rules or ()) - set(RULES))
    if unknown:
        raise ValueError(f"unknown rules {unknown}; the rules are {', '.join(RULES)}")
    selected = [r for r in RULES.values() if rules is None or r.name in rules]
    options = options or KitOptions()
    host, _, port = endpoint.rpartition(":")
    if server_cmd and port == "0":  # the kit picks the port for the server it starts
        endpoint = f"{host}:{free_port(host)}"
    process = ServerProcess(server_cmd, endpoint, options.tls) if server_cmd else None
    target = Target(endpoint, verifier, cases, options, process=process)
    try:
        if process is not None:
            process.start(options.startup_s)
        target.wait_ready(connect_timeout_s)
        target.fetch_limits()
        if target.served is not None and verifier not in target.served:  # every rule would fail for the same reason
            served = ", ".join(repr(n) for n in target.served) or "no verifiers"
            raise VerifierNotServed(f"{endpoint} serves {served}, not {verifier!r} (check --verifier)")
        results = []
        for r in selected:
            started = time.monotonic()
            try:
                status, detail = "pass", r.check(target)
            except CheckFailed as exc:
                status, detail = "fail", str(exc)
            except CheckSkipped as exc:
                status, detail = "skip", str(exc)
            except grpc.RpcError as exc:
                status, detail = "fail", f"{exc.code().name}: {exc.details()}"
            except Exception as exc:  # an answer the rule could not make sense of is a failure, not a crash
                status, detail = "fail", f"unexpected {type(exc).__name__}: {exc}"
            results.append(CheckResult(r.name, r.summary, status, detail, time.monotonic() - started))
        return results
    finally:
        target.close()
        if process is not None:
            process.close()


__all__ = ["CheckResult", "EndpointUnreachable", "ServerProcess", "ServerStartError", "VerifierNotServed", "free_port", "run_kit"]
