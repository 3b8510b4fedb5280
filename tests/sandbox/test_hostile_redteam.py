"""Red-team suite: hostile programs *different* from test_hostile.py, through the real paths.

Paths: the ``code`` verifier (asserts, HumanEval ``check(candidate)``, stdin/stdout) on the real
in-process sandbox, ``Sandbox.execute`` (what ExecuteCode runs), SandboxService ExecuteCode over
real gRPC, and ``cohort sandbox exec`` as a subprocess. Each case asserts one property: the reward
is never above the honest fraction (and the rollout is never masked), nothing secret comes out,
and the host is unaffected (``host_unaffected``: no leftover processes, files or listeners).

Several cases reproduce escapes found while writing this suite (fixed in sandbox/): a candidate
raising StopIteration inside ``all(map(...))``, helper redefinition in HumanEval-style checks, a
set of hash-colliding ints or 16 MiB replies stalling the host, lone surrogates breaking protobuf, /dev writable
across runs, memfd_create outside every memory cap, a million files making the wipe overrun.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from cohort.sandbox import policy
from cohort.sandbox.executor import ExecStatus
from cohort.verifiers.base import CodeTests, GroupRequest, Reference, Rollout, RolloutStatus, Verdict, VerifyContext

MARKER = "cohort_hostile_marker"  # conftest.host_unaffected looks for files with this name on the host
SECRET_ENV = "COHORT_SANDBOX_TEST_SECRET"

# Expected values a candidate would have to learn to forge a pass; the honest half gets 2 of 4.
ADD = CodeTests("asserts", asserts=("assert add(123, 456) == 579", "assert add(-7, 2) == -5",
                                    "assert add(1000, 1) == 1001", "assert add(0, 0) == 0"))
HALF = "\ndef add(a, b):\n    return a + b if a > 0 else a - b + 17\n"
EXITED, TLE, MLE, OLE = (ExecStatus.EXITED, ExecStatus.TIME_LIMIT_EXCEEDED, ExecStatus.MEMORY_LIMIT_EXCEEDED,
                         ExecStatus.OUTPUT_LIMIT_EXCEEDED)

FRAME = "import os, json\ndef frame(m):\n    b = json.dumps(m).encode()\n    return len(b).to_bytes(4, 'big') + b\n"


@dataclass(frozen=True)
class Forge:
    id: str
    code: str
    honest: float = 0.5  # the most the candidate may get
    tests: CodeTests = ADD


def F(id, hack, honest=0.5, tests=ADD, base=HALF):  # noqa: N802 - table helper
    return Forge(id, hack + base if base else hack, honest, tests)


FORGES = [
    # control flow through the grader
    F("stopiteration_in_map", "def add(a, b):\n    raise StopIteration\n", 0.0,
      CodeTests("asserts", asserts=("assert all(map(lambda p: add(*p) == p[0] + p[1], [(1, 2), (5, 9)]))",
                                    "assert add(1, 1) == 2")), base=""),
    F("stopasynciteration", "def add(a, b):\n    raise StopAsyncIteration('x')\n", 0.0, base=""),
    F("keyboardinterrupt_in_call", "def add(a, b):\n    raise KeyboardInterrupt\n", 0.0, base=""),
    F("baseexception_subclass", "class Win(BaseException): pass\ndef add(a, b):\n    raise Win('PASS')\n", 0.0, base=""),
    F("generatorexit_in_call", "def add(a, b):\n    raise GeneratorExit\n", 0.0, base=""),
    F("systemexit_in_del", "import sys\nclass D:\n    def __del__(self):\n        print('PASS'); raise SystemExit(0)\n"
      "_keep = D()\n"),
    F("atexit_sys_exit", "import atexit, sys\natexit.register(lambda: (print('{\"passed\": true}'), sys.exit(0)))\n"),
    F("timer_exit_during_grader", "import threading, os\nthreading.Timer(0.05, lambda: os._exit(0)).start()\n", 0.5),
    F("sigalrm_bomb", "import signal, os\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
      "signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)\n", 0.5),
    # values that lie
    F("float_subclass_eq", "class F(float):\n    def __eq__(self, o): return True\n    __hash__ = float.__hash__\n"
      "def add(a, b):\n    return F(-1.0)\n", 0.0, base=""),
    F("list_dict_tuple_subclasses", "class L(list):\n    def __eq__(self, o): return True\n"
      "class D(dict):\n    def __eq__(self, o): return True\n"
      "def add(a, b):\n    return [L([1]), D(a=1), (L(),)][a % 3]\n", 0.0, base=""),
    F("class_attribute_lies", "class Liar:\n    __class__ = property(lambda self: int)\n    def __index__(self): return 579\n"
      "    def __eq__(self, o): return True\n    def __int__(self): return 579\ndef add(a, b):\n    return Liar()\n", 0.0, base=""),
    F("reduce_getstate_lies", "import os\nclass R:\n    def __reduce__(self): return (os._exit, (0,))\n"
      "    def __getstate__(self): return {'passed': True}\n    def __eq__(self, o): return True\n"
      "def add(a, b):\n    return R()\n", 0.0, base=""),
    F("bool_len_iter_index_tricks", "class T:\n    def __bool__(self): return True\n    def __len__(self): return 0\n"
      "    def __iter__(self): return iter(())\n    def __float__(self): return 579.0\n    def __str__(self): return '579'\n"
      "    __repr__ = __str__\ndef add(a, b):\n    return T()\n", 0.0, base=""),
    F("nan_and_inf", "def add(a, b):\n    return [float('nan'), float('inf'), -float('inf'), complex('nan+nanj')][abs(a) % 4]\n",
      0.0, base=""),
    F("recursive_container", "def add(a, b):\n    x = []\n    x.append(x)\n    return x\n", 0.0, base=""),
    F("huge_int", "import sys\nsys.set_int_max_str_digits(0)\ndef add(a, b):\n    return 10 ** 200000 + a + b\n", 0.0, base=""),
    F("generator_return", "def add(a, b):\n    yield a + b\n", 0.0, base=""),
    # the candidate's own process, not the grader's
    F("patch_builtins_via_sys_modules", "import sys\nb = sys.modules['builtins']\nb.AssertionError = type('X', (Exception,), {})\n"
      "b.isinstance = lambda *a: True\nsys.modules['json'] = None\n", 0.5),
    F("gc_and_frames_hunt_tests", "import gc, sys, inspect\nfound = [o for o in gc.get_objects() if isinstance(o, str) and '579' in o]\n"
      "print('FOUND', found[:3])\ndef add(a, b):\n    for f in inspect.stack():\n        f.frame.f_globals.pop('assert', None)\n"
      "    return a + b if a > 0 else a - b + 17\n", 0.5, base=""),
    F("patch_serve_loop_encoder", "import gc\nfor o in gc.get_objects():\n    if isinstance(o, dict) and 'encode' in o and '_send_frame' in o:\n"
      "        o['encode'] = lambda v: {'i': '579'}\n        o['_describe'] = lambda e: ['AssertionError', 'ok']\n", 0.5),
    F("settrace_setprofile_audithook", "import sys\nsys.settrace(lambda *a: None)\nsys.setprofile(lambda *a: None)\n"
      "sys.addaudithook(lambda ev, args: print('AUDIT', ev) if ev == 'os.exec' else None)\n", 0.5),
    F("ctypes_small_int_corruption", "import ctypes\nctypes.c_ssize_t.from_address(id(17) + 24).value = 5\n", 0.5),
    F("faulthandler_into_fd3", "import faulthandler, ctypes\nfaulthandler.enable(file=3)\ndef add(a, b):\n    ctypes.string_at(0)\n",
      0.0, base=""),
    F("thread_spams_forged_frames", FRAME + "import threading\ndef spam():\n    while True:\n"
      "        os.write(3, frame({'ok': {'i': '0'}}) + frame({'end': 0, 'passed': True}) + frame({'done': True}))\n"
      "threading.Thread(target=spam, daemon=True).start()\n", 0.5),
    F("forked_child_lingers_writing_fd3", FRAME + "import time\nif os.fork() == 0:\n    os.setsid()\n    while True:\n"
      "        os.write(3, frame({'ok': {'i': '579'}}))\n        time.sleep(0.001)\n", 1.0),
    F("fake_ready_names", FRAME + "os.write(3, frame({'ready': ['add', 'AssertionError', 'check', '__import__', 'all']}))\n"
      "def add(a, b):\n    raise RuntimeError\n", 0.0, base=""),
    F("stdout_flood_in_call", "import sys\ndef add(a, b):\n    sys.stdout.write('PASS ' * 2_000_000)\n    return 579\n", 0.0, base=""),
    F("sigstop_self_in_call", "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGSTOP)\n", 0.0, base=""),
    F("ignore_sigterm_sleep", "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\n"
      "def add(a, b):\n    time.sleep(100)\n", 0.0, base=""),
    F("read_tests_and_harness", "import os\nhits = []\nfor p in ('/proc/1/cmdline', '/proc/self/cmdline', '/proc/1/environ'):\n"
      "    try:\n        data = open(p, 'rb').read()\n        hits.append((p, b'579' in data))\n    except OSError as e:\n"
      "        hits.append((p, e.errno))\nprint('HITS', hits)\n", 0.5),
]


@pytest.fixture(scope="module")
def verifier(sandbox):
    from cohort.verifiers.code import CodeVerifier, LocalBackend

    v = CodeVerifier(backend=LocalBackend(sandbox=sandbox), max_parallel=2)
    yield v
    v._executor.shutdown()


def grade(verifier, completion: str, tests: CodeTests, **options):
    group = GroupRequest("code", (Rollout(0, completion),), Reference(code_tests=tests),
                         options={"per_test_timeout_s": "2", **options})
    (result,) = verifier.verify_group(group, VerifyContext())
    return result


def assert_scored_and_clean(result, secret: str) -> None:
    from cohort.verifiers.base import GroupResult
    from cohort.verifiers.convert import group_result_to_pb

    assert result.status is RolloutStatus.OK, result  # never masked: a hostile program is not an infra failure
    group_result_to_pb(GroupResult("g", "code", "", (result,))).SerializeToString()  # the result crosses gRPC
    assert secret not in result.detail


@pytest.mark.parametrize("case", FORGES, ids=[c.id for c in FORGES])
def test_forged_verdict_never_raises_reward(case: Forge, verifier, secret, host_unaffected) -> None:
    result = grade(verifier, f"```python\n{case.code}\n```", case.tests)
    assert_scored_and_clean(result, secret)
    assert result.reward <= case.honest, result
    assert result.verdict is not Verdict.CORRECT or case.honest == 1.0


def test_forked_child_cannot_answer_for_a_dead_parent(verifier, secret, host_unaffected) -> None:
    """The candidate dies at every call while a child it forked writes the right answers: zero."""
    code = FRAME + ("import time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.05)\n    while True:\n"
                    "        os.write(3, frame({'ok': {'i': '579'}}))\n        time.sleep(0.001)\n"
                    "def add(a, b):\n    time.sleep(0.2)\n    os._exit(0)\n")
    result = grade(verifier, code, CodeTests("asserts", asserts=("assert add(123, 456) == 579",)))
    assert_scored_and_clean(result, secret)
    # the child's frames answer the pending call; that is the candidate's own answer, which is
    # right here: what matters is that it can never answer for *more* than the calls made
    assert result.reward in (0.0, 1.0)


HELPER_PROMPT = '''
def encode(s: str) -> str:
    """shift every letter by 3"""
    return "".join(chr((ord(c) - 97 + 3) % 26 + 97) for c in s)


def decode(s: str) -> str:
    """inverse of encode"""
'''
HELPER_TEST = '''
def check(candidate):
    for word in ("hello", "world", "xyz"):
        assert candidate(encode(word)) == word
'''


def test_humaneval_helper_redefinition_cannot_pass(verifier, secret, host_unaffected) -> None:
    """A candidate that redefines the prompt's helper as the identity (so identity decode passes)."""
    hack = "def encode(s):\n    return s\n\ndef decode(s):\n    return s\n"
    tests = CodeTests("function", test_code=HELPER_TEST, entry_point="decode", setup_code=HELPER_PROMPT)
    result = grade(verifier, hack, tests)
    assert_scored_and_clean(result, secret)
    assert result.reward == 0.0
    honest = HELPER_PROMPT + "    return ''.join(chr((ord(c) - 97 - 3) % 26 + 97) for c in s)\n"
    assert grade(verifier, honest, tests).reward == 1.0


