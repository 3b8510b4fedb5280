"""Who is charged: a broken reference is INVALID_REFERENCE (masked) for the whole group, whatever the
candidates do; a failure the candidate can cause (a wrong value, a missing function, a program over its
limits or over the code size) is scored, never masked. Real in-process sandbox, and real gRPC to
`cohort serve sandbox` for the paths that cross it."""

from __future__ import annotations

import pytest

from cohort.verifiers.base import CodeTests, GroupRequest, IoCase, Reference, Rollout, RolloutStatus, Verdict, VerifyContext
from cohort.verifiers.code import CodeVerifier, GrpcBackend, LocalBackend

GOOD = "def add(a, b):\n    return a + b"
WRONG = "def add(a, b):\n    return 0"
BROKEN = "def add(a, b) return a"  # does not load
INVALID = RolloutStatus.INVALID_REFERENCE


@pytest.fixture(scope="module")
def sandbox():
    from cohort.sandbox.pool import Sandbox, SandboxOptions

    sb = Sandbox(SandboxOptions(pool_size=2))
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def verifier(sandbox):
    return CodeVerifier(backend=LocalBackend(sandbox=sandbox), max_parallel=4)


@pytest.fixture(scope="module")
def grpc_verifier():
    from cohort.rpc.launch import ServiceProcess

    with ServiceProcess(["sandbox"], env={"COHORT_SANDBOX_POOL_SIZE": "2"}) as proc:
        yield CodeVerifier(backend=GrpcBackend(proc.endpoint, tls=None), max_parallel=4)


def verify(v, completions, tests, **options):
    group = GroupRequest("code", tuple(Rollout(i, c) for i, c in enumerate(completions)), Reference(code_tests=tests),
                         options={k: str(x) for k, x in options.items()})
    return v.verify_group(group, VerifyContext())


def asserts(*tests: str, setup: str = "") -> CodeTests:
    return CodeTests("asserts", asserts=tests, setup_code=setup)


