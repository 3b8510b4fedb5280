"""Sandbox policy: limits, the seccomp filter and the bubblewrap command line.

Threat model
============
Untrusted, model-written Python runs in a *slot*: one bubblewrap sandbox whose PID 1 is a small
trusted fork server (``sandbox/_zygote.py``). Each execution is a fresh child forked from it; after
each execution PID 1 kills every other process in the namespace and wipes the writable dirs.

Defended against (each has a test in ``tests/sandbox/``):

- **Privilege**: the sandbox never runs as host root. When the service is root, bwrap itself is
  started as uid/gid 65534 with no supplementary groups, inside a user namespace that maps only that
  uid (so root inside cannot exist, and host-root-owned files, /proc/sys and sysctls stay read-only).
  No capabilities; ``--disable-userns`` plus seccomp stop new namespaces.
- **Namespaces**: user, pid, net, ipc, uts and cgroup are all unshared. The net namespace has only
  its own loopback, so no egress (internet or the host's loopback listeners).
- **Filesystem**: a minimal read-only root (``/usr`` and the interpreter only; ``site-packages``
  / ``dist-packages`` masked so the service's own source is not visible); ``/tmp`` (the work dir)
  and ``/dev/shm`` are size-capped tmpfs wiped after every run; the rest of ``/dev`` (bwrap's own,
  uncapped tmpfs) is read-only; no /etc, /home, /root, /work, /sys. A run that leaves more than
  the wipe can remove in 1.5 s (a million empty files) gets its slot replaced instead.
- **Environment**: the sandbox starts from an empty environment (``env={}`` for bwrap and
  ``--clearenv``), so neither ``environ`` nor ``/proc/1/environ`` holds anything of the service.
  PID 1 is not dumpable: children cannot read its memory, fds or environ through /proc.
- **Syscalls** (seccomp, EPERM): ptrace, process_vm_*, io_uring, keyctl/add_key/request_key, bpf,
  perf_event_open, userfaultfd, mount/umount/pivot_root/chroot, unshare/setns and clone with
  namespace flags (clone3 gets ENOSYS so libc falls back to clone), module loading, kexec, reboot,
  swap, clock setting, SysV IPC (no state that outlives a run), memfd_create (shmem that neither
  RLIMIT_AS nor a tmpfs cap would see), sync/syncfs (flushing the host's disks: an I/O storm,
  and a process stuck in it delays the kill), sockets other than AF_UNIX /
  AF_INET / AF_INET6, and raw sockets; prlimit / sched_set* / setpriority / ioprio_set on any
  process but the caller (same-uid calls that need no ptrace rights: aimed at PID 1 they would
  outlive the run, and PID 1 also re-checks its own rlimits after every run).
- **Resources**: RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC (fork and thread
  bombs; per user namespace on Linux >= 5.14), tmpfs size caps (disk fill, /dev/shm), a wall-clock
  deadline after which PID 1 kills the whole tree (and the host kills the whole sandbox if PID 1
  does not answer), stdout/stderr caps enforced by the host reader.
- **Persistence**: nothing outlives a run: processes are killed, tmpfs dirs wiped, /dev read-only,
  SysV IPC and memfd denied, PID 1's rlimits / priority / affinity out of reach (a slot whose PID 1
  changed anyway is replaced), and each child is forked from a zygote whose memory never held a
  previous job.
- **Forged verdicts**: see ``sandbox/grader.py``: tests run in a *different* sandbox from the
  candidate, and only plain data crosses between them (relayed unparsed by the host, decoded
  strictly by the grader; a candidate's StopIteration reaches the tests as RuntimeError). Error
  text from either side is made valid UTF-8 before it reaches protobuf.
- **Stateful sessions** (the ``python`` tool with ``sandbox.python_tool.sessions``, ``sandbox/session.py``): a
  session's interpreter keeps its variables between the calls of one rollout, and *that* is the one thing
  that persists, by design, inside that session's own slot. Everything above holds for it: the same
  sandbox, filter, rlimits (memory and CPU over the session's whole life) and cgroup; another session is
  another sandbox, and when a session ends (its rollout's ``EndSessions``, its idle time, lifetime or call
  count, a loop or exhausted memory) its slot is destroyed. What a program leaves in a session (threads,
  patched modules) affects only that rollout's later calls.
- **Escaping the score**: the ways we know for a program to turn its result into an
  infrastructure failure (masked, not scored) are closed: a wipe that overruns, error text that
  protobuf refuses, reference setup code that calls the candidate and crashes.

Not defended against (deployment must add these layers):

- A test that calls a helper the *candidate* also defines (HumanEval's ``poly`` with no prompt
  given as ``setup_code``) calls the candidate's version: references must supply their helpers.
- Kernel vulnerabilities reachable through the allowed syscalls (a VM or gVisor would help).
- Side channels (timing, Spectre), CPU contention between slots, and memory pressure on the host
  when the machine has no usable cgroup: RLIMIT_AS bounds each process, RLIMIT_NPROC their number,
  so the worst case per run is about ``memory_bytes * max_processes`` plus the tmpfs caps, plus
  kernel memory no rlimit sees (socket and pipe buffers, bounded by the kernel's per-socket and
  per-user pipe limits).
- Reading the world-readable files under ``/usr`` (the interpreter's standard library).
- Denial of service against the sandbox pool itself (a caller with many long requests).

Running inside a container
==========================
bubblewrap needs to create a user namespace and mount a fresh /proc for each PID namespace:

- an unmasked /proc: podman ``--security-opt unmask=/proc/*`` (or ``systempaths=unconfined``);
  Kubernetes ``procMount: Unmasked``. The kernel refuses a new procfs mount while paths of the
  container's /proc are masked.
- a seccomp profile that allows ``unshare``/``clone`` with namespace flags and ``mount``: podman's
  and CRI-O's default profiles do (we do not call ``sethostname``); Docker's default and
  containerd's RuntimeDefault do not (use ``deploy/seccomp.py`` or unconfined there).
- unprivileged user namespaces on the host (``user.max_user_namespaces`` > 0).

Nothing else: no capabilities (``--cap-drop ALL``), ``no-new-privileges``, a read-only root, and a
non-root user (recommended: the sandbox then runs as that uid mapped to 65534, and slots are
started with vfork). When the service runs as root it drops to uid/gid 65534 with ``setpriv``
before starting bwrap. Per-slot cgroups are used only where the service may create them (usually
not in a container: the container's own memory/pids limits then bound all slots together).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

SANDBOX_UID = 65534
SANDBOX_GID = 65534


@dataclass(frozen=True)
class Limits:
    """Limits of one execution. ``0`` means "use the default" when clamping a request."""

    wall_s: float = 10.0
    """Wall-clock deadline; the whole process tree is killed when it passes."""
    cpu_s: float = 10.0
    """CPU seconds per process (RLIMIT_CPU)."""
    memory_bytes: int = 512 << 20
    """Address space per process (RLIMIT_AS)."""
    output_bytes: int = 1 << 20
    """Cap on stdout and on stderr, each."""
    max_processes: int = 32
    """Processes and threads in the sandbox (RLIMIT_NPROC), PID 1 included."""
    disk_bytes: int = 64 << 20
    """Size of the writable work dir (tmpfs /tmp) and per-file cap (RLIMIT_FSIZE)."""

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "max_processes", "disk_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"limit {name} must be >= 0, got {getattr(self, name)}")

    def clamp(self, maxima: Limits, defaults: Limits) -> Limits:
        """Fill zeros from ``defaults`` and cap every field at ``maxima``."""
        values = {}
        for name in self.__dataclass_fields__:
            mine = getattr(self, name) or getattr(defaults, name)
            values[name] = min(mine, getattr(maxima, name))
        return replace(self, **values)

    def zygote_view(self) -> dict:
        return {
            "memory_bytes": int(self.memory_bytes),
            "cpu_s": float(self.cpu_s),
            "file_bytes": int(self.disk_bytes),
            "max_processes": int(self.max_processes),
        }


DEFAULT_LIMITS = Limits()
MAX_CODE_BYTES = 1 << 20
"""The largest program the sandbox takes (UTF-8 bytes); the code verifier scores a bigger answer 0, flagged."""

MAX_LIMITS = Limits(wall_s=60.0, cpu_s=60.0, memory_bytes=2 << 30, output_bytes=16 << 20, max_processes=64,
                    disk_bytes=256 << 20)


@dataclass(frozen=True)
class SandboxConfig:
    """Where the sandbox's interpreter lives and how big its writable dirs are."""

    interpreter: str = "/usr/bin/python3"
    """Python inside the sandbox (serve config ``sandbox.python``, formerly ``$COHORT_SANDBOX_PYTHON``); its
    prefix is bound read-only."""
    bwrap: str = "bwrap"
    tmp_bytes: int = MAX_LIMITS.disk_bytes
    """Size cap of the /tmp work dir tmpfs (per slot)."""
    shm_bytes: int = 16 << 20
    """Size cap of /dev/shm (per slot)."""
    use_cgroups: bool = True
    """Put each slot in its own memory+pids cgroup when the machine allows it (see cgroup.py; serve config
    ``sandbox.cgroups``, formerly ``COHORT_SANDBOX_CGROUPS=0`` to turn them off)."""
    cpu_cgroups: bool = True
    """Give each slot a CPU cgroup too (its quota and an equal weight) when the machine allows it (serve config
    ``sandbox.cpu_cgroups``, formerly ``COHORT_SANDBOX_CPU_CGROUPS=0`` to turn them off)."""
    slot_memory_bytes: int = MAX_LIMITS.memory_bytes + MAX_LIMITS.disk_bytes + (16 << 20) + (64 << 20)
    """cgroup memory cap of a whole slot: one run at the max limit, its tmpfs dirs, the fork server."""
    slot_max_pids: int = MAX_LIMITS.max_processes + 4
    slot_cpu_quota: float = 1.0
    """CPUs one slot may use at most (cgroup CPU quota; 0: no cap); every slot also gets an equal CPU weight."""

    def __post_init__(self) -> None:
        if not Path(self.interpreter).is_file():
            raise ValueError(f"sandbox interpreter {self.interpreter!r} does not exist")
        if self.use_cgroups and self.tmp_bytes + self.shm_bytes + (64 << 20) > self.slot_memory_bytes:
            # tmpfs pages survive the processes that wrote them: if they alone could fill the
            # cgroup, its OOM killer would take the fork server.
            raise ValueError("slot_memory_bytes must exceed tmp_bytes + shm_bytes + 64 MiB")
        if shutil.which(self.bwrap) is None:
            raise ValueError(f"bubblewrap ({self.bwrap!r}) is not installed: apt-get install bubblewrap")