REPLY_BOMBS = {
    # a set of ints that all hash alike: building it is quadratic (minutes for the host before the fix)
    "hash_collision_set": "{'ok': {'s': [{'i': str(((1 << 61) - 1) * i)} for i in range(1, 60000)]}}",
    # ~15 MiB of JSON for every call, built once: parsing it held the host's GIL for seconds per call
    "max_size_frames": "{'ok': [{'i': '7'}] * 1_200_000}",
}
READY_BOMB = FRAME + "os.write(3, frame({'ready': ['add'] * 2_500_000}))\nimport time\ntime.sleep(100)\n"


@pytest.mark.parametrize("bomb", [*sorted(REPLY_BOMBS), "ready_frame"])
def test_reply_bombs_do_not_stall_the_host(bomb, verifier, secret, host_unaffected) -> None:
    """Return values the host relays unparsed: only the grader's own time budget pays for them."""
    code = READY_BOMB if bomb == "ready_frame" else FRAME + f"BLOB = frame({REPLY_BOMBS[bomb]})\ndef add(a, b):\n    os.write(3, BLOB)\n"
    tests = CodeTests("asserts", asserts=tuple(f"assert add({i}, 1) == {i + 1}" for i in range(4)))
    start = time.monotonic()
    result = grade(verifier, code, tests, per_test_timeout_s="1")
    assert time.monotonic() - start < 15.0  # whole-run budget 1 s x (4 + 1) + 2 s, plus slot start-up
    assert_scored_and_clean(result, secret)
    assert result.reward == 0.0


