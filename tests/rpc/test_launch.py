"""A server started by ``cohort.rpc.launch`` does not outlive the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cohort.rpc.health import SERVING, health_status

LAUNCHER = """
import sys, time
from cohort.rpc.launch import ServiceProcess
svc = ServiceProcess(["format"]).start()
print(svc.endpoint, svc.proc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped by init) counts as gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_server_stops_when_its_launcher_dies(how):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        endpoint, pid = launcher.stdout.readline().split()
        pid = int(pid)
        assert health_status(endpoint, timeout_s=5.0) == SERVING
        launcher.send_signal(how)  # SIGKILL: no cleanup code of the launcher runs at all
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the server outlived its launcher"
    finally:
        launcher.kill()
        launcher.wait()
        try:
            os.kill(pid, signal.SIGKILL)
        except (NameError, ProcessLookupError):
            pass


def test_a_bad_parent_fd_is_a_warning_not_a_failure(tmp_path):
    """``cohort serve`` started by hand with a COHORT_PARENT_FD that is not an open descriptor serves as usual."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "cohort.cli", "serve", "format", "--port", "0",
                             "--port-file", str(port_file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "COHORT_PARENT_FD": "987"})
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert health_status(f"127.0.0.1:{port_file.read_text()}", timeout_s=5.0) == SERVING
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "COHORT_PARENT_FD='987' is not an open file descriptor" in out
