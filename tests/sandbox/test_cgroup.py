"""Per-slot cgroup (where the machine allows it): many processes together cannot pass the slot's memory cap."""

from __future__ import annotations

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