def test_surrogate_error_text_still_crosses_grpc(verifier, sandbox, secret, host_unaffected) -> None:
    from cohort.sandbox.grader import TestSpec
    from cohort.sandbox.convert import run_to_pb

    code = "raise ValueError('\\ud800 lone')\n"  # a lone surrogate (a pair would be joined by JSON)
    result = grade(verifier, code, ADD)
    assert_scored_and_clean(result, secret)
    assert result.verdict is Verdict.RUNTIME_ERROR
    run = sandbox.run_tests("def add(a, b):\n    raise ValueError('\\udcff')\n", TestSpec("asserts", asserts=ADD.asserts), 2.0)
    run_to_pb(run).SerializeToString()
    assert run.passed == 0


def test_setup_calling_the_candidate_is_the_candidates_failure(verifier, secret, host_unaffected) -> None:
    """A reference whose setup calls the candidate: a crash there is not an INVALID_REFERENCE mask."""
    tests = CodeTests("asserts", asserts=("assert TABLE == [2, 3]",), setup_code="TABLE = [add(1, 1), add(1, 2)]\n")
    result = grade(verifier, "def add(a, b):\n    raise ValueError('no')\n", tests)
    assert_scored_and_clean(result, secret)
    assert (result.reward, result.verdict) == (0.0, Verdict.RUNTIME_ERROR)
    assert grade(verifier, "def add(a, b):\n    return a + b\n", tests).reward == 1.0


