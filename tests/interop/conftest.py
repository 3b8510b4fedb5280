"""What tests/interop's modules share: a foreign server script run in its own process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Foreign:
    """A foreign server script in its own process group on 127.0.0.1 (run by ``python``: another venv's for a
    library that cannot live in this one); ``start`` again brings it back on its port."""

    def __init__(self, script: str, tmp: Path, probe: str, env: dict[str, str] | None = None,
                 python: str = sys.executable) -> None:
        self.script, self.tmp, self.probe, self.python = script, tmp, probe, python
        self.env = {**os.environ, **(env or {})}
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> Foreign:
        name = self.script.replace("/", "_")
        port_file = self.tmp / f"{name}.port"
        port_file.unlink(missing_ok=True)
        args = [self.python, str(HERE / self.script), str(port_file)] + ([str(self.port)] if self.port else [])
        self.log = open(self.tmp / f"{name}.log", "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.tmp / f"{name}.log").read_text()
            if port_file.exists() and port_file.read_text():
                self.port = int(port_file.read_text())
                try:
                    urllib.request.urlopen(f"{self.url}{self.probe}", timeout=2)
                    return self
                except urllib.error.HTTPError:
                    return self  # answering
                except OSError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"{self.script} did not start in {timeout_s}s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.log.close()


@pytest.fixture(scope="session")
def foreign_server():
    """``Foreign``: ``foreign_server(script, tmp, probe).start()`` runs ``tests/interop/<script>``."""
    return Foreign


def _serving(proc: subprocess.Popen, port_file: Path, what: str, timeout_s: float, health: bool = True) -> str:
    """The base URL of a front ``proc`` once its port file is written (and, with ``health``, ``/health`` answers);
    fails with its output if it exits first, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"{what} did not start in {timeout_s:.0f} s"
        if port_file.exists() and port_file.read_text():
            url = f"http://127.0.0.1:{port_file.read_text()}"
            if not health:
                return url
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                return url
            except OSError:
                pass
        time.sleep(0.1)


@pytest.fixture(scope="session")
def serving():
    """``_serving``, for modules that start a front themselves (with other process settings)."""
    return _serving


@contextlib.contextmanager
def _cohort_front(module: str, endpoint: str, verifier: str, tmp: Path, *extra: str, timeout: str = "20",
                 health: bool = True):
    """``cohort serve front <module>`` (a Cohort verifier behind another standard's server, as users start it) on 127.0.0.1,
    in front of the verifier at ``endpoint``: yields its base URL once its port file is written (and, with
    ``health``, once ``/health`` answers); stopped at the end."""
    port_file = tmp / f"{module}.port"
    proc = subprocess.Popen([sys.executable, "-m", "cohort.cli", "serve", "front", module.replace("_", "-"), *extra, "--verifier", verifier,
                             "--endpoint", endpoint, "--port", "0", "--port-file", str(port_file), "--timeout", timeout],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield _serving(proc, port_file, f"the {module} front", 120, health)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def math_server():
    """``cohort serve math`` on 127.0.0.1, for the fronts."""
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["math"]) as proc:
        yield proc


@pytest.fixture(scope="session")
def cohort_front():
    """The context manager that starts a Cohort front (``_cohort_front``), for the modules' own fixtures."""
    return _cohort_front
