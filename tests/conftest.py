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


def machine_slowdown(sample_s: float = 0.2) -> float:
    """How many times slower than an idle machine this one runs just now (>= 1), for tests that bound wall time.

    The larger of: wall over CPU time of a short busy loop on this thread (on a contended CPU the loop
    waits for its turn: 1.0 when it has a CPU to itself, 2.5 with five runnable processes on two CPUs), and
    the 1-minute load average per usable CPU. A test scales its slack (or a deadline it sets) by this, so
    the margin derives from the machine it runs on rather than a constant that only holds when it is idle.
    """
    import time

    wall0, cpu0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall0 < sample_s:
        pass
    stretch = (time.perf_counter() - wall0) / max(1e-6, time.thread_time() - cpu0)
    load = os.getloadavg()[0] / max(1, len(os.sched_getaffinity(0)))
    return max(1.0, stretch, load)


@pytest.fixture
def slowdown():
    """:func:`machine_slowdown`, to call when a measurement is needed (it re-measures each time)."""
    return machine_slowdown