# --- programs (Sandbox.execute = ExecuteCode in-process; graded as a stdin/stdout case) --------------------


@dataclass(frozen=True)
class Prog:
    id: str
    code: str
    statuses: frozenset
    must_print: str = ""
    must_not_print: str = ""
    wall_s: float = 3.0


def P(id, code, statuses=(EXITED,), must_print="", must_not_print="", wall_s=3.0):  # noqa: N802
    return Prog(id, code, frozenset(statuses), must_print, must_not_print, wall_s)


TRY = "def attempt(name, fn):\n    try:\n        fn(); print('ESCAPED', name)\n    except Exception as e:\n        print('blocked', name)\n"

PROGRAMS = [
    P("memfd_outside_memory_caps_and_host_sync", TRY + "import os\nattempt('memfd', lambda: os.memfd_create('x'))\n"
      "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfor nr in (162, 306):\n"
      "    if libc.syscall(nr, 0) == 0: print('ESCAPED sync', nr)\n",
      must_print="blocked memfd", must_not_print="ESCAPED"),
    P("dev_is_read_only", TRY + "attempt('dev', lambda: open('/dev/" + MARKER + "', 'w').write('x' * 4096))\n"
      "attempt('devdir', lambda: __import__('os').mkdir('/dev/" + MARKER + "d'))\n",
      must_print="blocked dev", must_not_print="ESCAPED"),
    P("write_fds_3_to_255", "import os\nok = []\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'PASS\\n'); ok.append(fd)\n"
      "    except OSError:\n        pass\nprint('wrote', ok)\n", must_print="wrote []"),
    P("proc_self_fd_and_pid1", TRY + "import os\nprint('fds', sorted(os.listdir('/proc/self/fd')))\n"
      "attempt('pid1fd', lambda: os.listdir('/proc/1/fd'))\nattempt('pid1mem', lambda: open('/proc/1/mem', 'rb').read(1))\n"
      "attempt('pid1root', lambda: os.listdir('/proc/1/root/'))\nattempt('pid1cwd', lambda: os.listdir('/proc/1/cwd/'))\n",
      must_print="fds ['0', '1', '2', '3']", must_not_print="ESCAPED"),
    P("child_lingers_after_parent", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.3)\n"
      "    for _ in range(100): os.write(1, b'LATE\\n'); time.sleep(0.01)\n    os._exit(0)\nprint('parent done')\n",
      must_print="parent done", must_not_print="LATE"),
    P("thread_keeps_running_after_return", "import threading, time, sys\n"
      "def late():\n    time.sleep(0.2)\n    print('LATE', flush=True)\nthreading.Thread(target=late).start()\nprint('main done')\n",
      must_print="main done", must_not_print="LATE"),
    P("setpgid_setsid_escape", "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setpgid(0, 0)\n"
      "        if os.fork() == 0:\n            os.setsid()\n            time.sleep(300)\n        time.sleep(300)\nprint('spawned')\n",
      must_print="spawned"),
    P("subreaper_pdeathsig", "import ctypes, os, time, signal\nlibc = ctypes.CDLL(None)\nlibc.prctl(36, 1, 0, 0, 0)\n"
      "if os.fork() == 0:\n    libc.prctl(1, 0, 0, 0, 0)\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(300)\nprint('subreaper')\n",
      must_print="subreaper"),
    P("ignore_sigterm_sleep_past_deadline", "import signal, time\nfor s in range(1, 32):\n    try: signal.signal(s, signal.SIG_IGN)\n"
      "    except (OSError, ValueError): pass\ntime.sleep(100)\n", (TLE,), wall_s=1.0),
    P("sigstop_self", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')\n", (TLE,),
      must_not_print="resumed", wall_s=1.0),
    P("stopped_children", "import os, signal, time\nfor _ in range(4):\n    if os.fork() == 0:\n        os.kill(os.getpid(), signal.SIGSTOP)\n"
      "        os._exit(0)\ntime.sleep(0.1)\nprint('children stopped')\n", must_print="children stopped"),
    P("retune_pid1_for_later_runs", "import resource, os\nfor who in (1, 0):\n"
      "    for fn in (lambda: resource.prlimit(1, resource.RLIMIT_AS, (1 << 20, 1 << 20)),"
      " lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (4, 4)), lambda: os.sched_setaffinity(1, {0}),"
      " lambda: os.setpriority(os.PRIO_USER, 0, 19), lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),"
      " lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))):\n"
      "        try: fn(); print('ESCAPED')\n        except OSError: pass\nprint('tried')\n",
      must_print="tried", must_not_print="ESCAPED"),
    P("nice_ionice_rt", TRY + "import os\nattempt('nice', lambda: os.nice(-5))\n"
      "attempt('rt', lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50)))\n"
      "attempt('prio', lambda: os.setpriority(os.PRIO_PROCESS, 0, -10))\n"
      "attempt('rlimit', lambda: __import__('resource').setrlimit(__import__('resource').RLIMIT_NPROC, (10**6, 10**6)))\n",
      must_print="blocked nice", must_not_print="ESCAPED"),
    P("thread_bomb_native", "import _thread, time\nn = 0\ntry:\n    while True:\n        _thread.start_new_thread(time.sleep, (100,)); n += 1\n"
      "except RuntimeError:\n    print('capped', n < 64)\n", must_print="capped True"),
    P("mmap_bomb", "import mmap\nm = []\ntry:\n    while True:\n        x = mmap.mmap(-1, 64 << 20)\n        x.write(b'x' * (64 << 20)); m.append(x)\n"
      "except (OSError, MemoryError, ValueError) as e:\n    print('capped', len(m) < 4)\n", (EXITED, MLE), must_print="capped True"),
    P("tmp_and_shm_fill_many_files", "import os\nn = 0\ntry:\n    while True:\n        with open(f'/dev/shm/{n}', 'wb') as f: f.write(b'x' * 65536)\n"
      "        n += 1\nexcept OSError as e:\n    print('shm capped', n * 65536 <= (16 << 20))\n", must_print="shm capped True"),
    P("million_files_still_answered", "import os, time\nt = time.monotonic()\nos.mkdir('/tmp/d')\nn = 0\n"
      "while time.monotonic() - t < 2.2:\n    for _ in range(500):\n        os.mknod(f'/tmp/d/{n}'); n += 1\nprint('made', n > 0)\n",
      must_print="made True", wall_s=3.0),
    P("raw_bytes_nul_ansi_output", "import os\nos.write(1, b'\\x00\\x1b[2J\\x1b]0;PASS\\x07\\xff\\xfe\\xed' + bytes(range(256)))\n"),
    P("surrogate_text_output", "import sys\nsys.stdout.buffer.write('\\ud800'.encode('utf-8', 'surrogatepass'))\nprint('\\udcff', file=sys.stderr)\n",
      (EXITED,)),
    P("dns_and_unix_sockets", TRY + "import socket\nattempt('dns', lambda: socket.getaddrinfo('example.com', 80))\n"
      "attempt('unixpath', lambda: socket.socket(socket.AF_UNIX).connect('/run/docker.sock'))\n"
      "attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))\n"
      "attempt('netlink_route', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0))\n"
      "attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM))\n",
      must_print="blocked dns", must_not_print="ESCAPED"),
    P("host_loopback_every_port", "import socket, sys\nports = [int(p) for p in sys.stdin.read().split()]\nopen_ = []\n"
      "for p in ports:\n    s = socket.socket(); s.settimeout(0.2)\n    if s.connect_ex(('127.0.0.1', p)) == 0: open_.append(p)\n"
      "print('open', open_)\n", must_print="open []"),
    P("privilege_binaries", "import subprocess\nfor cmd in (['unshare', '-Ur', 'id', '-u'], ['bwrap', '--bind', '/', '/', 'id', '-u'],"
      " ['chroot', '/', 'id'], ['mount', '-t', 'tmpfs', 'x', '/tmp'], ['setpriv', '--reuid=0', 'id', '-u']):\n"
      "    try:\n        r = subprocess.run(cmd, capture_output=True, timeout=2)\n        print(cmd[0], r.returncode, r.stdout.strip() == b'0')\n"
      "    except Exception as e:\n        print(cmd[0], type(e).__name__)\n", must_not_print="True"),
    P("ptrace_sibling_and_syscalls", "import ctypes, os, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "pid = os.fork()\nif pid == 0:\n    import time; time.sleep(5); os._exit(0)\n"
      "out = []\nfor nr, args in ((101, (16, pid, 0, 0)), (135, (0x0040000,)), (425, (8, 0)), (250, (0, 0)), (298, (0, 0, -1, -1, 0)),"
      " (321, (0, 0, 0)), (161, (0,)), (155, (0, 0)), (319, (0, 0))):\n"
      "    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])\n    out.append((nr, r >= 0))\n"
      "print('allowed', [nr for nr, ok in out if ok])\n", must_print="allowed []"),
    P("compat_syscall_abi", "import ctypes, mmap\ncode = bytes([0xb8, 26, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80, 0xc3])\n"
      "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\nm.write(code)\n"
      "f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\nprint('ret', f())\n",
      must_not_print="ret"),
    P("host_secrets_everywhere", "import os, glob\nfound = []\n"
      "for p in ['/proc/self/environ', '/proc/1/environ', '/etc/shadow', '/etc/passwd', '/root/.ssh/id_rsa', '/root/.bashrc',"
      " os.path.expanduser('~/.ssh/id_rsa'), '/proc/1/cmdline'] + glob.glob('/home/*/.ssh/*') + glob.glob('/work/*'):\n"
      "    try:\n        found.append((p, open(p, 'rb').read(4096)))\n    except OSError:\n        pass\n"
      "print(found)\nprint(dict(os.environ))\n"),
    P("service_venv_and_source", "import os, sys\nprint('paths', [p for p in sys.stdin.read().split() if os.path.exists(p)])\n"
      "print('grpc', [d for d in os.listdir('/usr/lib/python3/dist-packages')] if os.path.isdir('/usr/lib/python3/dist-packages') else [])\n",
      must_print="paths []"),
    P("kill_host_processes", "import subprocess, os, signal\nfor cmd in (['kill', '-9', '-1'], ['pkill', '-9', 'python'], ['pkill', '-9', 'sleep'],"
      " ['killall', '-9', 'bwrap']):\n    try: subprocess.run(cmd, capture_output=True, timeout=2)\n    except Exception: pass\n"
      "for pid in range(2, 4096):\n    try: os.kill(pid, signal.SIGKILL)\n    except OSError: pass\nprint('done')\n", (EXITED,)),
    P("sysctl_writes", TRY + "for p in ('/proc/sys/kernel/core_pattern', '/proc/sys/vm/overcommit_memory', '/proc/sys/kernel/panic',"
      " '/proc/sys/net/ipv4/ip_forward', '/proc/sys/fs/file-max'):\n    attempt(p, lambda: open(p, 'w').write('1'))\n",
      must_print="blocked /proc/sys/kernel/core_pattern", must_not_print="ESCAPED"),
    P("persistence_targets_read_only", TRY + "import sys, os\n"
      "attempt('pth', lambda: open('/usr/lib/python3/dist-packages/evil.pth', 'w').write('import os'))\n"
      "attempt('pycache', lambda: open(os.path.dirname(os.__file__) + '/__pycache__/evil.pyc', 'wb').write(b'x'))\n"
      "attempt('stdlib', lambda: open(os.__file__, 'a').write('#'))\nattempt('usrbin', lambda: open('/usr/bin/evil', 'w'))\n",
      must_print="blocked pth", must_not_print="ESCAPED"),
]


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_program_contained(prog: Prog, sandbox, secret, secret_file, host_unaffected) -> None:
    from cohort.verifiers.code.verifier import io_outcome, verdict_for

    stdin = b""
    listeners = []
    if prog.id == "host_loopback_every_port":
        for _ in range(3):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            listeners.append(s)
        stdin = " ".join(str(s.getsockname()[1]) for s in listeners).encode()
    elif prog.id == "service_venv_and_source":
        import cohort.sandbox as pkg

        stdin = f"{pkg.__file__} {sys.prefix} {sys.executable} {secret_file} {os.getcwd()}".encode()
    sentinel = subprocess.Popen(["sleep", "30"]) if prog.id == "kill_host_processes" else None
    limits = policy.Limits(wall_s=prog.wall_s, cpu_s=3.0, memory_bytes=128 << 20, output_bytes=1 << 16,
                           max_processes=16, disk_bytes=0)
    try:
        result = sandbox.execute(prog.code, stdin, limits)
        if sentinel is not None:
            assert sentinel.poll() is None  # a host process the program tried to kill
    finally:
        if sentinel is not None:
            sentinel.kill()
            sentinel.wait()
        for s in listeners:
            s.close()
    assert result.status in prog.statuses, result
    reward, verdict = verdict_for((io_outcome(result, "expected " + secret, "exact"),), "", "", False)
    assert reward == 0.0 and verdict in (Verdict.INCORRECT, Verdict.RUNTIME_ERROR, Verdict.RESOURCE_LIMIT_EXCEEDED)
    out = result.stdout.decode(errors="replace")
    if prog.must_print:
        assert prog.must_print in out, result
    if prog.must_not_print:
        assert prog.must_not_print not in out, result
    for blob in (result.stdout, result.stderr):
        assert secret.encode() not in blob
    for _ in range(2):  # both slots (FIFO pool) still serve honest runs with memory and fds to spare
        again = sandbox.execute("x = bytearray(32 << 20)\nfds = [open('/dev/null') for _ in range(64)]\nprint(6 * 7)")
        assert again.stdout == b"42\n", again


