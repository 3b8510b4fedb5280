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

import atexit
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("cohort.sandbox")

ROOT = Path("/sys/fs/cgroup")
REMOVE_TIMEOUT_S = 10.0
"""How long :meth:`SlotCgroup.remove` keeps killing, waiting and retrying the rmdir before leaving the dir
to the next :func:`sweep`."""
_counter = itertools.count()
_LOCK = threading.Lock()
_LIVE: dict[str, SlotCgroup | None] = {}
"""This process's slot cgroups in use, by name: a sweep leaves them alone, exit removes them."""
_LEFTOVER: set[Path] = set()
"""Dirs a removal gave up on: the next sweep tries them again."""


@dataclass
class SlotCgroup:
    dirs: list[Path]
    oom_file: Path
    oom_key: str
    name: str = ""
    """``cohort-sandbox-<service pid>-<n>``, the same in every hierarchy."""

    def __post_init__(self) -> None:
        self.name = self.name or (self.dirs[0].name if self.dirs else "")

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

    def kill(self) -> None:
        """SIGKILL every process inside (v2 ``cgroup.kill`` where the kernel has it, else each pid listed)."""
        for d in self.dirs:
            try:
                _write(d / "cgroup.kill", "1")
                return  # v2: the kernel kills the whole subtree, including processes forked meanwhile
            except OSError:
                pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def empty(self) -> bool:
        """No process left: v2 ``cgroup.events`` says ``populated 0``; v1 lists no pid (dying ones excluded)."""
        for d in self.dirs:
            try:
                events = (d / "cgroup.events").read_text()
            except OSError:
                continue
            if re.search(r"^populated 1$", events, re.MULTILINE):
                return False
        return not self.pids()

    def remove(self, timeout_s: float = REMOVE_TIMEOUT_S) -> bool:
        """Kill what is inside (the slot's own processes only), wait until it is empty, rmdir; True when gone.

        The kernel refuses the rmdir (EBUSY) while a killed process is still exiting (a fork bomb's
        children, a large address space being torn down on a loaded machine), so the kill, the wait
        and the rmdir are retried with a growing pause until ``timeout_s``. A cgroup still there then is
        logged and kept for :func:`sweep` (called at pool start and close) to try again."""
        gone = remove_all([self], timeout_s)
        return not gone


def remove_all(cgroups: list[SlotCgroup], timeout_s: float = REMOVE_TIMEOUT_S, kill: bool = True) -> list[Path]:
    """:meth:`SlotCgroup.remove` for several cgroups at once, within one ``timeout_s``: the dirs left."""
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    left = [cg for cg in cgroups if cg.dirs]
    while True:
        still = []
        for cg in left:
            if kill:
                cg.kill()
            if not cg.empty():
                still.append(cg)
                continue
            cg.dirs = [d for d in cg.dirs if not _rmdir(d)]
            if cg.dirs:
                still.append(cg)
        left = still
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)
    dirs = [d for cg in left for d in cg.dirs]
    with _LOCK:
        for cg in cgroups:
            if _LIVE.get(cg.name) is cg:
                del _LIVE[cg.name]
        if kill:  # our own: the next sweep tries again (another owner's are only ever rmdir'ed when empty)
            _LEFTOVER.update(dirs)
    if dirs and kill:
        log.warning("could not remove %d sandbox cgroup dir(s) within %.1fs (kept for the next sweep): %s",
                    len(dirs), timeout_s, ", ".join(map(str, dirs[:4])))
    return dirs


def _rmdir(d: Path) -> bool:
    """True when ``d`` is gone (removed now, or already); False when the kernel says busy."""
    try:
        d.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _owner(name: str) -> int | None:
    """The service pid in ``cohort-sandbox-<pid>-<n>`` (None for a name of another shape)."""
    parts = name.split("-")
    if len(parts) < 4 or not parts[2].isdigit():
        return None
    return int(parts[2])


def _parents() -> list[Path]:
    """Every directory this process creates slot cgroups in (v1 memory, pids, cpu; or the v2 parent)."""
    try:
        own = _own_paths()
    except OSError:
        return []
    out = [ROOT / c / own[c].lstrip("/") for c in ("memory", "pids", "cpu") if c in own and (ROOT / c).is_dir()]
    if "" in own and (ROOT / "cgroup.controllers").exists():
        out.append(ROOT / own[""].lstrip("/"))
    return [p for p in dict.fromkeys(out) if p.is_dir()]


