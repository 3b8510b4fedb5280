"""Per-slot cgroup (where the machine allows it): many processes together cannot pass the slot's memory cap."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cohort.sandbox import cgroup, policy
from cohort.sandbox.executor import ExecStatus, Slot

HOGS = """
import os, time
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        block = bytearray(48 << 20)          # under RLIMIT_AS each, 384 MiB together
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
ok = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in kids)
print('survivors', ok)
"""


def test_processes_together_hit_the_slot_memory_cap() -> None:
    probe = cgroup.create(64 << 20, 16)
    if probe is None:
        pytest.skip("this machine does not let the service create memory+pids cgroups")
    probe.remove()
    config = policy.SandboxConfig(tmp_bytes=16 << 20, shm_bytes=8 << 20, slot_memory_bytes=192 << 20, slot_max_pids=32)
    slot = Slot(config)
    try:
        assert slot.cgroup is not None and slot.cgroup.pids()  # the fork server is inside from the start
        r = slot.run({"mode": "exec", "code": HOGS}, policy.Limits(wall_s=20, memory_bytes=128 << 20))
        assert r.status is ExecStatus.MEMORY_LIMIT_EXCEEDED, r
        assert b"survivors 8" not in r.stdout  # the cgroup OOM killer took some of the hogs
        ok = slot.run({"mode": "exec", "code": "print('alive')"}, policy.Limits())  # the fork server survived
        assert ok.stdout == b"alive\n"
    finally:
        dirs = list(slot.cgroup.dirs) if slot.cgroup else []
        slot.kill()
    assert not any(d.exists() for d in dirs)


def test_config_refuses_tmpfs_larger_than_the_slot_cap() -> None:
    with pytest.raises(ValueError, match="slot_memory_bytes"):
        policy.SandboxConfig(tmp_bytes=512 << 20, slot_memory_bytes=96 << 20)


HOSTILE = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "sleeping children in their own sessions": (
        "import os, time\nfor i in range(20):\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(600)\n"
        "        os._exit(0)\ntime.sleep(600)"),
    "spinning children": "import os\nfor i in range(6):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass",
    "memory hogs": ("import os\nfor i in range(6):\n    if os.fork() == 0:\n        break\n"
                    "b = bytearray(200 << 20)\nfor j in range(0, len(b), 4096):\n    b[j] = 1\nimport time\ntime.sleep(600)"),
    "zombies": "import os, time\nfor i in range(30):\n    if os.fork() == 0:\n        os._exit(0)\ntime.sleep(600)",
    "kill everything": "import os, signal\nos.kill(-1, signal.SIGKILL)",
}


def _parents() -> list[Path]:
    """Where this process's slot cgroups go: below its own cgroup in each hierarchy (read independently
    of cgroup.py, from /proc/self/cgroup)."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            d = Path("/sys/fs/cgroup") / c / path.lstrip("/")
            if c in ("", "memory", "pids", "cpu", "cpu,cpuacct") and d.is_dir():
                out.append(d)
    return out


def _owned_by(pid: int) -> set[Path]:
    return {d for p in _parents() for d in p.glob(f"cohort-sandbox-{pid}-*")}


def _own_cgroups() -> set[Path]:
    return _owned_by(os.getpid())


def _needs_cgroups() -> None:
    probe = cgroup.create(64 << 20, 16)
    if probe is None:
        pytest.skip("this machine does not let the service create memory+pids cgroups")
    probe.remove()


def test_hostile_programs_leave_no_cgroup_behind() -> None:
    """Each hostile program runs to its deadline in a warm slot, then the sandbox is closed while another
    round of them is still running (the slots are killed with their processes still exiting): no
    ``cohort-sandbox-*`` cgroup of this process may remain."""
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    _needs_cgroups()
    before = _own_cgroups()
    limits = policy.Limits(wall_s=1.5, memory_bytes=256 << 20, max_processes=64)
    sb = Sandbox(SandboxOptions(pool_size=2))
    try:
        for name, code in HOSTILE.items():
            r = sb.execute(code, limits=limits)
            assert r.status is not None, name
        busy = [threading.Thread(target=_quietly, args=(sb.execute, code, b"", policy.Limits(wall_s=30, max_processes=64)),
                                 daemon=True) for code in (HOSTILE["fork bomb"], HOSTILE["sleeping children in their own sessions"])]
        for t in busy:
            t.start()
        time.sleep(1.0)  # both slots busy with their programs' processes
    finally:
        sb.close()
    for t in busy:
        t.join(30)
    assert _own_cgroups() - before == set()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the slot is killed under it by close(): expected
        pass


DEAD_SERVICE = """
import os, sys
from cohort.sandbox.pool import Sandbox, SandboxOptions
sb = Sandbox(SandboxOptions(pool_size=1))
assert sb.execute("print(1)").stdout == b"1\\n"
print(os.getpid(), flush=True)
os._exit(0)  # killed, in effect: no close(), no atexit
"""


def test_a_dead_services_cgroups_are_swept_at_the_next_pool_start() -> None:
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    _needs_cgroups()
    first = Sandbox(SandboxOptions(pool_size=1))  # this process has made slot cgroups before the service died
    try:
        out = subprocess.run([sys.executable, "-c", DEAD_SERVICE], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        dead = int(out.split()[-1])
        leftover = lambda: _owned_by(dead)  # noqa: E731
        assert leftover(), "the dead service left no cgroup: nothing to test"
        deadline = time.monotonic() + 30
        while any((d / "cgroup.procs").read_text().strip() for d in leftover()) and time.monotonic() < deadline:
            time.sleep(0.1)  # its slots die with it (bwrap --die-with-parent)
        second = Sandbox(SandboxOptions(pool_size=1))
        second.close()
        assert leftover() == set()
    finally:
        first.close()