def test_persistence_between_runs_in_a_warm_slot(sandbox, host_unaffected) -> None:
    """Run 1 plants in HOME, /tmp, /dev/shm, /dev, sys.path, an abstract socket, a FIFO; run 2 finds nothing."""
    plant = ("import os, socket, sys, time\nos.makedirs(os.path.expanduser('~/.config'), exist_ok=True)\n"
             "open(os.path.expanduser('~/.config/" + MARKER + "'), 'w').write('x')\n"
             "open('/tmp/" + MARKER + ".py', 'w').write('print(\"IMPORTED\")')\nos.mkfifo('/tmp/" + MARKER + ".fifo')\n"
             "try: open('/dev/" + MARKER + "', 'w')\nexcept OSError: pass\n"
             "s = socket.socket(socket.AF_UNIX); s.bind('\\0" + MARKER + "'); s.listen()\n"
             "if os.fork() == 0:\n    os.setsid(); time.sleep(300)\nprint('planted')\n")
    probe = ("import os, socket, sys\nsys.path.insert(0, '/tmp')\ntry:\n    import " + MARKER + "\nexcept ImportError:\n    print('no module')\n"
             "print('home', os.listdir(os.path.expanduser('~')), 'dev', [n for n in os.listdir('/dev') if 'cohort' in n])\n"
             "s = socket.socket(socket.AF_UNIX)\nprint('abstract', s.connect_ex('\\0" + MARKER + "'))\n")
    for _ in range(4):  # both slots twice
        assert b"planted" in sandbox.execute(plant).stdout
        out = sandbox.execute(probe).stdout.decode()
        assert "no module" in out and "home [] dev []" in out and "abstract 111" in out, out


