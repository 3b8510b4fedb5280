"""The ``code`` verifier against the real in-process sandbox: kinds, options, verdicts, failures."""

from __future__ import annotations

import socket
import threading

import pytest

from cohort.verifiers.base import (CodeTests, GroupRequest, InvalidRequest, IoCase, Reference, Rollout, RolloutStatus,
                            Verdict, VerifyContext)
from cohort.verifiers.code import CodeVerifier, GrpcBackend, LocalBackend, extract_code

ADD = CodeTests("asserts", asserts=("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(-1, 1) == 0",
                                    "assert add(5, 5) == 10"))


@pytest.fixture(scope="module")
def verifier():
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    sb = Sandbox(SandboxOptions(pool_size=2))
    yield CodeVerifier(backend=LocalBackend(sandbox=sb), max_parallel=4)
    sb.close()


def verify(v, completions, tests=ADD, **options):
    group = GroupRequest("code", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(code_tests=tests),
                         options={k: str(x) for k, x in options.items()})
    return v.verify_group(group, VerifyContext())


def test_extract_last_python_block_or_whole_text() -> None:
    text = "first\n```python\ndef add(a, b): return 0\n```\nthen\n```python\ndef add(a, b): return a + b\n```\nbye"
    assert extract_code(text) == "def add(a, b): return a + b\n"
    assert extract_code("def f(): pass") == "def f(): pass"
    assert extract_code("```js\nconsole.log(1)\n```\nx = 1") == "```js\nconsole.log(1)\n```\nx = 1"
    assert extract_code("ok\n```python\nprint(1)\nprint(2") == "print(1)\nprint(2"  # truncated completion


def test_asserts_fraction_and_verdicts(verifier) -> None:
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    half = "def add(a, b):\n    return a + b if a != b else 0"
    crash = "def add(a, b):\n    raise ValueError('no')"
    broken = "def add(a, b) return a"
    results = verify(verifier, [right, half, crash, broken, "   "])
    assert [r.status for r in results] == [RolloutStatus.OK] * 5
    assert [r.reward for r in results] == [1.0, 0.5, 0.0, 0.0, 0.0]
    assert [r.verdict for r in results] == [Verdict.CORRECT, Verdict.PARTIAL, Verdict.RUNTIME_ERROR,
                                            Verdict.RUNTIME_ERROR, Verdict.NO_ANSWER]
    assert results[1].components == {"tests_passed": 0.5}
    assert "SyntaxError" in results[3].detail


def test_all_or_nothing_and_stop_at_first_failure(verifier) -> None:
    half = "def add(a, b):\n    return a + b if a != 2 else 0"
    (r,) = verify(verifier, [half], reward="all_or_nothing")
    assert (r.reward, r.verdict) == (0.0, Verdict.INCORRECT)
    (r,) = verify(verifier, [half], stop_at_first_failure="true")
    assert r.reward == 0.25 and r.verdict is Verdict.PARTIAL  # test 2 fails, 3 and 4 never run
    assert "1/4 tests passed" in r.detail


def test_per_test_timeout_is_resource_limit(verifier) -> None:
    slow = "import time\ndef add(a, b):\n    if a == 2:\n        time.sleep(60)\n    return a + b"
    (r,) = verify(verifier, [slow], per_test_timeout_s=1.0)
    assert r.status is RolloutStatus.OK
    assert r.reward == 0.75 and r.verdict is Verdict.PARTIAL  # the candidate restarts after the timeout
    (r,) = verify(verifier, ["import time\ndef add(a, b):\n    time.sleep(60)"], per_test_timeout_s=0.5)
    assert (r.reward, r.verdict) == (0.0, Verdict.RESOURCE_LIMIT_EXCEEDED)


def test_memory_limit_is_resource_limit(verifier) -> None:
    hog = "def add(a, b):\n    x = bytearray(4 << 30)\n    return a + b"
    (r,) = verify(verifier, [hog], memory_mb=128, per_test_timeout_s=10)
    assert (r.reward, r.verdict) == (0.0, Verdict.RESOURCE_LIMIT_EXCEEDED)


def test_function_kind_humaneval_style(verifier) -> None:
    tests = CodeTests("function", entry_point="rev",
                      test_code="def check(candidate):\n    assert candidate([1, 2]) == [2, 1]\n    assert candidate([]) == []\n")
    good, bad = verify(verifier, ["def rev(x):\n    return x[::-1]", "def rev(x):\n    return x"], tests)
    assert (good.reward, good.verdict) == (1.0, Verdict.CORRECT)
    assert (bad.reward, bad.verdict) == (0.0, Verdict.INCORRECT)


def test_function_kind_exception_types_cross(verifier) -> None:
    tests = CodeTests("function", entry_point="f", test_code=(
        "def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError:\n        pass\n"
        "    else:\n        raise AssertionError('expected ValueError')\n    assert candidate(2) == 4\n"))
    (r,) = verify(verifier, ["def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x * x"], tests)
    assert r.reward == 1.0


