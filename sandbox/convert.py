"""The sandbox's proto mapping, both ways: ``grpo.sandbox.v1`` messages <-> :mod:`sandbox.policy` limits,
:class:`~sandbox.grader.TestSpec`, :class:`~sandbox.executor.ExecResult` and :class:`~sandbox.grader.TestRun`.

The server (``sandbox/server.py``) reads requests and writes responses with it; the code verifier's
sandbox client (``verifiers/code/backend.py``) writes requests and reads responses. A request that can
never run raises :class:`BadSandboxRequest` (a domain error: the servicer maps it to INVALID_ARGUMENT); a
response that does not describe a run raises :class:`MalformedResponse` (the client's infrastructure
failure, never a verdict).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration

from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.sandbox import policy
from cohort.sandbox.executor import ExecResult, ExecStatus
from cohort.sandbox.grader import InvalidTests, TestOutcome, TestRun, TestSpec
from cohort.sandbox.pool import check_file_path

TENANT_METADATA = "cohort-tenant"
"""Call metadata naming whose work a call is (the code verifier: one tenant per group); see ``sandbox/server.py``."""
MAX_CODE_BYTES = policy.MAX_CODE_BYTES
MAX_FILES_BYTES = 4 * MAX_CODE_BYTES
MAX_TESTS = 1000


class BadSandboxRequest(ValueError):
    """The request can never run (bad language, oversized code, bad file path, malformed tests)."""


class MalformedResponse(ValueError):
    """A response the client cannot read as a run (unknown status, wrong number of outcomes)."""


_STATUS = {
    ExecStatus.EXITED: pb.EXECUTION_STATUS_EXITED,
    ExecStatus.TIME_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED,
    ExecStatus.MEMORY_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED,
    ExecStatus.OUTPUT_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED,
}
_STATUS_BACK = {v: k for k, v in _STATUS.items()}
_CAUSE = {
    "": pb.TEST_CAUSE_NONE, "assertion": pb.TEST_CAUSE_ASSERTION, "runtime": pb.TEST_CAUSE_RUNTIME_ERROR,
    "timeout": pb.TEST_CAUSE_TIME_LIMIT, "memory": pb.TEST_CAUSE_MEMORY_LIMIT, "output": pb.TEST_CAUSE_OUTPUT_LIMIT,
}
_CAUSE_BACK = {v: k for k, v in _CAUSE.items()}


def duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def seconds(d: Duration) -> float:
    return d.ToNanoseconds() / 1e9


# ---- limits ---------------------------------------------------------------------------------------

def limits_to_pb(limits: policy.Limits) -> pb.Limits:
    return pb.Limits(wall_time=duration(limits.wall_s), cpu_time=duration(limits.cpu_s),
                     memory_bytes=limits.memory_bytes, output_bytes=limits.output_bytes,
                     max_processes=limits.max_processes, disk_bytes=limits.disk_bytes)


def limits_from_pb(msg: pb.Limits) -> policy.Limits:
    """Zero / unset fields mean "server default"; the sandbox clamps everything to its maxima."""
    return policy.Limits(
        wall_s=seconds(msg.wall_time) if msg.HasField("wall_time") else 0.0,
        cpu_s=seconds(msg.cpu_time) if msg.HasField("cpu_time") else 0.0,
        memory_bytes=msg.memory_bytes,
        output_bytes=msg.output_bytes,
        max_processes=msg.max_processes,
        disk_bytes=msg.disk_bytes,
    )


# ---- ExecuteCode ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExecuteArgs:
    """An ExecuteCode request as the sandbox runs it."""

    code: str
    stdin: bytes
    limits: policy.Limits
    files: dict[str, bytes]


def _check_common(language: str, code: str) -> None:
    if language not in ("", "python"):
        raise BadSandboxRequest(f"language {language!r} is not supported (only 'python')")
    if len(code.encode()) > MAX_CODE_BYTES:
        raise BadSandboxRequest(f"code is over {MAX_CODE_BYTES} bytes")


def execute_request(code: str, stdin: bytes, limits: policy.Limits) -> pb.ExecuteCodeRequest:
    return pb.ExecuteCodeRequest(language="python", code=code, stdin=stdin, limits=limits_to_pb(limits))


def execute_args_from_pb(req: pb.ExecuteCodeRequest) -> ExecuteArgs:
    _check_common(req.language, req.code)
    files = {}
    for f in req.files:
        try:
            files[check_file_path(f.path)] = bytes(f.content)
        except ValueError as exc:
            raise BadSandboxRequest(str(exc)) from None
    if sum(len(c) for c in files.values()) > MAX_FILES_BYTES:
        raise BadSandboxRequest("files are over 4 MiB in total")
    return ExecuteArgs(req.code, bytes(req.stdin), limits_from_pb(req.limits), files)


def exec_result_to_pb(r: ExecResult) -> pb.ExecuteCodeResponse:
    return pb.ExecuteCodeResponse(
        status=_STATUS[r.status], exit_code=r.exit_code, signal=r.signal, stdout=r.stdout, stderr=r.stderr,
        stdout_truncated=r.stdout_truncated, stderr_truncated=r.stderr_truncated,
        wall_time=duration(r.wall_s), cpu_time=duration(r.cpu_s),
    )


def exec_result_from_pb(r: pb.ExecuteCodeResponse) -> ExecResult:
    status = _STATUS_BACK.get(r.status)
    if status is None:
        raise MalformedResponse(f"sandbox returned status {r.status}")
    return ExecResult(status, r.exit_code, r.signal, r.stdout, r.stderr, r.stdout_truncated,
                      r.stderr_truncated, seconds(r.wall_time), seconds(r.cpu_time))


# ---- RunTests -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunTestsArgs:
    """A RunTests request as the sandbox runs it; ``per_test_timeout_s`` 0 means the server's default."""

    code: str
    spec: TestSpec
    per_test_timeout_s: float
    stop_first: bool
    limits: policy.Limits