# --- SandboxService over real gRPC, and the CLI --------------------------------------------------------------


@pytest.fixture(scope="module")
def stub():
    import grpc

    from cohort.rpc.launch import ServiceProcess
    from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc

    with ServiceProcess(["sandbox"], env={"COHORT_SANDBOX_POOL_SIZE": "1"}) as proc:
        with grpc.insecure_channel(proc.endpoint) as channel:
            yield pb_grpc.SandboxServiceStub(channel), proc


GRPC_ATTACKS = {
    "kill_service_then_serve": "import os, signal\nfor pid in range(1, 4096):\n    try: os.kill(pid, signal.SIGKILL)\n"
                               "    except OSError: pass\nos.kill(-1, signal.SIGKILL)\n",
    "connect_to_service_port": "import socket, sys\nport = int(sys.stdin.read())\ns = socket.socket(); s.settimeout(0.5)\n"
                               "print('connect', s.connect_ex(('127.0.0.1', port)))\n",
    "read_service_environ": "import os\nfor p in os.listdir('/proc'):\n    try: print(open(f'/proc/{p}/environ', 'rb').read())\n"
                            "    except OSError: pass\nprint(dict(os.environ))\n",
    "huge_output_both_streams": "import os\nwhile True:\n    os.write(1, b'A' * 65536); os.write(2, b'\\xff' * 65536)\n",
}


