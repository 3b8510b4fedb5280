"""Start Cohort services as local subprocesses on free loopback ports (main job, tests, benches).

>>> with LocalServices(["format"]) as endpoints:          # doctest: +SKIP
...     endpoints["format"]                                 # '127.0.0.1:41237'
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc

from cohort.rpc.health import SERVING, health_services, health_status
from cohort.rpc.runtime import PARENT_FD_ENV
from cohort.rpc.tls import ClientTls

__all__ = ["LocalServices", "ServiceError", "ServiceProcess", "health_services", "health_status"]
"""``health_status`` / ``health_services`` live in :mod:`cohort.rpc.health`; re-exported for `cohort health`."""


class ServiceError(RuntimeError):
    pass


class ServiceProcess:
    """``cohort serve NAMES`` in a subprocess; ``endpoint`` once :meth:`start` returns.

    A server started with ``--tls-cert`` (in ``extra_args``) is probed for readiness with ``tls``.
    ``port`` 0 picks a free one; a given port restarts a server where its clients expect it.
    """

    def __init__(self, names: Sequence[str], host: str = "127.0.0.1", extra_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, log_path: Path | None = None, tls: ClientTls | None = None,
                 port: int = 0) -> None:
        self.names = list(names)
        self.tls = tls
        self.host = host
        self.extra_args = list(extra_args)
        # PYTHONSAFEPATH: `python -m` would put the working folder first on the service's sys.path, and a
        # `cohort/` folder there (a checkout, a user's project) would shadow the installed package
        self.env = {**os.environ, "PYTHONSAFEPATH": "1", **(env or {})}
        self._tmp = tempfile.TemporaryDirectory(prefix="cohort-svc-")
        self.port_file = Path(self._tmp.name) / "port"
        self.log_path = log_path or Path(self._tmp.name) / "server.log"
        self.proc: subprocess.Popen | None = None
        self._lifeline: int | None = None  # the write end of the pipe the server watches
        self.requested_port = port
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_port(self) -> int | None:
        """The Prometheus port when started with ``--metrics-port``."""
        path = self.port_file.with_name(self.port_file.name + ".metrics")
        return int(path.read_text()) if path.exists() else None

    def start(self, timeout_s: float = 60.0) -> ServiceProcess:
        cmd = [sys.executable, "-m", "cohort.cli", "serve", *self.names, "--host", self.host,
               "--port", str(self.requested_port),
               "--port-file", str(self.port_file), *self.extra_args]
        self._log = open(self.log_path, "ab")
        self._cut_lifeline()  # a restart gets a fresh pipe
        watch, self._lifeline = os.pipe()  # the server drains when this process is gone (runtime.PARENT_FD_ENV)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**self.env, PARENT_FD_ENV: str(watch)}, pass_fds=(watch,))
        os.close(watch)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(f"`{' '.join(cmd)}` exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.port_file.exists():
                self.port = int(self.port_file.read_text())
                try:
                    if health_status(self.endpoint, timeout_s=1.0, tls=self.tls) == SERVING:
                        return self
                except grpc.RpcError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise ServiceError(f"`{' '.join(cmd)}` not SERVING after {timeout_s}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def terminate(self) -> None:
        """SIGTERM: the server drains (health NOT_SERVING, in-flight calls finish)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash, as far as clients can tell)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        self.terminate()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        try:  # anything the server started in its process group (worker pools)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()
        self._cut_lifeline()
        return self.proc.returncode

    def _cut_lifeline(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._tmp.cleanup()


class LocalServices:
    """Start one server process per name; yields ``{name: endpoint}``; stops them all on exit."""

    def __init__(self, names: Sequence[str], extra_args: Mapping[str, Sequence[str]] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.names = list(dict.fromkeys(names))
        self.extra_args = extra_args or {}
        self.env = env
        self.processes: dict[str, ServiceProcess] = {}

    def __enter__(self) -> dict[str, str]:
        try:
            for name in self.names:
                proc = ServiceProcess([name], extra_args=self.extra_args.get(name, ()), env=self.env)
                self.processes[name] = proc.start()
        except BaseException:
            self.__exit__()
            raise
        return {name: p.endpoint for name, p in self.processes.items()}

    def __exit__(self, *exc: object) -> None:
        for proc in self.processes.values():
            proc.__exit__()
