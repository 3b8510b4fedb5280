"""Shared fixtures: real servers in subprocesses on loopback, and a throwaway plugin package."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The shape annotations of the maths are checked at run time in every test (jaxtyping + beartype, as
# prime-rl does): a call whose tensors disagree with `Float[Tensor, "P G"]` and friends fails. Installed
# before any test imports these modules. The peer venvs (TRL, verl) have no trainer extra; the main
# suite checks that the hook is on (tests/trainer/test_advantages.py::test_shapes_are_checked_at_run_time).
SHAPE_CHECKED = ["cohort.trainer.advantages", "cohort.trainer.loss", "cohort.trainer.is_correction"]
if importlib.util.find_spec("jaxtyping") and importlib.util.find_spec("beartype"):
    from jaxtyping import install_import_hook

    install_import_hook(SHAPE_CHECKED, "beartype.beartype")

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