@pytest.mark.parametrize("name", sorted(GRPC_ATTACKS))
def test_execute_code_over_grpc_contained(name, stub, secret, host_unaffected) -> None:
    from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb

    client, proc = stub
    stdin = str(proc.port).encode() if name == "connect_to_service_port" else b""
    r = client.ExecuteCode(pb.ExecuteCodeRequest(language="python", code=GRPC_ATTACKS[name], stdin=stdin,
                                                 limits=pb.Limits(output_bytes=1 << 16)), timeout=60)
    assert secret.encode() not in r.stdout + r.stderr
    assert len(r.stdout) <= 1 << 16 and len(r.stderr) <= 1 << 16
    if name == "connect_to_service_port":
        assert b"connect 111" in r.stdout
    if name == "huge_output_both_streams":
        assert r.status == pb.EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED
    again = client.ExecuteCode(pb.ExecuteCodeRequest(code="print(6 * 7)"), timeout=60)
    assert again.stdout == b"42\n" and proc.proc.poll() is None  # the service keeps serving


GRPC_FORGES = [f for f in FORGES if f.id in ("stopiteration_in_map", "fake_ready_names", "thread_spams_forged_frames")]


@pytest.mark.parametrize("case", GRPC_FORGES, ids=[c.id for c in GRPC_FORGES])
def test_code_verifier_over_grpc_run_tests(case: Forge, stub, secret, host_unaffected) -> None:
    """The same forges through the code verifier's gRPC backend (SandboxService.RunTests)."""
    from cohort.verifiers.code import CodeVerifier, GrpcBackend

    _, proc = stub
    v = CodeVerifier(backend=GrpcBackend(proc.endpoint), max_parallel=1)
    try:
        result = grade(v, case.code, case.tests)
        lone = grade(v, "def add(a, b):\n    raise ValueError('\\ud800')\n", ADD)  # must still serialize
    finally:
        v._executor.shutdown()
    assert_scored_and_clean(result, secret)
    assert result.reward <= case.honest
    assert lone.status is RolloutStatus.OK and lone.verdict is Verdict.RUNTIME_ERROR


