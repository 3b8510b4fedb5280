"""One warm sandbox (a *slot*) and one execution in it, as seen from the trusted host.

A :class:`Slot` is a bubblewrap sandbox whose PID 1 is the fork server in ``_zygote.py``. The
host hands it one job at a time over a SOCK_SEQPACKET control socket, passing fresh pipes for the
job body, stdin, stdout, stderr (and an RPC socket for the grader protocol) as file descriptors.
Output is read here with caps; the zygote enforces the wall deadline and the host kills the whole
sandbox (the PID namespace dies with its PID 1) if the zygote ever fails to answer in time.
"""

from __future__ import annotations

import enum
import json
import os
import selectors
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, replace

from cohort.sandbox import cgroup, policy
from cohort.sandbox.codec import pack

EXIT_MEMORY = 4
SLOT_START_TIMEOUT_S = 30.0
PIPE_INLINE_BYTES = 32 * 1024  # well under the 64 KiB Linux pipe buffer


class SandboxError(RuntimeError):
    """Infrastructure failure of the sandbox itself (never a verdict about the program)."""


class ExecStatus(enum.Enum):
    EXITED = "exited"
    TIME_LIMIT_EXCEEDED = "time_limit_exceeded"
    MEMORY_LIMIT_EXCEEDED = "memory_limit_exceeded"
    OUTPUT_LIMIT_EXCEEDED = "output_limit_exceeded"


@dataclass(frozen=True)
class ExecResult:
    status: ExecStatus
    exit_code: int
    signal: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    wall_s: float
    cpu_s: float


