"""The small programs in deploy/: the image health check and the sandbox seccomp profile generator."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _healthcheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEPLOY / "healthcheck.py"), *args],
                          capture_output=True, text=True, timeout=30)


def test_healthcheck_exits_0_for_a_serving_server_and_names_the_status(format_server):
    out = _healthcheck(format_server.endpoint)
    assert out.returncode == 0, out.stderr
    assert "SERVING" in out.stderr
    assert _healthcheck(format_server.endpoint, "--service", "format").returncode == 0


def test_healthcheck_fails_for_an_unknown_service_and_a_closed_port(format_server):
    out = _healthcheck(format_server.endpoint, "--service", "no-such-verifier")
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _healthcheck(f"127.0.0.1:{port}", "--timeout", "1")
    assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
    assert f"nothing is listening at 127.0.0.1:{port} (connection refused)" in out.stderr, out.stderr


BASE_PROFILE = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [
        {"names": ["read", "write", "unshare", "mount"], "action": "SCMP_ACT_ALLOW", "args": []},
        {"names": ["bpf", "sethostname", "setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["bpf", "sethostname", "setns"], "action": "SCMP_ACT_ERRNO", "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
        {"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"},
    ],
}


def test_seccomp_profile_allows_sethostname_and_changes_nothing_else(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(BASE_PROFILE))
    out = tmp_path / "sandbox.json"
    subprocess.run([sys.executable, str(DEPLOY / "seccomp.py"), str(out), "--base", str(base)], check=True, timeout=30)
    profile = json.loads(out.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    rules_with = [r for r in profile["syscalls"] if "sethostname" in r["names"]]
    assert rules_with == [{**rules_with[0], "names": ["sethostname"], "action": "SCMP_ACT_ALLOW"}]
    assert not rules_with[0]["includes"] and not rules_with[0]["excludes"] and not rules_with[0]["args"]
    # Every other syscall keeps its rules, conditions and actions.
    others = [{**r, "names": [n for n in r["names"] if n != "sethostname"]} for r in BASE_PROFILE["syscalls"]]
    assert [r for r in profile["syscalls"] if "sethostname" not in r["names"]] == [r for r in others if r["names"]]


@pytest.mark.container
def test_seccomp_profile_from_the_installed_engine_default(tmp_path):
    """With podman installed (the container tests install it), the real default profile converts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("deploy_seccomp", DEPLOY / "seccomp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = mod.find_base()  # SystemExit (a failure) when podman's containers-common is missing
    profile = mod.sandbox_profile(json.loads(base.read_text()))
    allowed = {n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" and not r.get("includes") for n in r["names"]}
    assert {"sethostname", "unshare", "clone", "mount"} <= allowed