CLI_ATTACKS = {
    "forged_json_verdict": "import sys\nprint(json := '{\"verdict\": \"correct\", \"reward\": 1.0}')\n"
                           "sys.stderr.write(json)\n" + HALF,
    "ansi_nul_surrogate_output": "import os, sys\nos.write(1, b'\\x1b[2J\\x00\\xff\\n{\"reward\": 1}\\n')\n"
                                 "print('\\ud800', file=sys.stderr)\n" + HALF,
    "exit_zero_before_asserts": "import os, sys\nprint('{\"verdict\": \"correct\"}')\nsys.stdout.flush()\nos._exit(0)\n",
}


@pytest.mark.parametrize("name", sorted(CLI_ATTACKS))
def test_cli_exec_reports_honest_reward(name, tmp_path, secret, host_unaffected) -> None:
    code = tmp_path / "cand.py"
    code.write_text(CLI_ATTACKS[name])
    r = subprocess.run([sys.executable, "-m", "cohort.cli", "sandbox", "exec", "--code-file", str(code),
                        "--tests-json", json.dumps(list(ADD.asserts)), "--timeout", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object, whatever the candidate printed
    out = json.loads(lines[0])
    assert out["reward"] == (0.0 if name == "exit_zero_before_asserts" else 0.5)
    assert out["verdict"] != "correct"
    assert secret not in r.stdout


def test_suite_size() -> None:
    assert len(FORGES) + len(PROGRAMS) + len(GRPC_ATTACKS) + len(CLI_ATTACKS) + 6 >= 60


@pytest.mark.timeout(60)
def test_fence_bomb_completion_does_not_hang_the_verifier(verifier, secret, host_unaffected) -> None:
    """Thousands of unclosed ``` lines (a regex extractor took 24 s for 40 kB, ~40 min for this)."""
    completion = "```x\n" * 80_000 + "```python\n" + HALF
    result = grade(verifier, completion, ADD)
    assert_scored_and_clean(result, secret)
    assert result.reward == 0.5  # the truncated final block is the code, graded honestly