def _seccomp_filter():
    import pyseccomp as sc

    deny = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(sc.ALLOW)
    for name in (
        "ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
        "userfaultfd", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount",
        "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr", "kexec_load",
        "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
        "swapoff", "syslog", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at",
        "lookup_dcookie", "fanotify_init", "settimeofday", "clock_settime", "clock_adjtime",
        "adjtimex", "sethostname", "setdomainname", "iopl", "ioperm", "kcmp", "pidfd_getfd",
        "shmget", "shmat", "msgget", "semget", "vhangup", "personality", "mbind", "migrate_pages",
        "move_pages", "set_mempolicy", "nfsservctl", "uselib", "ustat", "sysfs", "modify_ldt",
        "landlock_create_ruleset", "memfd_create", "memfd_secret", "sync", "syncfs",
    ):
        try:
            f.add_rule(deny, name)
        except (RuntimeError, ValueError, OSError):
            pass  # syscall unknown to this libseccomp / arch
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    clone_new = {
        "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
        "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
        "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
    }
    for flag in clone_new.values():
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # Sockets: only AF_UNIX (1), AF_INET (2), AF_INET6 (10); never SOCK_RAW (3) or SOCK_PACKET (10).
    for family in range(0, 64):
        if family not in (1, 2, 10):
            f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    for sock_type in (3, 10):
        f.add_rule(deny, "socket", sc.Arg(1, sc.MASKED_EQ, 0xF, sock_type))
    f.add_rule(deny, "ioctl", sc.Arg(1, sc.EQ, 0x5412))  # TIOCSTI
    # Calls that change *another* process of the same uid without ptrace rights: pointed at PID 1
    # (the fork server) their effect would be inherited by every later run in the slot, e.g.
    # prlimit(1, RLIMIT_AS, 1 MiB) breaks the next, honest run. Only "self" (pid 0) is allowed.
    for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
        f.add_rule(deny, name, sc.Arg(0, sc.NE, 0))
    f.add_rule(deny, "setpriority", sc.Arg(0, sc.NE, 0))  # PRIO_PGRP / PRIO_USER reach PID 1 too
    f.add_rule(deny, "setpriority", sc.Arg(1, sc.NE, 0))
    f.add_rule(deny, "ioprio_set", sc.Arg(0, sc.NE, 1))  # only IOPRIO_WHO_PROCESS ...
    f.add_rule(deny, "ioprio_set", sc.Arg(1, sc.NE, 0))  # ... of itself
    return f


