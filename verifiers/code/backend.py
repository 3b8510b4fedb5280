"""How the code verifier reaches the sandbox: in-process pools, or SandboxService over gRPC.

Both raise :class:`SandboxUnavailable` for any infrastructure failure (the verifier turns it into
DEPENDENCY_UNAVAILABLE, never a reward of 0) and :class:`sandbox.judge.InvalidTests` for tests
that cannot run at all.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import TYPE_CHECKING, Protocol

from cohort.sandbox import policy
from cohort.sandbox.executor import ExecResult, ExecStatus
from cohort.sandbox.judge import InvalidTests, TestOutcome, TestRun, TestSpec

if TYPE_CHECKING:
    from cohort.rpc.tls import ClientTls

ENDPOINT_ENV = "COHORT_SANDBOX_ENDPOINT"
TLS_ENV_PREFIX = "COHORT_SANDBOX_TLS_"
"""``COHORT_SANDBOX_TLS_CA`` / ``_CERT`` / ``_KEY`` / ``_SERVER_NAME``: TLS (mutual with CERT+KEY) to the sandbox."""
POOL_SIZE_ENV = "COHORT_SANDBOX_POOL_SIZE"


class SandboxUnavailable(RuntimeError):
    """The sandbox could not run the code (down, unreachable, crashed): not the program's fault."""


class Backend(Protocol):
    def execute(self, code: str, stdin: bytes, limits: policy.Limits) -> ExecResult: ...

    def run_tests(self, code: str, spec: TestSpec, per_test_timeout_s: float, stop_first: bool,
                  limits: policy.Limits) -> TestRun: ...


class LocalBackend:
    """The sandbox pools in this process (started on first use, shared by all threads)."""

    _shared: LocalBackend | None = None
    _lock = threading.Lock()

    def __init__(self, pool_size: int = 0, sandbox=None) -> None:
        from cohort.sandbox.pool import Sandbox, SandboxOptions

        self.sandbox = sandbox if sandbox is not None else Sandbox(SandboxOptions(pool_size=pool_size))

    @classmethod
    def shared(cls) -> LocalBackend:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls(int(os.environ.get(POOL_SIZE_ENV, "0") or 0))
            return cls._shared

    def execute(self, code: str, stdin: bytes, limits: policy.Limits) -> ExecResult:
        from cohort.sandbox.executor import SandboxError

        try:
            return self.sandbox.execute(code, stdin, limits)
        except SandboxError as exc:
            raise SandboxUnavailable(str(exc)) from exc

    def run_tests(self, code, spec, per_test_timeout_s, stop_first, limits) -> TestRun:
        from cohort.sandbox.executor import SandboxError

        try:
            return self.sandbox.run_tests(code, spec, per_test_timeout_s, stop_first, limits)
        except SandboxError as exc:
            raise SandboxUnavailable(str(exc)) from exc