class Slot:
    """One bubblewrap sandbox with a fork server as PID 1; runs one job at a time."""

    def __init__(self, config: policy.SandboxConfig) -> None:
        self.config = config
        self.healthy = False
        host_ctrl, child_ctrl = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        seccomp_r, seccomp_w = os.pipe()
        bpf = policy.seccomp_bpf()
        os.write(seccomp_w, bpf)  # a few hundred bytes: fits in the pipe buffer
        os.close(seccomp_w)
        try:
            bootstrap = policy.bootstrap_source().replace("CTRL_FD = 3", f"CTRL_FD = {child_ctrl.fileno()}")
            argv, drop = policy.bwrap_argv(config, seccomp_r, bootstrap), {}
            if policy.running_as_root():
                argv, drop = policy.drop_root_argv(argv)
            self.cgroup = cgroup.create(config.slot_memory_bytes, config.slot_max_pids, config.slot_cpu_quota,
                                        cpu=config.cpu_cgroups) if config.use_cgroups else None
            if self.cgroup is not None:
                argv = cgroup.enter_argv(self.cgroup, argv)
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env={},
                    pass_fds=(child_ctrl.fileno(), seccomp_r),
                    **drop,
                )
            except BaseException:
                if self.cgroup is not None:
                    self.cgroup.remove()
                host_ctrl.close()
                raise
        finally:
            child_ctrl.close()
            os.close(seccomp_r)
        self.ctrl = host_ctrl
        self.ctrl.settimeout(SLOT_START_TIMEOUT_S)
        try:
            hello = self.ctrl.recv(64)
        except OSError:
            hello = b""
        if hello != b'{"hello":1}':
            err = self._reap_stderr()
            self.kill()
            raise SandboxError(f"sandbox failed to start: {err or 'no hello from the fork server'}")
        self.ctrl.settimeout(None)
        self.healthy = True

    def _reap_stderr(self) -> str:
        try:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=5)
            return err.decode(errors="replace")[-2000:].strip()
        except Exception as exc:  # noqa: BLE001 - diagnostics only, the caller raises SandboxError
            return repr(exc)

    def kill(self) -> None:
        """Kill the whole sandbox (its PID namespace dies with PID 1)."""
        self.healthy = False
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stderr:
            self.proc.stderr.close()
        self.ctrl.close()
        if self.cgroup is not None:
            self.cgroup.remove()

    def run(self, job: dict, limits: policy.Limits, stdin: bytes = b"", rpc: socket.socket | None = None) -> ExecResult:
        """Run ``job`` (``{"mode": "exec"|"serve"|"grader", ...}``) in a forked child.

        ``rpc`` is the child's end of a socketpair: it becomes the child's fd 3 and is closed
        here (the grader relay in grader.py talks to the host end).
        """
        if not self.healthy:
            raise SandboxError("slot is not healthy")
        job_r, job_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        child_fds = [job_r, in_r, out_w, err_w]
        rpc_child = None
        if rpc is not None:
            rpc_child = rpc
            child_fds.append(rpc.fileno())
        header = {"deadline": limits.wall_s, "limits": limits.zygote_view()}
        try:
            socket.send_fds(self.ctrl, [json.dumps(header).encode()], child_fds)
        except OSError as exc:
            self.healthy = False
            raise SandboxError(f"sandbox control channel failed: {exc}") from exc
        finally:
            for fd in child_fds[:4]:
                os.close(fd)
            if rpc_child is not None:
                rpc_child.close()
        body = pack(job)[4:]
        for fd, data in ((job_w, body), (in_w, stdin)):
            if len(data) <= PIPE_INLINE_BYTES:  # fits in the pipe buffer: no thread needed
                _write_all(fd, data)
            else:
                threading.Thread(target=_write_all, args=(fd, data), daemon=True).start()
        ooms = self.cgroup.oom_kills() if self.cgroup is not None else 0
        try:
            result = self._collect(out_r, err_r, limits)
            if (self.cgroup is not None and self.cgroup.oom_kills() > ooms
                    and result.status is not ExecStatus.OUTPUT_LIMIT_EXCEEDED):
                result = replace(result, status=ExecStatus.MEMORY_LIMIT_EXCEEDED)
            return result
        finally:
            os.close(out_r)
            os.close(err_r)

    def _collect(self, out_r: int, err_r: int, limits: policy.Limits) -> ExecResult:
        cap = limits.output_bytes
        bufs = {out_r: bytearray(), err_r: bytearray()}
        truncated = {out_r: False, err_r: False}
        sel = selectors.DefaultSelector()
        sel.register(out_r, selectors.EVENT_READ)
        sel.register(err_r, selectors.EVENT_READ)
        sel.register(self.ctrl, selectors.EVENT_READ)
        backstop = time.monotonic() + limits.wall_s + 5.0
        result = None
        kill_sent = False
        open_pipes = 2
        try:
            while result is None or open_pipes:
                left = backstop - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise SandboxError("sandbox fork server did not answer before the deadline")
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    if key.fileobj is self.ctrl:
                        msg = self.ctrl.recv(1 << 16)
                        sel.unregister(self.ctrl)
                        if not msg:
                            err = self._reap_stderr()
                            self.kill()
                            raise SandboxError(f"sandbox fork server died: {err[-500:]}")
                        result = json.loads(msg)
                    elif key.fileobj in bufs:
                        fd = key.fileobj
                        chunk = os.read(fd, 1 << 16)
                        if not chunk:
                            sel.unregister(fd)
                            open_pipes -= 1
                            continue
                        room = cap - len(bufs[fd])
                        bufs[fd] += chunk[: max(room, 0)]
                        if len(chunk) > room:
                            truncated[fd] = True
                            if not kill_sent and result is None:
                                kill_sent = self._send_kill()
        finally:
            sel.close()
        if result.get("dirty"):
            self.kill()  # the zygote could not wipe its dirs and has exited; the pool replaces the slot
        return self._result(result, bufs[out_r], bufs[err_r], truncated[out_r], truncated[err_r], limits)

    def _send_kill(self) -> bool:
        try:
            self.ctrl.send(b'{"kill":1}')
        except OSError:
            pass
        return True

    def kill_current(self) -> None:
        """Ask PID 1 to kill the running job (used by the grader relay on a per-test timeout)."""
        self._send_kill()

    @staticmethod
    def _result(r: dict, out: bytes, err: bytes, out_trunc: bool, err_trunc: bool,
                limits: policy.Limits) -> ExecResult:
        exit_code, sig = int(r["exit"]), int(r["signal"])
        cpu = float(r["cpu"])
        if out_trunc or err_trunc:
            status = ExecStatus.OUTPUT_LIMIT_EXCEEDED
        elif r["timeout"] or sig == 24 or (sig == 9 and cpu >= limits.cpu_s):  # 24 = SIGXCPU
            status = ExecStatus.TIME_LIMIT_EXCEEDED
        elif exit_code == EXIT_MEMORY or b"\nMemoryError" in err[-4096:]:
            status = ExecStatus.MEMORY_LIMIT_EXCEEDED
        else:
            status = ExecStatus.EXITED
        return ExecResult(status, exit_code, sig, bytes(out), bytes(err), out_trunc, err_trunc,
                          float(r["wall"]), cpu)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # the child exited without reading everything
    finally:
        os.close(fd)