@lru_cache(maxsize=1)
def seccomp_bpf() -> bytes:
    """The compiled filter (classic BPF) for ``bwrap --seccomp FD``."""
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        _seccomp_filter().export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


@lru_cache(maxsize=4)
def masked_package_dirs(interpreter: str) -> tuple[str, ...]:
    """site-packages / dist-packages of the sandbox interpreter: hidden with empty tmpfs."""
    out = subprocess.run(
        [interpreter, "-I", "-S", "-c",
         "import sysconfig,sys;print('\\n'.join({sysconfig.get_paths()[k] for k in ('purelib','platlib')}))"],
        capture_output=True, text=True, timeout=30, env={},
    )
    dirs = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    prefix = Path(interpreter).resolve().parent.parent
    for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                    "local/lib/python3*/dist-packages", "local/lib/python3*/site-packages"):
        dirs.update(str(p) for p in prefix.glob(pattern))
    return tuple(sorted(d for d in dirs if Path(d).is_dir()))


def bind_roots(interpreter: str) -> list[str]:
    """Read-only binds: /usr, plus the interpreter's prefix when it lives elsewhere."""
    roots = ["/usr"]
    prefix = str(Path(interpreter).resolve().parent.parent)
    if not prefix.startswith("/usr"):
        roots.append(prefix)
    return roots


