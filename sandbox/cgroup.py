"""Per-slot cgroup (memory incl. tmpfs and /dev/shm, pids, and a CPU share), where the machine allows it.

Best effort: a slot gets a cgroup only when the service can create one below its own
(cgroup v1 ``memory`` + ``pids`` hierarchies, or a cgroup v2 parent with both controllers
delegated). Otherwise the sandbox relies on rlimits and tmpfs size caps (see policy.py).

The bwrap process is moved into the cgroup *before* it starts (a ``/bin/sh`` prefix writes its own
PID to ``cgroup.procs`` and then execs), so every process of the sandbox is accounted from the
first instruction. The memory cap covers page cache and tmpfs pages written by the sandbox, which
RLIMIT_AS cannot see. An OOM kill inside the cgroup is reported as MEMORY_LIMIT_EXCEEDED.

CPU (fairness between slots): each slot is its own CPU cgroup with the same weight (v1 ``cpu.shares``,
v2 ``cpu.weight``), so the kernel splits contended CPU between *slots*, not between processes: a slot
that forks 60 busy loops gets one slot's share, not 60/61 of the machine. A quota (v1
``cpu.cfs_quota_us``, v2 ``cpu.max``) of ``cpu_quota`` CPUs caps a slot even when others are idle.
Also best effort and independent of memory/pids: a machine that delegates only ``cpu`` still gets it,
and one that delegates none (no writable cpu hierarchy) falls back to per-process scheduling.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_stale_check = itertools.count()
_stale_cpu_check = itertools.count()


@dataclass
class SlotCgroup:
    dirs: list[Path]
    oom_file: Path
    oom_key: str

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        try:
            text = self.oom_file.read_text()
        except OSError:
            return 0
        m = re.search(rf"^{self.oom_key} (\d+)$", text, re.MULTILINE)
        return int(m.group(1)) if m else 0

    def pids(self) -> list[int]:
        found = set()
        for f in self.procs_files:
            try:
                found.update(int(x) for x in Path(f).read_text().split())
            except OSError:
                pass
        return sorted(found)

    def remove(self, timeout_s: float = 5.0) -> None:
        """SIGKILL whatever is still inside (the slot's own processes only), then rmdir."""
        import signal
        import time

        deadline = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def _own_paths() -> dict[str, str]:
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _remove_stale(parent: Path) -> None:
    """rmdir empty slot cgroups left by a service process that died without cleaning up."""
    for d in parent.glob("cohort-sandbox-*"):
        try:
            pid = int(d.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            try:
                d.rmdir()
            except OSError:
                pass


CPU_PERIOD_US = 100_000


def cpu_controls(cpu_quota: float) -> str | None:
    """Where slot CPU controls go on this machine: ``"v1"``, ``"v2"`` or None (not allowed/disabled)."""
    if os.environ.get("COHORT_SANDBOX_CGROUPS", "1") == "0" or os.environ.get("COHORT_SANDBOX_CPU_CGROUPS", "1") == "0":
        return None
    probe = _create_cpu(f"cohort-sandbox-{os.getpid()}-probe{next(_counter)}", cpu_quota)
    if probe is None:
        return None
    path, version = probe
    path.rmdir()
    return version


def _create_cpu(name: str, cpu_quota: float) -> tuple[Path, str] | None:
    """A CPU cgroup ``name`` with the default weight and a quota of ``cpu_quota`` CPUs (0: no quota)."""
    try:
        own = _own_paths()
    except OSError:
        return None
    quota = str(int(cpu_quota * CPU_PERIOD_US)) if cpu_quota > 0 else None
    if (ROOT / "cpu" / "cpu.shares").exists() and "cpu" in own:
        d = ROOT / "cpu" / own["cpu"].lstrip("/") / name
        values = {"cpu.shares": "1024", "cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": quota or "-1"}
        version = "v1"
    elif (ROOT / "cgroup.controllers").exists() and "" in own:
        parent = ROOT / own[""].lstrip("/")
        try:
            if "cpu" not in (parent / "cgroup.subtree_control").read_text().split():
                return None
        except OSError:
            return None
        d = parent / name
        values = {"cpu.weight": "100", "cpu.max": f"{quota or 'max'} {CPU_PERIOD_US}"}
        version = "v2"
    else:
        return None
    existed = d.exists()  # v2: the memory+pids cgroup of the same slot
    try:
        if not existed:
            if next(_stale_cpu_check) == 0:
                _remove_stale(d.parent)
            d.mkdir()
        for key, value in values.items():
            _write(d / key, value)
    except OSError:
        if not existed:
            try:
                d.rmdir()
            except OSError:
                pass
        return None
    return d, version


def create(memory_bytes: int, max_pids: int, cpu_quota: float = 0.0) -> SlotCgroup | None:
    """A fresh cgroup for one slot, or None when the machine does not allow it."""
    if os.environ.get("COHORT_SANDBOX_CGROUPS", "1") == "0":
        return None
    try:
        own = _own_paths()
    except OSError:
        return None
    name = f"cohort-sandbox-{os.getpid()}-{next(_counter)}"
    cg = _create_memory_pids(own, name, memory_bytes, max_pids)
    if os.environ.get("COHORT_SANDBOX_CPU_CGROUPS", "1") == "0":
        return cg
    cpu = _create_cpu(name, cpu_quota)
    if cpu is None or (cg is not None and cpu[0] in cg.dirs):
        return cg
    if cg is None:  # CPU only: no memory accounting (oom_kills reads 0)
        return SlotCgroup([cpu[0]], cpu[0] / "memory.events", "oom_kill")
    cg.dirs.append(cpu[0])
    return cg


def _create_memory_pids(own: dict[str, str], name: str, memory_bytes: int, max_pids: int) -> SlotCgroup | None:
    # cgroup v1: separate memory and pids hierarchies
    if (ROOT / "memory" / "memory.limit_in_bytes").exists() and "memory" in own and "pids" in own:
        mem = ROOT / "memory" / own["memory"].lstrip("/") / name
        pids = ROOT / "pids" / own["pids"].lstrip("/") / name
        made: list[Path] = []
        if next(_stale_check) == 0:
            _remove_stale(mem.parent)
            _remove_stale(pids.parent)
        try:
            for d in (mem, pids):
                d.mkdir()
                made.append(d)
            _write(mem / "memory.limit_in_bytes", str(memory_bytes))
            try:
                _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
            except OSError:
                pass  # no swap accounting
            _write(pids / "pids.max", str(max_pids))
            return SlotCgroup(made, mem / "memory.oom_control", "oom_kill")
        except OSError:
            SlotCgroup(made, mem, "").remove()
            return None
    # cgroup v2: needs memory and pids delegated to our parent's subtree
    if (ROOT / "cgroup.controllers").exists() and "" in own:
        parent = ROOT / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if not {"memory", "pids"} <= set(enabled):
            return None
        d = parent / name
        try:
            d.mkdir()
            _write(d / "memory.max", str(memory_bytes))
            _write(d / "memory.swap.max", "0") if (d / "memory.swap.max").exists() else None
            _write(d / "pids.max", str(max_pids))
            return SlotCgroup([d], d / "memory.events", "oom_kill")
        except OSError:
            SlotCgroup([d], d, "").remove()
            return None
    return None


def enter_argv(cg: SlotCgroup, argv: list[str]) -> list[str]:
    """Prefix ``argv`` so the process joins ``cg`` before it execs (needs write access to cgroup.procs)."""
    script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", str(len(cg.dirs)), *cg.procs_files, *argv]
