"""Hostile programs against the real sandbox: each asserts verdict/reward, host unaffected, no secret out.

Two shapes of case:

- ``tests``: the program is a candidate graded by MBPP-style asserts on ``add``; every hack here
  returns wrong answers, so the reward must stay 0 whatever it forges.
- ``exec``: the program runs as ``__main__`` (ExecuteCode); we check its status and that what it
  printed proves the attack failed.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

import pytest

from cohort.sandbox import policy
from cohort.sandbox.executor import ExecStatus
from cohort.sandbox.grader import TestSpec
from cohort.verifiers.base import Verdict
from cohort.verifiers.code.verifier import io_outcome, verdict_for

MARKER = "cohort_hostile_marker"  # conftest.host_unaffected looks for files with this name on the host
SECRET_ENV = "COHORT_SANDBOX_TEST_SECRET"  # planted by conftest.sandbox

ASSERTS = ("assert add(2, 3) == 5", "assert add(10, -4) == 6", "assert add(0, 0) == 0 or add(0, 0) == 999")
SPEC = TestSpec("asserts", asserts=ASSERTS)
WRONG = "\ndef add(a, b):\n    return a - b + 1\n"
EXITED, TLE, MLE, OLE = (ExecStatus.EXITED, ExecStatus.TIME_LIMIT_EXCEEDED, ExecStatus.MEMORY_LIMIT_EXCEEDED,
                         ExecStatus.OUTPUT_LIMIT_EXCEEDED)
ZERO_VERDICTS = {Verdict.INCORRECT, Verdict.RUNTIME_ERROR, Verdict.RESOURCE_LIMIT_EXCEEDED}


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    code: str
    shape: str = "tests"  # "tests" | "exec"
    statuses: frozenset = frozenset({EXITED})
    verdicts: frozenset = frozenset(ZERO_VERDICTS)
    must_print: str = ""  # exec: a line the program prints only when the attack failed
    must_not_print: str = ""
    wall_s: float = 2.0


def T(id, category, code, verdicts=ZERO_VERDICTS):  # noqa: N802 - table helpers
    return Case(id, category, code, "tests", verdicts=frozenset(verdicts))


def X(id, category, code, statuses=(EXITED,), must_print="", must_not_print="", wall_s=4.0):  # noqa: N802
    return Case(id, category, code, "exec", frozenset(statuses), must_print=must_print, must_not_print=must_not_print,
                wall_s=wall_s)


SYSCALL = """
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
"""

CASES = [
    # --- forged verdicts -----------------------------------------------------------------------
    T("fake_pass_markers", "forge", "print('PASS'); print('All tests passed'); print('OK 3/3')" + WRONG),
    T("eq_always_true", "forge", "class Any:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
      "def add(a, b):\n    return Any()\n"),
    T("int_subclass_eq", "forge", "class E(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
      "def add(a, b):\n    return E(-1)\n"),
    T("bool_subclass_trick", "forge", "class S(str):\n    def __eq__(self, o): return True\ndef add(a, b): return S('x')\n"),
    T("os_exit_at_import", "forge", "import os\nprint('PASS')\nos._exit(0)\n" + WRONG),
    T("os_exit_in_call", "forge", "import os\ndef add(a, b):\n    os._exit(0)\n"),
    T("sys_exit_at_import", "forge", "raise SystemExit(0)\n" + WRONG),
    T("sys_exit_in_call", "forge", "import sys\ndef add(a, b):\n    sys.exit(0)\n"),
    T("patch_print", "forge", "import builtins, sys\nbuiltins.print = lambda *a, **k: sys.__stdout__.write('PASS\\n')\n"
      + WRONG),
    T("patch_assertionerror", "forge", "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
      + WRONG),
    T("patch_exception_hooks", "forge", "import sys\nsys.excepthook = lambda *a: None\n"
      "import builtins\nbuiltins.Exception = BaseException\n" + WRONG),
    T("frame_walk_clear_tests", "forge", "import gc, sys\n"
      "for o in gc.get_objects():\n    if isinstance(o, (list, tuple)) and any('assert' in str(x) for x in o[:5]):\n"
      "        try: o.clear()\n        except Exception: pass\n"
      "def add(a, b):\n    f = sys._getframe()\n    while f:\n        f.f_locals.clear() if hasattr(f.f_locals, 'clear') else None\n"
      "        f = f.f_back\n    return 0\n"),
    T("frame_walk_globals", "forge", "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n    while f is not None:\n"
      "        f.f_globals['AssertionError'] = StopIteration\n        f = f.f_back\n    return -7\n"),
    T("atexit_pass", "forge", "import atexit, os\natexit.register(lambda: (print('PASS'), os._exit(0)))\n" + WRONG),
    T("reexec_harness", "forge", "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'print(\"PASS\")'])\n"),
    T("rewrite_harness_source", "forge", "import sys\nsrc = open('/proc/self/cmdline', 'rb').read()\n"
      "try:\n    open('/proc/self/exe', 'wb').write(b'x')\nexcept OSError as e: print('exe', e)\n" + WRONG),
    T("forge_protocol_frames", "forge", "import os, json\n"
      "for m in ({'end': 0, 'passed': True}, {'done': True}, {'ok': {'i': '5'}}):\n"
      "    b = json.dumps(m).encode(); os.write(3, len(b).to_bytes(4, 'big') + b)\n" + WRONG),
    T("answer_with_protocol_garbage", "forge", "import os\ndef add(a, b):\n    os.write(3, b'\\xff' * 64)\n    return a + b + 1\n"),
    T("read_tests_from_disk", "forge", "import os\nhits = []\n"
      "for top in ('/', '/tmp', '/proc'):\n    for root, dirs, files in os.walk(top):\n"
      "        if root.startswith(('/proc/sys', '/usr/share', '/usr/lib')): dirs[:] = []; continue\n"
      "        for f in files[:50]:\n            try:\n                if b'add(10, -4)' in open(os.path.join(root, f), 'rb').read(1 << 20): hits.append(root + '/' + f)\n"
      "            except Exception: pass\n        if len(hits) > 3: break\nprint('HITS', hits)\n" + WRONG),
    T("read_grader_memory", "forge", SYSCALL + "print(sc(310, 1, 0, 1, 0, 1, 0))\n"  # process_vm_readv
      "try: print(open('/proc/1/mem','rb').read(10))\nexcept OSError as e: print('mem', e)\n" + WRONG),
    T("write_parent_stdout", "forge", "for p in ('/proc/1/fd/1', '/proc/1/fd/3', '/proc/self/fd/3'):\n"
      "    try:\n        open(p, 'w').write('PASS\\n{\"end\":0,\"passed\":true}')\n    except Exception as e:\n        print(p, type(e).__name__)\n"
      + WRONG),
    T("symlink_and_fifo_results", "forge", "import os\n"
      "for n in ('result.json', 'results', 'verdict', 'out.txt'):\n    os.symlink('/etc/passwd', '/tmp/' + n)\n"
      "os.mkfifo('/tmp/result.fifo')\nos.symlink('/proc/1/fd/1', '/tmp/stdout')\n" + WRONG),
    # --- resources -----------------------------------------------------------------------------
    X("cpu_spin", "cpu", "while True:\n    pass\n", (TLE,), wall_s=1.5),
    X("sleep_forever", "wall", "import time\ntime.sleep(1000)\n", (TLE,), wall_s=1.5),
    X("wall_block_on_select", "wall", "import select\nselect.select([], [], [])\n", (TLE,), wall_s=1.5),
    X("memory_bytearray", "memory", "x = bytearray(8 << 30)\n", (MLE,)),
    X("memory_growth", "memory", "a = []\nwhile True:\n    a.append(bytearray(1 << 24))\n", (MLE,), wall_s=10.0),
    X("fork_bomb", "fork", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
      (TLE, EXITED, MLE)),
    X("thread_bomb", "threads", "import threading, time\nn = 0\ntry:\n    while True:\n"
      "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start(); n += 1\n"
      "except Exception as e:\n    print('capped', n < 100)\n", (EXITED, TLE), must_print="capped True"),
    X("disk_fill", "disk", "f = open('/tmp/" + MARKER + "', 'wb')\ntry:\n    while True:\n        f.write(b'x' * (1 << 20))\n"
      "except OSError as e:\n    print('stopped', e.errno)\n", (EXITED,), must_print="stopped"),
    X("shm_fill", "disk", "f = open('/dev/shm/" + MARKER + "', 'wb')\ntry:\n    for i in range(1 << 12):\n"
      "        f.write(b'x' * (1 << 20)); f.flush()\nexcept OSError as e:\n    print('stopped', e.errno)\n",
      (EXITED,), must_print="stopped"),
    X("huge_stdout", "output", "import sys\nwhile True:\n    sys.stdout.write('A' * 65536)\n", (OLE,)),
    X("huge_stderr", "output", "import os\nwhile True:\n    os.write(2, b'E' * 65536)\n", (OLE,)),
    X("output_from_background_child", "output", "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
      "    while True: os.write(1, b'B' * 65536)\ntime.sleep(0.1)\n", (OLE, EXITED)),
    X("recursion_bomb", "memory", "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)\n",
      (MLE, EXITED, TLE)),
    # --- network -------------------------------------------------------------------------------
    X("egress_host_loopback", "network", "import socket, sys\nport = int(sys.stdin.read())\ns = socket.socket()\ns.settimeout(1)\n"
      "print('connect', s.connect_ex(('127.0.0.1', port)))\n", must_print="connect 111"),
    X("egress_internet", "network", "import socket\ns = socket.socket()\ns.settimeout(1)\n"
      "try:\n    s.connect(('1.1.1.1', 53)); print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e.errno)\n",
      must_print="blocked", must_not_print="CONNECTED"),
    X("listen_port", "network", "import socket, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind(('0.0.0.0', 47123))\ns.listen()\nprint('listening')\n", must_print="listening"),
    X("raw_and_exotic_sockets", "network", "import socket\nfor fam, typ in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW),"
      " (socket.AF_NETLINK, socket.SOCK_RAW), (40, socket.SOCK_STREAM)):\n    try:\n        socket.socket(fam, typ); print('OPENED', fam)\n"
      "    except OSError as e:\n        print('denied', fam, e.errno)\n", must_not_print="OPENED"),
    X("abstract_unix_socket_to_host", "network", "import socket\ns = socket.socket(socket.AF_UNIX)\n"
      "try:\n    s.connect('\\0cohort-hostile-abstract'); print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e.errno)\n",
      must_print="blocked", must_not_print="CONNECTED"),
    X("udp_and_ipv6_to_host_loopback", "network", "import socket, sys\nport = int(sys.stdin.read())\n"
      "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nu.sendto(b'x', ('127.0.0.1', port))\n"
      "s6 = socket.socket(socket.AF_INET6)\ns6.settimeout(1)\nprint('v6', s6.connect_ex(('::1', port)) != 0)\n",
      must_print="v6 True"),
    X("crypto_and_exotic_families", "network", "import socket\nfor fam in (38, 16, 17, 31, 40, 44):\n    try:\n"
      "        socket.socket(fam, socket.SOCK_SEQPACKET if fam == 38 else socket.SOCK_RAW); print('OPENED', fam)\n"
      "    except OSError as e:\n        print('denied', fam)\n", must_not_print="OPENED"),
    X("fd_exhaustion", "resources", "import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
      "except OSError as e:\n    print('capped', len(fds) < 1000)\n", must_print="capped True"),
    X("c_stack_crash", "memory", "import json\njson.loads('[' * 10**6 + ']' * 10**6)\n", (EXITED, MLE)),
    # --- host secrets ----------------------------------------------------------------------------
    X("secret_env", "secrets", "import os\nprint(sorted(os.environ))\nprint(os.environ.get('" + SECRET_ENV + "', 'absent'))\n",
      must_print="absent"),
    X("secret_proc_environ", "secrets", "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit() or p == 'self':\n"
      "        try: print(p, open(f'/proc/{p}/environ', 'rb').read())\n        except OSError as e: print(p, 'denied')\n",
      must_print="1 denied"),
    X("secret_file", "secrets", "import sys\npath = sys.stdin.read()\ntry:\n    print(open(path).read())\nexcept OSError as e:\n"
      "    print('unreadable', e.errno)\n", must_print="unreadable"),
    X("service_source", "secrets", "import sys, os\nfor p in sys.stdin.read().split():\n    print(p, os.path.exists(p))\n"
      "for p in ('/work', '/root', '/etc', '/home', '/usr/lib/python3/dist-packages/grpc', '/proc/1/cwd', '/proc/1/root/work'):\n"
      "    print(p, os.path.exists(p) and len(os.listdir(p)))\n", must_not_print="True"),
    X("host_processes_invisible", "secrets", "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
      "print('npids', len(pids) <= 3)\n", must_print="npids True"),
    X("sysctl_write", "privilege", "import os\nprint('uid', os.getuid(), os.geteuid())\n"
      "for p in ('/proc/sys/vm/drop_caches', '/proc/sys/kernel/hostname', '/proc/sysrq-trigger'):\n"
      "    try:\n        open(p, 'w').write('1'); print('WROTE', p)\n    except OSError as e:\n        print('denied', p)\n",
      must_print="uid 65534 65534", must_not_print="WROTE"),
    X("no_caps_nnp_seccomp", "privilege", "import subprocess\n"
      "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
      "print('state', status['NoNewPrivs'].strip(), status['Seccomp'].strip(), status['CapEff'].strip(), status['CapBnd'].strip())\n"
      "for exe in ('/usr/bin/su', '/usr/bin/sudo', '/usr/bin/mount', '/usr/bin/newgrp'):\n"
      "    try:\n        r = subprocess.run([exe, '-c', 'id -u'] if exe.endswith('su') else [exe], capture_output=True, timeout=2)\n"
      "        print(exe, 'uid0' if r.stdout.strip() == b'0' else 'no')\n    except Exception as e:\n        print(exe, type(e).__name__)\n",
      must_print="state 1 2 0000000000000000 0000000000000000", must_not_print="uid0"),
    X("setuid_root", "privilege", "import os\ntry:\n    os.setuid(0); print('ROOT')\nexcept OSError as e:\n    print('denied', e.errno)\n",
      must_print="denied", must_not_print="ROOT"),
    X("denied_syscalls", "seccomp", SYSCALL + "names = {101: 'ptrace', 425: 'io_uring_setup', 250: 'keyctl', 321: 'bpf',"
      " 165: 'mount', 272: 'unshare', 308: 'setns', 29: 'shmget', 298: 'perf_event_open', 323: 'userfaultfd', 161: 'chroot'}\n"
      "args = {101: (16, 1), 272: (0x10000000,), 29: (0, 4096, 0o1000 | 0o600), 165: (0, 0, 0, 0), 161: (0,)}\n"
      "for nr, name in names.items():\n    r, e = sc(nr, *args.get(nr, (0, 0, 0)))\n"
      "    print(name, 'ALLOWED' if r >= 0 or e not in (errno.EPERM, errno.ENOSYS) else 'denied', e)\n",
      must_not_print="ALLOWED"),
    X("new_namespaces", "seccomp", "import os\nfor flag in (os.CLONE_NEWUSER, os.CLONE_NEWNS, os.CLONE_NEWNET, os.CLONE_NEWPID):\n"
      "    try:\n        os.unshare(flag); print('UNSHARED', flag)\n    except OSError as e:\n        print('denied', e.errno)\n",
      must_not_print="UNSHARED"),
    X("kill_everything", "kill", "import os, signal\nfor pid in range(1, 200):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
      "    except OSError:\n        pass\nos.kill(-1, signal.SIGKILL)\nprint('still here')\n", (EXITED,)),
    X("double_fork_daemon", "persistence", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
      "        time.sleep(300)\n    os._exit(0)\nprint('parent done')\n", must_print="parent done"),
    X("zombie_factory", "persistence", "import os\nfor _ in range(10):\n    if os.fork() == 0:\n        os._exit(0)\nprint('zombies left')\n",
      must_print="zombies left"),
]


def _check_no_secret(secret: str, *texts) -> None:
    for text in texts:
        blob = text if isinstance(text, str) else text.decode(errors="replace")
        assert secret not in blob
        assert "add(10, -4)" not in blob  # the tests never reach the candidate


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile(case: Case, sandbox, secret, secret_file, host_unaffected) -> None:
    limits = policy.Limits(wall_s=case.wall_s, cpu_s=2.0, memory_bytes=128 << 20, output_bytes=1 << 16,
                           max_processes=16, disk_bytes=0)
    if case.shape == "tests":
        run = sandbox.run_tests(case.code, SPEC, case.wall_s, False, limits)
        reward, verdict = verdict_for(run.outcomes, run.load_error, run.load_cause, all_or_nothing=False)
        assert reward == 0.0, run
        assert verdict in case.verdicts, run
        assert run.passed == 0
        _check_no_secret(secret, run.stdout, run.stderr, *(o.error for o in run.outcomes))
        return
    stdin = b""
    listener = None
    abstract = None
    if case.id == "abstract_unix_socket_to_host":
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind("\0cohort-hostile-abstract")
        abstract.listen()
    if case.id in ("egress_host_loopback", "udp_and_ipv6_to_host_loopback"):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        stdin = str(listener.getsockname()[1]).encode()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", listener.getsockname()[1]))
        udp.settimeout(0.3)
    elif case.id == "secret_file":
        stdin = str(secret_file).encode()
    elif case.id == "service_source":
        import cohort.sandbox as pkg

        stdin = f"{pkg.__file__} {secret_file} {secret_file.parent}".encode()
    result = sandbox.execute(case.code, stdin, limits)
    assert result.status in case.statuses, result
    # Graded as a stdin/stdout case whose expected output the program never prints: reward 0, and a
    # resource verdict exactly when a limit was hit.
    reward, verdict = verdict_for((io_outcome(result, "expected output " + secret, "whitespace"),), "", "", False)
    assert reward == 0.0
    limit_hit = result.status is not EXITED
    assert (verdict is Verdict.RESOURCE_LIMIT_EXCEEDED) == limit_hit, (verdict, result)
    assert verdict in ZERO_VERDICTS
    out = result.stdout.decode(errors="replace")
    if case.must_print:
        assert case.must_print in out, result
    if case.must_not_print:
        assert case.must_not_print not in out, result
    assert len(result.stdout) <= limits.output_bytes and len(result.stderr) <= limits.output_bytes
    _check_no_secret(secret, result.stdout, result.stderr)
    if listener is not None:
        with pytest.raises(socket.timeout):
            listener.accept()
        with pytest.raises(socket.timeout):
            udp.recv(16)
        listener.close()
        udp.close()
    if abstract is not None:
        abstract.settimeout(0.3)
        with pytest.raises(socket.timeout):
            abstract.accept()
        abstract.close()


def test_suite_covers_every_category() -> None:
    assert len(CASES) >= 40
    needed = {"forge", "cpu", "wall", "memory", "fork", "threads", "disk", "output", "network", "secrets", "kill",
              "persistence", "privilege", "seccomp", "resources"}
    assert needed <= {c.category for c in CASES}


def test_no_persistence_across_runs(sandbox, host_unaffected) -> None:
    """Run 1 leaves files, a daemon and a chmod-000 dir; run 2 (same pool) must see none of it."""
    plant = ("import os, time\nopen('/tmp/" + MARKER + "', 'w').write('x')\nopen('/dev/shm/" + MARKER + "', 'w').write('x')\n"
             "os.makedirs('/tmp/locked/inner')\nos.chmod('/tmp/locked', 0)\n"
             "if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\nprint('planted')\n")
    probe = ("import os\nprint(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))\n"
             "print('procs', [p for p in os.listdir('/proc') if p.isdigit()])\n")
    for _ in range(4):  # both slots of the pool, twice
        assert b"planted" in sandbox.execute(plant).stdout
        out = sandbox.execute(probe).stdout.decode()
        assert out.splitlines()[0] == "[] []", out
        pids = eval(out.splitlines()[1].split(" ", 1)[1])  # noqa: S307 - our own printed list
        assert len(pids) == 2, out  # PID 1 (the fork server) and the probe itself


def test_preimported_modules_do_not_carry_state_across_runs(sandbox) -> None:
    """The fork server imports ``typing``, ``math``, ``random``... once: a run's patch of a module, or its
    random state, must not reach a later run."""
    patch = ("import math, random, typing\nmath.sqrt = lambda x: 42\ntyping.List = None\nrandom.seed(7)\n"
             "print(random.random())\n")
    probe = "import math, random, typing\nprint(math.sqrt(4), typing.List is None, random.random())\n"
    seen = set()
    for _ in range(4):  # both slots of the pool, twice
        assert sandbox.execute(patch).stdout.strip()
        sqrt, patched, rnd = sandbox.execute(probe).stdout.decode().split()
        assert (sqrt, patched) == ("2.0", "False")
        seen.add(rnd)
    assert len(seen) == 4  # reseeded in every run, not a state shared by the forked children


def test_killing_pid1_does_not_break_the_slot(sandbox) -> None:
    for _ in range(3):
        sandbox.execute("import os, signal\nfor s in (9, 15, 2, 1, 19):\n    os.kill(1, s)\n")
    assert sandbox.execute("print(6 * 7)").stdout == b"42\n"


def test_concurrent_runs_cannot_see_each_other(sandbox) -> None:
    """A hostile run killing everything it can see leaves a concurrent honest run intact."""
    results = {}

    def honest():
        results["honest"] = sandbox.run_tests("import time\ndef add(a, b):\n    time.sleep(0.05)\n    return a + b\n",
                                              SPEC, 2.0, False, None)

    t = threading.Thread(target=honest)
    t.start()
    sandbox.execute("import os, signal\nfor i in range(50):\n    try: os.kill(-1, signal.SIGKILL)\n    except OSError: pass\n")
    t.join()
    assert results["honest"].passed == len(ASSERTS)
