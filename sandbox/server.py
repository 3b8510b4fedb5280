"""``grpo.sandbox.v1.SandboxService`` over grpc.aio: ExecuteCode and RunTests.

Thin transport: requests are converted to :mod:`sandbox.policy` limits and :class:`TestSpec`,
the blocking work runs in a thread pool on the in-process :class:`~sandbox.pool.Sandbox`, and
results are converted back. An in-band result always describes what the program did; a failure of
the sandbox itself is a gRPC error (UNAVAILABLE), a malformed request is INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.duration_pb2 import Duration

from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc
from cohort.sandbox import policy
from cohort.sandbox.executor import ExecResult, ExecStatus, SandboxError
from cohort.sandbox.judge import InvalidTests, TestRun, TestSpec
from cohort.sandbox.pool import Sandbox, SandboxOptions, as_tenant, check_file_path

log = logging.getLogger("cohort.sandbox")

SERVICE_NAME = "grpo.sandbox.v1.SandboxService"
MAX_CODE_BYTES = 1 << 20
MAX_TESTS = 1000
TENANT_METADATA = "cohort-tenant"
"""Call metadata naming who the work is for (e.g. a verifier group): one tenant holds at most half the slots."""

_STATUS = {
    ExecStatus.EXITED: pb.EXECUTION_STATUS_EXITED,
    ExecStatus.TIME_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED,
    ExecStatus.MEMORY_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED,
    ExecStatus.OUTPUT_LIMIT_EXCEEDED: pb.EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED,
}
_CAUSE = {
    "": pb.TEST_CAUSE_NONE, "assertion": pb.TEST_CAUSE_ASSERTION, "runtime": pb.TEST_CAUSE_RUNTIME_ERROR,
    "timeout": pb.TEST_CAUSE_TIME_LIMIT, "memory": pb.TEST_CAUSE_MEMORY_LIMIT, "output": pb.TEST_CAUSE_OUTPUT_LIMIT,
}


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def limits_from_pb(msg: pb.Limits) -> policy.Limits:
    """Zero / unset fields mean "server default"; the sandbox clamps everything to its maxima."""
    return policy.Limits(
        wall_s=msg.wall_time.ToNanoseconds() / 1e9 if msg.HasField("wall_time") else 0.0,
        cpu_s=msg.cpu_time.ToNanoseconds() / 1e9 if msg.HasField("cpu_time") else 0.0,
        memory_bytes=msg.memory_bytes,
        output_bytes=msg.output_bytes,
        max_processes=msg.max_processes,
        disk_bytes=msg.disk_bytes,
    )


def exec_response(r: ExecResult) -> pb.ExecuteCodeResponse:
    return pb.ExecuteCodeResponse(
        status=_STATUS[r.status], exit_code=r.exit_code, signal=r.signal, stdout=r.stdout, stderr=r.stderr,
        stdout_truncated=r.stdout_truncated, stderr_truncated=r.stderr_truncated,
        wall_time=_duration(r.wall_s), cpu_time=_duration(r.cpu_s),
    )


def tests_response(r: TestRun) -> pb.RunTestsResponse:
    return pb.RunTestsResponse(
        outcomes=[pb.TestOutcome(passed=o.passed, cause=_CAUSE[o.cause], error=o.error) for o in r.outcomes],
        load_error=r.load_error, load_cause=_CAUSE[r.load_cause] if r.load_error else pb.TEST_CAUSE_UNSPECIFIED,
        candidate_stdout=r.stdout, candidate_stderr=r.stderr, wall_time=_duration(r.wall_s),
    )


def _check_common(language: str, code: str) -> str | None:
    if language not in ("", "python"):
        return f"language {language!r} is not supported (only 'python')"
    if len(code.encode()) > MAX_CODE_BYTES:
        return f"code is over {MAX_CODE_BYTES} bytes"
    return None


def spec_from_pb(req: pb.RunTestsRequest) -> TestSpec:
    which = req.WhichOneof("tests")
    if which == "asserts":
        if len(req.asserts.asserts) > MAX_TESTS:
            raise InvalidTests(f"more than {MAX_TESTS} asserts")
        return TestSpec("asserts", asserts=tuple(req.asserts.asserts), setup_code=req.asserts.setup_code)
    if which == "function":
        return TestSpec("function", test_code=req.function.test_code, entry_point=req.function.entry_point)
    raise InvalidTests("RunTestsRequest needs `asserts` or `function`")


class SandboxServicer(pb_grpc.SandboxServiceServicer):
    def __init__(self, sandbox: Sandbox, runtime=None, workers: int = 32) -> None:
        self.sandbox = sandbox
        self.runtime = runtime
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox-rpc")

    async def _run(self, context, fn, *args):
        if self.runtime is not None and self.runtime.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "sandbox is draining (shutting down)")
        loop = asyncio.get_running_loop()
        track = self.runtime.track() if self.runtime is not None else _Null()
        with track:
            try:
                tenant = dict(context.invocation_metadata() or ()).get(TENANT_METADATA, "")
                return await loop.run_in_executor(self.pool, as_tenant, tenant, fn, *args)
            except SandboxError as exc:
                log.error("sandbox failure: %s", exc)
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"sandbox failure: {exc}")
            except InvalidTests as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid tests: {exc}")

    async def ExecuteCode(self, request: pb.ExecuteCodeRequest, context) -> pb.ExecuteCodeResponse:
        problem = _check_common(request.language, request.code)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        files = {}
        for f in request.files:
            try:
                files[check_file_path(f.path)] = bytes(f.content)
            except ValueError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if sum(len(c) for c in files.values()) > MAX_CODE_BYTES * 4:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "files are over 4 MiB in total")
        limits = limits_from_pb(request.limits)
        result = await self._run(context, self.sandbox.execute, request.code, bytes(request.stdin), limits, files)
        return exec_response(result)

    async def RunTests(self, request: pb.RunTestsRequest, context) -> pb.RunTestsResponse:
        problem = _check_common(request.language, request.code)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            spec = spec_from_pb(request)
        except InvalidTests as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid tests: {exc}")
        per_test = request.per_test_timeout.ToNanoseconds() / 1e9 if request.HasField("per_test_timeout") else 0.0
        if per_test < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "per_test_timeout must be >= 0")
        limits = limits_from_pb(request.limits)
        per_test = per_test or self.sandbox.options.defaults.wall_s
        result = await self._run(context, self.sandbox.run_tests, request.code, spec, per_test,
                                 request.stop_at_first_failure, limits)
        return tests_response(result)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def serve(host="127.0.0.1", port: int = 0, **opts) -> None:
    """Serve SandboxService (+ health, reflection) until SIGTERM/SIGINT, then drain.

    ``host`` may also be a ready :class:`cohort.rpc.runtime.RuntimeOptions`. Options:
    ``pool_size`` (slots per pool; default ``$COHORT_SANDBOX_POOL_SIZE`` or max(4, 2 * CPUs)),
    ``port_file``, ``grace_s``, ``max_message_bytes``, ``drain_delay_s``.
    """
    from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions

    if isinstance(host, RuntimeOptions):
        options = host
    else:
        fields = {k: opts.pop(k) for k in ("port_file", "grace_s", "max_message_bytes", "drain_delay_s") if k in opts}
        options = RuntimeOptions(host=host, port=port, **fields)
    import os

    pool_size = int(opts.pop("pool_size", 0) or os.environ.get("COHORT_SANDBOX_POOL_SIZE", "0") or 0)
    sandbox = Sandbox(SandboxOptions(pool_size=pool_size))
    if opts:
        raise TypeError(f"unknown sandbox server options: {sorted(opts)}")
    # Fail fast: one real execution before reporting SERVING.
    probe = await asyncio.get_running_loop().run_in_executor(None, sandbox.execute, "print(6 * 7)")
    if probe.stdout != b"42\n":
        raise SandboxError(f"sandbox self-test failed: {probe}")
    runtime = GrpcRuntime(options)
    pb_grpc.add_SandboxServiceServicer_to_server(SandboxServicer(sandbox, runtime), runtime.server)
    try:
        await runtime.start(service_names=[SERVICE_NAME], health_names=[])
        await runtime.serve_until_signal()
    finally:
        sandbox.close()
