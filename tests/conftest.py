"""Shared fixtures: real servers in subprocesses on loopback, and a throwaway plugin package."""

from __future__ import annotations

import faulthandler
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
# suite checks that the hook is on (tests/trainer/test_advantages.py and test_head.py: test_*shapes_are_checked*).
SHAPE_CHECKED = ["cohort.trainer.advantages", "cohort.trainer.loss", "cohort.trainer.is_correction",
                 "cohort.trainer.step_rewards", "cohort.trainer.collect", "cohort.trainer.learner",
                 "cohort.trainer.forward", "cohort.trainer.reference", "cohort.trainer.batch"]
if importlib.util.find_spec("jaxtyping") and importlib.util.find_spec("beartype"):
    from jaxtyping import install_import_hook

    install_import_hook(SHAPE_CHECKED, "beartype.beartype")

ROOT = Path(__file__).resolve().parent.parent

HARD_TIMEOUT_MARGIN_S = float(os.environ.get("COHORT_TEST_HARD_TIMEOUT_MARGIN_S", "60"))
"""How long past its pytest-timeout limit a test stuck where no signal reaches ends the session (the
variable: for tests/test_harness.py's check of it)."""


def _timeout_s(item: pytest.Item) -> float:
    """pytest-timeout's limit for ``item`` (its marker, else ``--timeout``, else the ini's); 0 when none."""
    marker = item.get_closest_marker("timeout")
    if marker and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    except ValueError:  # a venv without pytest-timeout
        return 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """A test still running a minute past its pytest-timeout limit ends the session, with every thread's stack
    on stderr. pytest-timeout's signal reaches Python code only: a test stuck in C++ (a gloo group's destructor
    joining a thread blocked on a dead peer) once outlived it and held CI to its 90-minute limit with no trace
    of where. faulthandler's watchdog is a C thread; it writes to pytest's own copy of the real stderr (the test's
    output is captured)."""
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    limit = _timeout_s(item)
    if limit > 0 and fault_handler_stderr_fd_key in item.config.stash:
        faulthandler.dump_traceback_later(limit + HARD_TIMEOUT_MARGIN_S, exit=True,
                                          file=item.config.stash[fault_handler_stderr_fd_key])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()

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


MARGIN_S = 60.0
"""What a deadline leaves of the test's own timeout: time to end what it started and report why."""


@pytest.fixture
def deadline(request):
    """``deadline(idle_s)``: seconds to wait for something (a subprocess, a run), ``idle_s`` on an idle machine
    times its measured slowdown (:func:`machine_slowdown`), but never past the test's own timeout
    (pytest-timeout: the test's ``timeout`` mark, else the suite's 600 s) less :data:`MARGIN_S`. A deadline
    past that would never fire: pytest-timeout would end the test first, without its message, and
    leave its children running."""
    import time

    limit = _timeout_s(request.node)
    started = time.monotonic()

    def scaled(idle_s: float, sample_s: float = 0.2) -> float:
        want = idle_s * machine_slowdown(sample_s)
        if not limit:
            return want
        return max(1.0, min(want, limit - (time.monotonic() - started) - MARGIN_S))

    scaled.margin_s = MARGIN_S
    return scaled


class Subprocesses:
    """Subprocesses of a test, each in a process group (session) of its own, so that a terminal's Ctrl-C
    reaches pytest alone; every one still running when the test ends (passed, failed, timed out,
    interrupted) is ended with its group: SIGTERM (a bench stops its servers and trainer on it), then
    SIGKILL after ``grace_s``."""

    def __init__(self, grace_s: float = 20.0) -> None:
        self.grace_s = grace_s
        self.procs: list[subprocess.Popen] = []

    def popen(self, cmd: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """:func:`subprocess.run` with ``capture_output=True, text=True``; on its timeout, or anything else that
        stops the wait (Ctrl-C), the process's group is ended before the exception goes on."""
        proc = self.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            self.end(proc)
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def end(self, proc: subprocess.Popen) -> None:
        import signal

        for sig, wait_s in ((signal.SIGTERM, self.grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:  # the group is empty
                return
            try:  # the leader exits (its pipes drained, so that a write to a full one does not hold it)
                proc.communicate(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            except ValueError:  # a pipe already closed by a reader
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    continue
            try:
                os.killpg(proc.pid, 0)  # the leader is gone: is anything of its group left?
            except ProcessLookupError:
                return

    def close(self) -> None:
        for proc in self.procs:
            self.end(proc)


@pytest.fixture
def subprocesses():
    """:class:`Subprocesses` for a test, each process's group ended when the test ends."""
    procs = Subprocesses()
    try:
        yield procs
    finally:
        procs.close()

