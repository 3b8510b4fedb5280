"""The suite's own helpers (tests/conftest.py): a test's deadlines end before its pytest timeout, and the
processes it starts end with it, a whole process group at a time, when it times out or is interrupted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# a leader that starts a grandchild (both sleeping, both in the leader's process group) and prints its pid
FAMILY = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          "print(c.pid, flush=True); time.sleep(600)")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def group_gone(pgid: int, wait_s: float = 10.0) -> bool:
    """No live process left in the group (a killed grandchild is a zombie until init reaps it)."""
    until = time.monotonic() + wait_s
    while time.monotonic() < until:
        members = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and alive(int(p.name))
                   and _pgid(p) == pgid]
        if not members:
            return True
        time.sleep(0.1)
    return False


def _pgid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def test_a_deadline_ends_before_the_tests_own_timeout(deadline, request):
    limit = float(request.config.getini("timeout"))
    assert 1.0 <= deadline(10 ** 6) <= limit - deadline.margin_s
    assert deadline(0.001) == 1.0  # never less than a second


@pytest.mark.timeout(200)
def test_a_marked_timeout_bounds_the_deadline(deadline):
    assert deadline(10 ** 6) <= 200 - deadline.margin_s


def test_a_timed_out_subprocess_is_ended_with_its_group(subprocesses):
    with pytest.raises(subprocess.TimeoutExpired) as info:
        subprocesses.run([sys.executable, "-c", FAMILY], timeout=3)
    (leader,) = subprocesses.procs
    assert leader.poll() is not None
    assert group_gone(leader.pid)
    if info.value.output:  # the grandchild had said its pid
        assert not alive(int(info.value.output.split()[0]))


def test_ctrl_c_during_a_subprocess_ends_its_group(subprocesses):
    """A Ctrl-C reaches pytest alone (the subprocess has its own session); the helper ends the whole group.
    Python's own SIGINT handler for the test: pytest started in the background by a non-interactive shell (CI
    under ``nohup ... &``) inherits SIGINT ignored, as POSIX has it, and no Ctrl-C would arrive at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            subprocesses.run([sys.executable, "-c", FAMILY], timeout=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    (leader,) = subprocesses.procs
    assert leader.poll() is not None
    assert group_gone(leader.pid)  # nothing is left of its group


STUCK_IN_C = """
import ctypes, pytest

@pytest.mark.timeout(1)
def test_stuck_in_c():
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # a default pthread mutex, zeroed
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # locked again by its owner: blocked in C, where SIGALRM's handler never runs
"""


def test_a_test_stuck_where_no_signal_reaches_ends_the_session_with_its_stack(tmp_path, subprocesses):
    """pytest-timeout's signal cannot end it; the suite's faulthandler watchdog (tests/conftest.py) does, a margin
    past the limit, printing where every thread was."""
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_stuck.py").write_text(STUCK_IN_C)
    env = {**os.environ, "COHORT_TEST_HARD_TIMEOUT_MARGIN_S": "2"}
    start = time.monotonic()
    out = subprocesses.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                            str(tmp_path / "test_stuck.py")], timeout=120, env=env, cwd=tmp_path)
    assert time.monotonic() - start < 110  # ended by the watchdog, not by the 120 s guard of this test
    printed = out.stdout + out.stderr
    assert "Timeout (0:00:03)!" in printed and "in test_stuck_in_c" in printed, printed
    assert out.returncode == 1