class GrpcBackend:
    """SandboxService at one or more ``host:port`` endpoints (round robin, failover on UNAVAILABLE).

    ``tls``: see :mod:`cohort.rpc.tls`; ``"env"`` (the default) reads ``COHORT_SANDBOX_TLS_*`` (plaintext when unset).
    """

    def __init__(self, endpoints: str | list[str], connect_timeout_s: float = 5.0, tls: ClientTls | None | str = "env") -> None:
        from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc

        names = [e.strip() for e in (endpoints.split(",") if isinstance(endpoints, str) else endpoints) if e.strip()]
        if not names:
            raise ValueError("no sandbox endpoint given")
        opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        from cohort.rpc.tls import ClientTls, channel

        if tls == "env":
            tls = ClientTls.from_env(TLS_ENV_PREFIX)
        self.tls = tls
        self.stubs = [pb_grpc.SandboxServiceStub(channel(e, tls, opts)) for e in names]
        self.endpoints = names
        self._next = itertools.count()
        self.connect_timeout_s = connect_timeout_s

    def _call(self, method: str, request, timeout_s: float):
        import grpc

        errors = []
        start = next(self._next)
        for k in range(len(self.stubs)):
            i = (start + k) % len(self.stubs)
            try:
                return getattr(self.stubs[i], method)(request, timeout=timeout_s, wait_for_ready=False)
            except grpc.RpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidTests(exc.details()) from None
                errors.append(f"{self.endpoints[i]}: {code.name}: {exc.details()}")
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    break
        raise SandboxUnavailable("sandbox service failed: " + "; ".join(errors))

    @staticmethod
    def _limits(limits: policy.Limits):
        from google.protobuf.duration_pb2 import Duration

        from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb

        wall, cpu = Duration(), Duration()
        wall.FromNanoseconds(int(limits.wall_s * 1e9))
        cpu.FromNanoseconds(int(limits.cpu_s * 1e9))
        return pb.Limits(wall_time=wall, cpu_time=cpu, memory_bytes=limits.memory_bytes,
                         output_bytes=limits.output_bytes, max_processes=limits.max_processes,
                         disk_bytes=limits.disk_bytes)

    def execute(self, code: str, stdin: bytes, limits: policy.Limits) -> ExecResult:
        from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb

        req = pb.ExecuteCodeRequest(language="python", code=code, stdin=stdin, limits=self._limits(limits))
        r = self._call("ExecuteCode", req, limits.wall_s + 30.0)
        status = {
            pb.EXECUTION_STATUS_EXITED: ExecStatus.EXITED,
            pb.EXECUTION_STATUS_TIME_LIMIT_EXCEEDED: ExecStatus.TIME_LIMIT_EXCEEDED,
            pb.EXECUTION_STATUS_MEMORY_LIMIT_EXCEEDED: ExecStatus.MEMORY_LIMIT_EXCEEDED,
            pb.EXECUTION_STATUS_OUTPUT_LIMIT_EXCEEDED: ExecStatus.OUTPUT_LIMIT_EXCEEDED,
        }.get(r.status)
        if status is None:
            raise SandboxUnavailable(f"sandbox returned status {r.status}")
        return ExecResult(status, r.exit_code, r.signal, r.stdout, r.stderr, r.stdout_truncated,
                          r.stderr_truncated, r.wall_time.ToNanoseconds() / 1e9, r.cpu_time.ToNanoseconds() / 1e9)

    def run_tests(self, code, spec, per_test_timeout_s, stop_first, limits) -> TestRun:
        from google.protobuf.duration_pb2 import Duration

        from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb

        per_test = Duration()
        per_test.FromNanoseconds(int(per_test_timeout_s * 1e9))
        req = pb.RunTestsRequest(language="python", code=code, per_test_timeout=per_test,
                                 stop_at_first_failure=stop_first, limits=self._limits(limits))
        if spec.kind == "asserts":
            req.asserts.CopyFrom(pb.AssertTests(asserts=list(spec.asserts), setup_code=spec.setup_code))
        else:
            # FunctionTest has no setup field: the setup (e.g. a HumanEval prompt) runs first as part
            # of test_code, which the judge runs in the same namespace before check().
            test_code = f"{spec.setup_code}\n\n{spec.test_code}" if spec.setup_code.strip() else spec.test_code
            req.function.CopyFrom(pb.FunctionTest(test_code=test_code, entry_point=spec.entry_point))
        r = self._call("RunTests", req, per_test_timeout_s * (spec.count + 1) + 60.0)
        causes = {pb.TEST_CAUSE_NONE: "", pb.TEST_CAUSE_ASSERTION: "assertion",
                  pb.TEST_CAUSE_RUNTIME_ERROR: "runtime", pb.TEST_CAUSE_TIME_LIMIT: "timeout",
                  pb.TEST_CAUSE_MEMORY_LIMIT: "memory", pb.TEST_CAUSE_OUTPUT_LIMIT: "output"}
        if len(r.outcomes) != spec.count:
            raise SandboxUnavailable(f"sandbox returned {len(r.outcomes)} outcomes for {spec.count} tests")
        outcomes = tuple(TestOutcome(o.passed, causes.get(o.cause, "runtime"), o.error) for o in r.outcomes)
        return TestRun(outcomes, r.load_error, causes.get(r.load_cause, "runtime") if r.load_error else "",
                       r.candidate_stdout, r.candidate_stderr, r.wall_time.ToNanoseconds() / 1e9)


def default_backend() -> Backend:
    """gRPC when ``COHORT_SANDBOX_ENDPOINT`` is set (comma-separated host:port list), else in-process."""
    endpoint = os.environ.get(ENDPOINT_ENV, "").strip()
    return GrpcBackend(endpoint) if endpoint else LocalBackend.shared()