def tests_request(code: str, spec: TestSpec, per_test_timeout_s: float, stop_first: bool,
                  limits: policy.Limits) -> pb.RunTestsRequest:
    req = pb.RunTestsRequest(language="python", code=code, per_test_timeout=duration(per_test_timeout_s),
                             stop_at_first_failure=stop_first, limits=limits_to_pb(limits))
    if spec.kind == "asserts":
        req.asserts.CopyFrom(pb.AssertTests(asserts=list(spec.asserts), setup_code=spec.setup_code))
    else:
        # FunctionTest has no setup field: the setup (e.g. a HumanEval prompt) runs first as part
        # of test_code, which the grader runs in the same namespace before check().
        test_code = f"{spec.setup_code}\n\n{spec.test_code}" if spec.setup_code.strip() else spec.test_code
        req.function.CopyFrom(pb.FunctionTest(test_code=test_code, entry_point=spec.entry_point))
    return req


def spec_from_pb(req: pb.RunTestsRequest) -> TestSpec:
    which = req.WhichOneof("tests")
    if which == "asserts":
        if len(req.asserts.asserts) > MAX_TESTS:
            raise InvalidTests(f"more than {MAX_TESTS} asserts")
        return TestSpec("asserts", asserts=tuple(req.asserts.asserts), setup_code=req.asserts.setup_code)
    if which == "function":
        return TestSpec("function", test_code=req.function.test_code, entry_point=req.function.entry_point)
    raise InvalidTests("RunTestsRequest needs `asserts` or `function`")


def tests_args_from_pb(req: pb.RunTestsRequest) -> RunTestsArgs:
    _check_common(req.language, req.code)
    try:
        spec = spec_from_pb(req)
    except InvalidTests as exc:
        raise BadSandboxRequest(f"invalid tests: {exc}") from None
    per_test = seconds(req.per_test_timeout) if req.HasField("per_test_timeout") else 0.0
    if per_test < 0:
        raise BadSandboxRequest("per_test_timeout must be >= 0")
    return RunTestsArgs(req.code, spec, per_test, req.stop_at_first_failure, limits_from_pb(req.limits))


def run_to_pb(r: TestRun) -> pb.RunTestsResponse:
    return pb.RunTestsResponse(
        outcomes=[pb.TestOutcome(passed=o.passed, cause=_CAUSE[o.cause], error=o.error) for o in r.outcomes],
        load_error=r.load_error, load_cause=_CAUSE[r.load_cause] if r.load_error else pb.TEST_CAUSE_UNSPECIFIED,
        candidate_stdout=r.stdout, candidate_stderr=r.stderr, wall_time=duration(r.wall_s),
    )


def run_from_pb(r: pb.RunTestsResponse, expected_tests: int) -> TestRun:
    if len(r.outcomes) != expected_tests:
        raise MalformedResponse(f"sandbox returned {len(r.outcomes)} outcomes for {expected_tests} tests")
    outcomes = tuple(TestOutcome(o.passed, _CAUSE_BACK.get(o.cause, "runtime"), o.error) for o in r.outcomes)
    load_cause = _CAUSE_BACK.get(r.load_cause, "runtime") if r.load_error else ""
    return TestRun(outcomes, r.load_error, load_cause, r.candidate_stdout, r.candidate_stderr, seconds(r.wall_time))
