"""How the code verifier reaches the sandbox: in-process pools, or SandboxService over gRPC.

Both raise :class:`SandboxUnavailable` for any infrastructure failure (the verifier turns it into
DEPENDENCY_UNAVAILABLE, never a reward of 0) and :class:`sandbox.grader.InvalidTests` for tests
that cannot run at all.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from cohort.sandbox import policy
from cohort.sandbox.executor import ExecResult
from cohort.sandbox.grader import InvalidTests, TestRun, TestSpec

if TYPE_CHECKING:
    from cohort.rpc.retry import RetryPolicy
    from cohort.rpc.tls import ClientTls

IN_FLIGHT_PER_ENDPOINT = 16
"""Calls one code verifier keeps in flight to each sandbox service: half a server's default RPC threads, the
most one tenant (group) may hold there (``sandbox/server.py``)."""


class SandboxUnavailable(RuntimeError):
    """The sandbox could not run the code (down, unreachable, crashed): not the program's fault."""


class Backend(Protocol):
    """``tenant`` names whose work this is (the code verifier: one per group), so that one group's hostile
    programs hold at most a bounded share of the sandbox (``sandbox/pool.py``); ``""`` is uncapped."""

    concurrency: int
    """Programs it can run at once (the code verifier keeps that many in flight, no more)."""

    def execute(self, code: str, stdin: bytes, limits: policy.Limits, tenant: str = "") -> ExecResult: ...

    def run_tests(self, code: str, spec: TestSpec, per_test_timeout_s: float, stop_first: bool,
                  limits: policy.Limits, tenant: str = "") -> TestRun: ...


class LocalBackend:
    """The sandbox pools in this process (started on first use, shared by all threads)."""

    _shared: LocalBackend | None = None
    _lock = threading.Lock()

    def __init__(self, pool_size: int = 0, sandbox=None) -> None:
        from cohort.sandbox.pool import Sandbox, SandboxOptions

        self.sandbox = sandbox if sandbox is not None else Sandbox(SandboxOptions(pool_size=pool_size))
        self.concurrency = self.sandbox.candidates.size

    @classmethod
    def shared(cls, pool_size: int = 0) -> LocalBackend:
        """The process's one in-process sandbox (``pool_size`` of the first caller; 0: the sandbox's default)."""
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls(pool_size)
            return cls._shared

    def _run(self, tenant: str, fn, *args):
        from cohort.sandbox.executor import SandboxError
        from cohort.sandbox.pool import as_tenant

        try:
            return as_tenant(tenant, fn, *args)
        except SandboxError as exc:
            raise SandboxUnavailable(str(exc)) from exc

    def execute(self, code: str, stdin: bytes, limits: policy.Limits, tenant: str = "") -> ExecResult:
        return self._run(tenant, self.sandbox.execute, code, stdin, limits)

    def run_tests(self, code, spec, per_test_timeout_s, stop_first, limits, tenant: str = "") -> TestRun:
        return self._run(tenant, self.sandbox.run_tests, code, spec, per_test_timeout_s, stop_first, limits)


