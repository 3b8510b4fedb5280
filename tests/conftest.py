"""Shared fixtures: real servers in subprocesses on loopback, and a throwaway plugin package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
TESTPLUGIN = ROOT / "tests" / "plugins" / "cohort-testplugin"


@pytest.fixture(scope="session")
def testplugin(tmp_path_factory) -> str:
    """pip-install the throwaway third-party plugin (verifiers `exact`, `sleepy`); uninstall after the session."""
    src = tmp_path_factory.mktemp("plugin") / "cohort-testplugin"
    shutil.copytree(TESTPLUGIN, src)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", str(src)], check=True)
    yield "cohort-testplugin"
    subprocess.run([*pip, "uninstall", "-y", "cohort-testplugin"], check=True)


@pytest.fixture(scope="module")
def format_server():
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["format"], extra_args=["--max-groups-per-batch", "64", "--metrics-port", "0"]) as proc:
        yield proc
