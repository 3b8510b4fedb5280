"""``grpo.sandbox.v1.SandboxService`` over grpc.aio: ExecuteCode and RunTests.

Thin transport: requests are converted by :mod:`sandbox.convert` (limits, :class:`TestSpec`), the
blocking work runs in a thread pool on the in-process :class:`~sandbox.pool.Sandbox`, and results
are converted back. An in-band result always describes what the program did; a failure of
the sandbox itself is a gRPC error (UNAVAILABLE), a malformed request is INVALID_ARGUMENT: the domain
errors are raised, and the server's interceptor (:mod:`cohort.rpc.status`) maps them (:data:`ERRORS`).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2 as pb
from cohort.proto.grpo.sandbox.v1 import sandbox_service_pb2_grpc as pb_grpc
from cohort.rpc.gate import FairGate
from cohort.sandbox import convert, policy
from cohort.sandbox.executor import SandboxError
from cohort.sandbox.grader import InvalidTests
from cohort.sandbox.pool import Sandbox, SandboxOptions, as_tenant


SERVICE_NAME = "grpo.sandbox.v1.SandboxService"
TENANT_METADATA = convert.TENANT_METADATA
"""One tenant (the code verifier sends one per group) holds at most half the slots of each pool and at most
``max_calls_per_tenant`` of the RPC threads (:class:`~cohort.rpc.gate.FairGate`)."""
WAITING_PER_RUNNING = 4


class TenantBusy(Exception):
    """A tenant already has as many calls running or queued as it may: retry later (with backoff)."""


ERRORS = {
    convert.BadSandboxRequest: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidTests: grpc.StatusCode.INVALID_ARGUMENT,
    TenantBusy: grpc.StatusCode.RESOURCE_EXHAUSTED,  # clients back off, cohort.rpc.retry
    SandboxError: grpc.StatusCode.UNAVAILABLE,  # the sandbox failed, not the request: another replica may not
}
"""The sandbox service's domain errors and their status codes (:mod:`cohort.rpc.status` applies them; draining
is UNAVAILABLE there too)."""


class SandboxServicer(pb_grpc.SandboxServiceServicer):
    """Converts messages (:mod:`sandbox.convert`) and runs them on the :class:`Sandbox`, one tenant's calls
    through a :class:`~cohort.rpc.gate.FairGate`; what it refuses it raises (:data:`ERRORS`)."""

    def __init__(self, sandbox: Sandbox, workers: int = 32, max_calls_per_tenant: int = 0) -> None:
        self.sandbox = sandbox
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox-rpc")
        cap = max_calls_per_tenant or max(1, workers // 2)
        self.gate = FairGate(per_key=cap, max_waiting=WAITING_PER_RUNNING * cap)
        """One tenant holds at most ``cap`` RPC threads (default half) and queues ``4 * cap`` more calls."""

    async def _run(self, context, fn, *args):
        tenant = dict(context.invocation_metadata() or ()).get(TENANT_METADATA, "")
        if self.gate.full(tenant):
            raise TenantBusy(f"tenant {tenant!r} has {self.gate.per_key + self.gate.max_waiting} calls running or "
                             "queued; retry later")
        loop = asyncio.get_running_loop()
        await self.gate.acquire(tenant)
        started = time.monotonic()
        job = self.pool.submit(as_tenant, tenant, fn, *args)
        # the place is the thread's: it is given back when the work ends, even if the caller gave up first
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(self.gate.release, tenant, time.monotonic() - started))
        return await asyncio.wrap_future(job)

    async def ExecuteCode(self, request: pb.ExecuteCodeRequest, context) -> pb.ExecuteCodeResponse:
        args = convert.execute_args_from_pb(request)
        result = await self._run(context, self.sandbox.execute, args.code, args.stdin, args.limits, args.files)
        return convert.exec_result_to_pb(result)

    async def RunTests(self, request: pb.RunTestsRequest, context) -> pb.RunTestsResponse:
        args = convert.tests_args_from_pb(request)
        per_test = args.per_test_timeout_s or self.sandbox.options.defaults.wall_s
        result = await self._run(context, self.sandbox.run_tests, args.code, args.spec, per_test, args.stop_first,
                                 args.limits)
        return convert.run_to_pb(result)


async def serve(host="127.0.0.1", port: int = 0, **opts) -> None:
    """Serve SandboxService and the `python` tool (ToolService), with health and reflection, until SIGTERM/SIGINT; then drain.

    ``host`` may also be a ready :class:`cohort.rpc.runtime.RuntimeOptions`. Options (``cohort serve sandbox``
    takes them from its serve config's ``sandbox`` section, :mod:`cohort.cli.serve_config`):
    ``pool_size`` (slots per pool; 0: max(4, 2 * CPUs)),
    ``max_calls_per_tenant`` (RPC threads one tenant may hold; 0: half of them), ``config`` (a
    :class:`cohort.sandbox.policy.SandboxConfig`: the interpreter, cgroups),
    ``port_file``, ``grace_s``, ``max_message_bytes``, ``drain_delay_s``, and the `python` tool's
    ``tool_wall_s``, ``tool_slots_per_core``, ``tool_sessions``, ``tool_max_sessions`` (:mod:`cohort.sandbox.tool`,
    docs/tools.md).
    """
    from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions

    if isinstance(host, RuntimeOptions):
        options = host
    else:
        fields = {k: opts.pop(k) for k in ("port_file", "grace_s", "max_message_bytes", "drain_delay_s") if k in opts}
        options = RuntimeOptions(host=host, port=port, **fields)
    pool_size = int(opts.pop("pool_size", 0))
    max_calls = int(opts.pop("max_calls_per_tenant", 0))
    tool_wall_s, tool_slots_per_core = float(opts.pop("tool_wall_s", 0.0)), float(opts.pop("tool_slots_per_core", 0.0))
    tool_sessions, tool_max_sessions = bool(opts.pop("tool_sessions", False)), int(opts.pop("tool_max_sessions", 0))
    config = opts.pop("config", None) or policy.SandboxConfig()
    sandbox = Sandbox(SandboxOptions(config=config, pool_size=pool_size))
    if opts:
        raise TypeError(f"unknown sandbox server options: {sorted(opts)}")
    # Fail fast: one real execution before reporting SERVING.
    probe = await asyncio.get_running_loop().run_in_executor(None, sandbox.execute, "print(6 * 7)")
    if probe.stdout != b"42\n":
        raise SandboxError(f"sandbox self-test failed: {probe}")
    runtime = GrpcRuntime(options)
    runtime.add_service(SERVICE_NAME, pb_grpc.add_SandboxServiceServicer_to_server,
                        SandboxServicer(sandbox, max_calls_per_tenant=max_calls), errors=ERRORS)
    # the same sandbox is also the `python` tool (grpo.tool.v1), with the same isolation and limits
    from cohort.sandbox.session import SessionLimits
    from cohort.sandbox.tool import VERSION, PythonTool, tool_slots
    from cohort.tools import server as tool_server

    sessions = SessionLimits(max_live=tool_max_sessions) if tool_sessions else None
    tool = PythonTool(sandbox, slots=tool_slots(tool_slots_per_core), wall_s=tool_wall_s, sessions=sessions)
    tool_server.add_to_server([tool], VERSION, runtime)
    try:
        await runtime.start(service_names=[SERVICE_NAME, tool_server.SERVICE_NAME], health_names=[])
        await runtime.serve_until_signal()
    finally:
        sandbox.close()