def sweep(timeout_s: float = 2.0) -> list[Path]:
    """Remove stale slot cgroups: those of service processes that are gone (killed without closing their
    sandbox: their slots died with them, their cgroup dirs did not), this process's own that no slot uses
    any more, and dirs an earlier :meth:`SlotCgroup.remove` could not remove in time. Another live
    process's cgroups are never touched; in a dead owner's, nothing is killed (its slots died with it,
    bwrap's --die-with-parent): only an empty dir is removed. Returns the dirs still there."""
    me = os.getpid()
    mine, theirs = [], []
    with _LOCK:
        live = set(_LIVE)
        leftover = set(_LEFTOVER)
        _LEFTOVER.clear()
    for parent in _parents():
        for d in parent.glob("cohort-sandbox-*"):
            pid = _owner(d.name)
            if pid is None:
                continue
            if pid == me:
                if d.name not in live:
                    mine.append(d)
            elif not _service_alive(pid):
                theirs.append(d)
    mine.extend(d for d in leftover if d not in mine and d.name not in live)
    left = remove_all([SlotCgroup([d], d, "") for d in mine], timeout_s) if mine else []
    # A dead owner's: nothing is killed; each dir is removed once it is empty, within DEAD_OWNER_WAIT_S (the
    # kernel refuses the rmdir, EBUSY, while the last of its exiting processes is still being torn down,
    # after it has left cgroup.procs); one still busy then is tried again at the next sweep.
    dead = [SlotCgroup([d], d, "") for d in theirs]
    waited = [cg for cg in dead if cg.empty()]  # still holding processes: nothing to wait for, tried next sweep
    left += remove_all(waited, DEAD_OWNER_WAIT_S, kill=False) if waited else []
    left += [d for cg in dead if cg not in waited for d in cg.dirs]
    return left


DEAD_OWNER_WAIT_S = 2.0


def _service_alive(pid: int) -> bool:
    """Whether the process that owns ``cohort-sandbox-<pid>-*`` still runs: ``/proc/<pid>`` is there and is
    a process, not a thread of another one (``/proc/<tid>`` of any thread is reachable too, so a dead
    service's pid reused as a thread id would otherwise keep its cgroups forever)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except PermissionError:  # /proc mounted with hidepid: there, but not ours to read
        return True
    except OSError:
        return False
    m = re.search(r"^Tgid:\s*(\d+)$", status, re.MULTILINE)
    return m is None or int(m.group(1)) == pid


@atexit.register
def _remove_own_at_exit() -> None:
    """A service that exits without closing its sandbox: kill its slots' processes and remove their dirs."""
    with _LOCK:
        live = [cg for cg in _LIVE.values() if cg is not None]
    if live:
        remove_all(live, REMOVE_TIMEOUT_S)


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


CPU_PERIOD_US = 100_000


def cpu_controls(cpu_quota: float) -> str | None:
    """Where slot CPU controls go on this machine: ``"v1"``, ``"v2"`` or None (not allowed)."""
    name = f"cohort-sandbox-{os.getpid()}-probe{next(_counter)}"
    with _LOCK:
        _LIVE[name] = None
    try:
        probe = _create_cpu(name, cpu_quota)
        if probe is None:
            return None
        path, version = probe
        remove_all([SlotCgroup([path], path, "")])
        return version
    finally:
        with _LOCK:
            _LIVE.pop(name, None)


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


def create(memory_bytes: int, max_pids: int, cpu_quota: float = 0.0, cpu: bool = True) -> SlotCgroup | None:
    """A fresh cgroup for one slot (with CPU controls unless ``cpu`` is false), or None when the machine does
    not allow it."""
    try:
        own = _own_paths()
    except OSError:
        return None
    name = f"cohort-sandbox-{os.getpid()}-{next(_counter)}"
    with _LOCK:
        _LIVE[name] = None  # reserved before the first mkdir: a concurrent sweep leaves it alone
    try:
        cg = _create_slot(own, name, memory_bytes, max_pids, cpu_quota, cpu)
    except BaseException:
        with _LOCK:
            _LIVE.pop(name, None)
        raise
    with _LOCK:
        if cg is None:
            _LIVE.pop(name, None)
        else:
            _LIVE[name] = cg
    return cg


def _create_slot(own: dict[str, str], name: str, memory_bytes: int, max_pids: int, cpu_quota: float,
                 cpu: bool = True) -> SlotCgroup | None:
    cg = _create_memory_pids(own, name, memory_bytes, max_pids)
    if not cpu:
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