def bwrap_argv(config: SandboxConfig, seccomp_fd: int, bootstrap: str) -> list[str]:
    argv = [
        config.bwrap,
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1",
        # No --hostname: bwrap would need sethostname, which container engines' default seccomp
        # profiles reserve for CAP_SYS_ADMIN; the UTS namespace is still private.
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
        "--cap-drop", "ALL",
    ]
    for root in bind_roots(config.interpreter):
        argv += ["--ro-bind", root, root]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
        if os.path.islink(link):
            argv += ["--symlink", target, link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    for d in masked_package_dirs(config.interpreter):
        argv += ["--tmpfs", d, "--remount-ro", d]
    argv += [
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "1777", "--size", str(config.shm_bytes), "--tmpfs", "/dev/shm",
        "--perms", "1777", "--size", str(config.tmp_bytes), "--tmpfs", "/tmp",
        # bwrap's /dev is an uncapped tmpfs that outlives runs: read-only (device nodes still open
        # for writing; /dev/shm is its own capped mount and stays writable).
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--seccomp", str(seccomp_fd),
        "--", config.interpreter, "-I", "-S", "-B", "-c", bootstrap,
    ]
    return argv


@lru_cache(maxsize=1)
def bootstrap_source() -> str:
    """codec.py + _zygote.py, run inside the sandbox with ``python3 -I -S -c``."""
    here = Path(__file__).resolve().parent
    codec = (here / "codec.py").read_text()
    zygote = (here / "_zygote.py").read_text()
    return codec.replace("from __future__ import annotations\n", "") + "\n" + zygote


def drop_root_argv(argv: list[str]) -> tuple[list[str], dict]:
    """When the service is root: run bwrap as uid/gid 65534 with no groups, capabilities or bounding set.

    ``setpriv`` (util-linux) is preferred over ``Popen(user=...)``: with a uid change CPython must
    use fork() instead of vfork(), which runs gRPC's fork handlers in the child and can kill it
    before exec. Returns (argv, extra Popen kwargs).
    """
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", *argv], {}
    return argv, {"user": SANDBOX_UID, "group": SANDBOX_GID, "extra_groups": []}


def running_as_root() -> bool:
    return os.geteuid() == 0