BROKEN_REFERENCES = {
    "assert with nothing after ==": asserts("assert add(1, 2) == 3", "assert add(2, 2) == "),
    "syntax error in setup": asserts("assert add(1, 2) == 3", setup="def helper(:\n    pass"),
    "null byte in an assert": asserts("assert add(1, 2) == 3\x00"),
    "empty assert": asserts("assert add(1, 2) == 3", "   "),
    "comparison without assert": asserts("assert add(1, 2) == 3", "add(2, 2) == 5"),
    "asserts given as one string": CodeTests("asserts", asserts="assert add(1, 2) == 3"),  # type: ignore[arg-type]
    "check that does not compile": CodeTests("function", entry_point="add",
                                             test_code="def check(candidate):\n    assert candidate(1, 2) ==\n"),
    "test code without check": CodeTests("function", entry_point="add",
                                         test_code="def test(candidate):\n    assert candidate(1, 2) == 3\n"),
    "check taking two arguments": CodeTests("function", entry_point="add",
                                            test_code="def check(candidate, extra):\n    assert candidate(1, 2) == 3\n"),
    "entry point not a name": CodeTests("function", entry_point="add(", test_code="def check(c):\n    assert c(1, 2) == 3\n"),
    "io case without expected output": CodeTests("io", io_cases=(IoCase("1 2\n", None),)),  # type: ignore[arg-type]
    "io stdin of the wrong type": CodeTests("io", io_cases=(IoCase(b"1 2\n", "3"),)),  # type: ignore[arg-type]
    "io cases all empty": CodeTests("io", io_cases=(IoCase("1 2\n", ""), IoCase("2 2\n", " \n"))),
    "io case not a case": CodeTests("io", io_cases=({"stdin": "1 2", "expected_stdout": "3"},)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", sorted(BROKEN_REFERENCES))
def test_a_reference_broken_before_it_runs_is_invalid_reference_for_every_candidate(verifier, name) -> None:
    """Found on the host before any candidate loads: the same status for a right, a wrong and a broken answer."""
    tests = BROKEN_REFERENCES[name]
    prog = "a, b = map(int, input().split())\nprint(a + b)" if tests.kind == "io" else GOOD
    results = verify(verifier, [prog, WRONG, BROKEN], tests)
    assert [r.status for r in results] == [INVALID] * 3, [(r.status, r.detail) for r in results]
    assert all(r.reward == 0.0 and not r.usable and r.detail for r in results)


def test_the_detail_names_what_is_broken(verifier) -> None:
    (r,) = verify(verifier, [GOOD], BROKEN_REFERENCES["assert with nothing after =="])
    assert "assert 1 does not compile" in r.detail and "SyntaxError" in r.detail
    (r,) = verify(verifier, [GOOD], BROKEN_REFERENCES["test code without check"])
    assert "does not define check" in r.detail
    (r,) = verify(verifier, [GOOD], BROKEN_REFERENCES["io case without expected output"])
    assert "expected_stdout is missing" in r.detail


RUNTIME_BROKEN = {
    # the helper is defined only under a __main__ guard, which the grader's namespace never runs
    "helper behind a __main__ guard": asserts("assert add(1, 2) == 3", "assert add(2, 2) == EXPECTED",
                                              setup="if __name__ == '__main__':\n    EXPECTED = 4\n"),
    "assert using a name a later test binds": asserts("assert add(1, 2) == 3", "assert add(2, 2) == four", "four = 4"),
    "check that imports a missing module": CodeTests(
        "function", entry_point="add",
        test_code="def check(candidate):\n    import no_such_module_xyz\n    assert candidate(1, 2) == 3\n"),
    "check defined only conditionally": CodeTests(
        "function", entry_point="add", test_code="if 1 == 2:\n    def check(candidate):\n        pass\n"),
}


@pytest.mark.parametrize("name", sorted(RUNTIME_BROKEN))
def test_a_reference_that_fails_in_its_own_code_masks_the_whole_group(verifier, name) -> None:
    """Found only when the grader runs, for a candidate that loads; the group shares the reference, so the
    candidate that did not load (and so never reached the tests) is masked too, not scored 0."""
    results = verify(verifier, [GOOD, WRONG, BROKEN], RUNTIME_BROKEN[name])
    assert [r.status for r in results] == [INVALID] * 3, [(r.status, r.detail) for r in results]


def test_the_candidates_own_failures_stay_scored(verifier) -> None:
    """Failures that a policy could choose must never be masked (a mask removes the negative gradient)."""
    tests = asserts("assert add(1, 2) == 3", "assert add(2, 2) == 4")
    cases = {
        "misnamed function (NameError in the assert)": "def plus(a, b):\n    return a + b",
        "raises NameError itself": "def add(a, b):\n    raise NameError('EXPECTED')",
        "raises an ImportError": "def add(a, b):\n    import no_such_module_xyz",
        "returns None (TypeError in the test)": "def add(a, b):\n    return None",
        "raises SyntaxError itself": "def add(a, b):\n    raise SyntaxError('invalid syntax')",
        "does not load": BROKEN,
    }
    results = verify(verifier, list(cases.values()), tests)
    for name, r in zip(cases, results):
        assert r.status is RolloutStatus.OK and r.reward == 0.0, (name, r)


def test_a_name_the_candidate_must_define_is_the_candidates(verifier) -> None:
    """HumanEval's check may call a prompt helper (``poly``); when the row gives no setup_code the candidate
    had to define it, so a NameError for it is the candidate's (scored), not the reference's."""
    tests = CodeTests("function", entry_point="f",
                      test_code="def check(candidate):\n    assert candidate(2) == poly(2)\n")
    without, with_helper = verify(verifier, ["def f(x):\n    return 4",
                                             "def poly(x):\n    return x * x\ndef f(x):\n    return 4"], tests)
    assert (without.status, without.verdict, without.reward) == (RolloutStatus.OK, Verdict.RUNTIME_ERROR, 0.0)
    assert (with_helper.status, with_helper.reward) == (RolloutStatus.OK, 1.0)


def test_candidate_eval_cannot_pass_as_the_references_name_error(verifier) -> None:
    """A NameError raised in code the reference evaluates from the candidate's answer is not the reference's."""
    tests = CodeTests("function", entry_point="f",
                      test_code="EXPECTED = 3\ndef check(candidate):\n    assert eval(candidate()) == EXPECTED\n")
    (r,) = verify(verifier, ["def f():\n    return 'EXPECTEDX'"], tests)
    assert r.status is RolloutStatus.OK and r.reward == 0.0


def test_limits_are_scored_and_flagged(verifier) -> None:
    tests = asserts("assert add(1, 2) == 3", "assert add(2, 2) == 4")
    spin = "def add(a, b):\n    while True: pass"
    flood = "import sys\ndef add(a, b):\n    for _ in range(1 << 16):\n        sys.stdout.write('x' * 1024)\n    return a + b"
    hog = "def add(a, b):\n    x = bytearray(4 << 30)\n    return a + b"
    r_spin, r_flood, r_hog = verify(verifier, [spin, flood, hog], tests, per_test_timeout_s=1, memory_mb=128)
    for r, flag in ((r_spin, "time_limit_exceeded"), (r_flood, "output_limit_exceeded"), (r_hog, "memory_limit_exceeded")):
        assert (r.status, r.reward, r.verdict) == (RolloutStatus.OK, 0.0, Verdict.RESOURCE_LIMIT_EXCEEDED), r
        assert flag in r.flags, r
    (ok,) = verify(verifier, [GOOD], tests)
    assert ok.flags == ()


def test_code_over_the_sandbox_size_is_scored_not_masked(verifier, grpc_verifier) -> None:
    """The sandbox server refuses programs over 1 MiB with INVALID_ARGUMENT: that must not become
    INVALID_REFERENCE (masked), or a policy could escape every negative reward by padding its answer."""
    huge = GOOD + "\n# " + "x" * (1 << 20)
    tests = asserts("assert add(1, 2) == 3")
    for v in (verifier, grpc_verifier):
        good, big = verify(v, [GOOD, huge], tests)
        assert good.reward == 1.0
        assert (big.status, big.reward, big.verdict) == (RolloutStatus.OK, 0.0, Verdict.RESOURCE_LIMIT_EXCEEDED), big
        assert "code_too_large" in big.flags


def test_broken_references_over_grpc(grpc_verifier) -> None:
    """The same attribution through SandboxService (the grader's verdict crosses as INVALID_ARGUMENT)."""
    for tests in (BROKEN_REFERENCES["assert with nothing after =="], RUNTIME_BROKEN["helper behind a __main__ guard"],
                  RUNTIME_BROKEN["check that imports a missing module"]):
        results = verify(grpc_verifier, [GOOD, WRONG, BROKEN], tests)
        assert [r.status for r in results] == [INVALID] * 3, [(r.status, r.detail) for r in results]
    good, wrong = verify(grpc_verifier, [GOOD, "def plus(a, b):\n    return a + b"], asserts("assert add(1, 2) == 3"))
    assert (good.reward, wrong.status, wrong.reward) == (1.0, RolloutStatus.OK, 0.0)