def test_io_exact_and_whitespace(verifier) -> None:
    cases = (IoCase("1 2\n", "3\n"), IoCase("10 20\n", "30\n"))
    prog = "a, b = map(int, input().split())\nprint(a + b)"
    sloppy = "a, b = map(int, input().split())\nprint(' ', a + b, ' ')"
    exact = CodeTests("io", io_cases=cases, comparison="exact")
    ws = CodeTests("io", io_cases=cases, comparison="whitespace")
    assert [r.reward for r in verify(verifier, [prog, sloppy], exact)] == [1.0, 0.0]
    assert [r.reward for r in verify(verifier, [prog, sloppy], ws)] == [1.0, 1.0]
    (crash,) = verify(verifier, ["import sys\nprint(3)\nsys.exit(1)"], ws)
    assert (crash.reward, crash.verdict) == (0.0, Verdict.RUNTIME_ERROR)  # right output, non-zero exit
    (spin,) = verify(verifier, ["while True: pass"], ws, per_test_timeout_s=0.5)
    assert spin.verdict is Verdict.RESOURCE_LIMIT_EXCEEDED


def test_bad_references(verifier) -> None:
    (r,) = verify(verifier, ["x = 1"], CodeTests("function", test_code="def check(c): pass", entry_point=""))
    assert r.status is RolloutStatus.INVALID_REFERENCE
    (r,) = verify(verifier, ["def add(a, b): return a + b"], CodeTests("asserts", asserts=("assert add(1, 2) == 3",),
                                                                       setup_code="import no_such_module_xyz"))
    assert r.status is RolloutStatus.INVALID_REFERENCE and "no_such_module_xyz" in r.detail
    with pytest.raises(InvalidRequest):
        verifier.verify_group(GroupRequest("code", (Rollout(0, "x"),), Reference(answer="3")), VerifyContext())
    with pytest.raises(InvalidRequest):
        verify(verifier, ["x"], reward="most")


def test_sandbox_unreachable_is_dependency_unavailable() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    v = CodeVerifier(backend=GrpcBackend(f"127.0.0.1:{port}"))
    results = verify(v, ["def add(a, b): return a + b", "print(1)"])
    assert [r.status for r in results] == [RolloutStatus.DEPENDENCY_UNAVAILABLE] * 2
    assert all(r.reward == 0.0 and not r.usable for r in results)
    (r,) = verify(v, ["print(3)"], CodeTests("io", io_cases=(IoCase("", "3"),)))
    assert r.status is RolloutStatus.DEPENDENCY_UNAVAILABLE


def test_many_threads_at_once(verifier) -> None:
    """The gRPC server calls verify_group from many threads: results stay matched to rollouts."""
    out = {}

    def worker(k: int) -> None:
        completions = [f"def add(a, b):\n    return a + b + {i % 2}" for i in range(4)]
        out[k] = [r.reward for r in verify(verifier, completions)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {k: [1.0, 0.0, 1.0, 0.0] for k in range(6)}


def test_programs_in_flight_follow_the_sandbox_not_this_hosts_cpus(monkeypatch) -> None:
    """One thread per program the sandbox can run at once: a local pool's slots, 16 per remote sandbox
    service (a fleet is used whole); it was 2 x this host's CPUs, whatever the sandbox."""
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    def in_flight(v: CodeVerifier) -> int:
        return v._executor._max_workers

    with Sandbox(SandboxOptions(pool_size=3)) as sb:
        assert in_flight(CodeVerifier(backend=LocalBackend(sandbox=sb))) == 3
    assert in_flight(CodeVerifier(backend=GrpcBackend("127.0.0.1:1,127.0.0.1:2", tls=None))) == 32
    assert in_flight(CodeVerifier(pool_size=7)) == 7  # as `cohort serve` builds it: from its options
    assert in_flight(CodeVerifier(sandbox_endpoints="127.0.0.1:1, 127.0.0.1:2,127.0.0.1:3")) == 48
    assert in_flight(CodeVerifier(max_parallel=2)) == 2


def test_sandbox_that_cannot_start_is_dependency_unavailable() -> None:
    (r,) = verify(CodeVerifier(sandbox_endpoints=["127.0.0.1:0"]), ["def add(a, b): return a + b"])
    assert r.status is RolloutStatus.DEPENDENCY_UNAVAILABLE, r.detail


def test_asserts_can_use_standard_modules_the_candidate_imported(verifier) -> None:
    """MBPP asserts such as ``math.isclose(...)`` rely on the solution's ``import math``; the grader
    imports its own copy of allow-listed standard modules, never the candidate's objects."""
    tests = CodeTests("asserts", asserts=("assert math.isclose(area(2), 12.566, rel_tol=1e-3)",
                                          "assert not hasattr(math, 'system')"))
    ok = "import math\ndef area(r):\n    return math.pi * r * r\n"
    alias = "import os as math\ndef area(r):\n    return 3.14159 * r * r\n"  # os under the name math
    plain = "def area(r):\n    return 3.14159 * r * r\n"
    results = verify(verifier, [ok, alias, plain], tests=tests)
    assert [r.reward for r in results] == [1.0, 0.0, 0.0]
    assert "NameError" in results[1].detail and "NameError" in results[2].detail