class GrpcBackend:
    """SandboxService at one or more ``host:port`` endpoints, called with the one retry/failover policy of
    every Cohort client (:mod:`cohort.rpc.retry`: round robin, failover and backoff on the same codes, a
    timeout per attempt); INVALID_ARGUMENT is :class:`InvalidTests`, anything else :class:`SandboxUnavailable`.

    ``tls``: see :mod:`cohort.rpc.tls` (None: plaintext).
    """

    MARGIN_S = 30.0
    """Time a call may take beyond the program's own limits (queueing for a slot, grader start-up)."""

    def __init__(self, endpoints: str | list[str], tls: ClientTls | None = None,
                 policy: RetryPolicy | None = None) -> None:
        from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc
        from cohort.rpc.retry import Failover, RetryPolicy
        from cohort.rpc.tls import channel

        names = _endpoint_names(endpoints)
        if not names:
            raise ValueError("no sandbox endpoint given")
        self.tls = tls
        self.stubs = [pb_grpc.SandboxServiceStub(channel(e, tls)) for e in names]
        self.endpoints = names
        self.concurrency = IN_FLIGHT_PER_ENDPOINT * len(names)
        self.policy = policy or RetryPolicy()
        self.failover = Failover(len(names), self.policy)

    def _call(self, method: str, request, work_s: float, tenant: str):
        """``work_s``: what the sandbox needs at most; each attempt gets that plus MARGIN_S, and the whole
        call (with its retries and backoff) as many attempt budgets as there are endpoints, plus one."""
        import time

        import grpc

        budget = work_s + self.MARGIN_S
        deadline = time.monotonic() + budget * (len(self.stubs) + 1)
        from cohort.rpc.retry import Exhausted, RequestRejected, call_with_failover, run_blocking
        from cohort.sandbox.convert import TENANT_METADATA

        metadata = ((TENANT_METADATA, tenant),) if tenant else None

        async def invoke(endpoint: int, timeout: float):  # blocking: never suspends (run_blocking)
            return getattr(self.stubs[endpoint], method)(request, timeout=min(timeout, budget), metadata=metadata,
                                                         wait_for_ready=False)

        async def sleep(seconds: float) -> None:
            time.sleep(seconds)

        try:
            return run_blocking(call_with_failover(self.failover, deadline, invoke, sleep))
        except RequestRejected as exc:
            if exc.code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidTests(exc.details) from None
            # another non-retryable code (UNAUTHENTICATED, UNIMPLEMENTED...): a misconfigured sandbox, not the program's
            raise SandboxUnavailable(f"sandbox service {self.endpoints[exc.endpoint]} rejected the call: {exc}") from None
        except Exhausted as exc:
            errors = [f"{self.endpoints[i]}: {e}" for i, e in exc.errors]
            raise SandboxUnavailable(f"sandbox service failed after {len(errors)} attempt(s): " + "; ".join(errors[-3:])) from None

    def execute(self, code: str, stdin: bytes, limits: policy.Limits, tenant: str = "") -> ExecResult:
        from cohort.sandbox import convert

        r = self._call("ExecuteCode", convert.execute_request(code, stdin, limits), limits.wall_s, tenant)
        try:
            return convert.exec_result_from_pb(r)
        except convert.MalformedResponse as exc:
            raise SandboxUnavailable(str(exc)) from None

    def run_tests(self, code, spec, per_test_timeout_s, stop_first, limits, tenant: str = "") -> TestRun:
        from cohort.sandbox import convert

        req = convert.tests_request(code, spec, per_test_timeout_s, stop_first, limits)
        r = self._call("RunTests", req, per_test_timeout_s * (spec.count + 1) + 30.0, tenant)
        try:
            return convert.run_from_pb(r, spec.count)
        except convert.MalformedResponse as exc:
            raise SandboxUnavailable(str(exc)) from None


def _endpoint_names(endpoints: str | list[str]) -> list[str]:
    return [e.strip() for e in (endpoints.split(",") if isinstance(endpoints, str) else endpoints) if e.strip()]


def default_concurrency(endpoints: list[str], pool_size: int = 0) -> int:
    """:attr:`Backend.concurrency` of :func:`make_backend` with these settings, without starting it."""
    if endpoints:
        return IN_FLIGHT_PER_ENDPOINT * len(endpoints)
    from cohort.sandbox.pool import default_pool_size

    return pool_size or default_pool_size()


def make_backend(endpoints: list[str], tls: ClientTls | None = None, pool_size: int = 0) -> Backend:
    """gRPC to the sandbox services at ``endpoints`` (host:port), else the in-process sandbox."""
    return GrpcBackend(endpoints, tls) if endpoints else LocalBackend.shared(pool_size)
