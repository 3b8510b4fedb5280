"""Sandbox fixtures: one real sandbox per module, a planted secret, host-side checks."""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
from pathlib import Path

import pytest

SECRET = "cohort-secret-" + secrets.token_hex(12)
SECRET_ENV = "COHORT_SANDBOX_TEST_SECRET"
MARKER = "cohort_hostile_marker"


@pytest.fixture(scope="session")
def secret() -> str:
    """The secret planted in the service's environment (``COHORT_SANDBOX_TEST_SECRET``) and file."""
    return SECRET


@pytest.fixture(scope="session")
def secret_file() -> Path:
    """A world-readable secret on the host: only mount isolation keeps it out of reach."""
    d = Path(tempfile.mkdtemp(prefix="cohort-secret-"))
    os.chmod(d, 0o755)
    path = d / "secret.txt"
    path.write_text(SECRET)
    os.chmod(path, 0o644)
    yield path
    path.unlink()
    d.rmdir()


@pytest.fixture(scope="module")
def sandbox(secret_file):
    """The service's environment holds the secret while the sandbox starts and runs."""
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    os.environ[SECRET_ENV] = SECRET
    sb = Sandbox(SandboxOptions(pool_size=2))
    yield sb
    sb.close()


def _proc_table() -> dict[int, tuple[int, list[str]]]:
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        table[int(name)] = (ppid, nspid)
    return table


def leftover_sandbox_processes() -> list[int]:
    """Our descendants inside a sandbox PID namespace other than each slot's PID 1."""
    table = _proc_table()
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in table.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return [pid for pid in mine if len(table.get(pid, (0, []))[1]) > 1 and table[pid][1][-1] != "1"]


def marker_files() -> list[str]:
    """Files named with MARKER anywhere a sandbox might have leaked them on the host."""
    found = []
    for top in ("/tmp", "/dev/shm", "/var/tmp", os.getcwd(), os.path.expanduser("~")):
        try:
            for entry in os.scandir(top):
                if MARKER in entry.name:
                    found.append(entry.path)
        except OSError:
            pass
    return found


def port_listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def host_unaffected():
    """Asserts after the test: no leftover sandbox processes, no marker files, no listener on 47123."""
    assert not marker_files()
    yield
    assert leftover_sandbox_processes() == []
    assert marker_files() == []
    assert not port_listening(47123)
