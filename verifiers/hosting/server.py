"""The verifier server: hosts any registered verifiers behind ``grpo.verifier.v1.VerifierService``.

The servicer converts the message, calls :meth:`VerifierHost.score <cohort.verifiers.hosting.host.VerifierHost.score>`
and converts the results back; nothing else. Validation, the bounded queue and scoring are the host's
(``Verifier.verify_group`` on plain dataclasses, in a bounded thread pool or, for GIL-bound verifiers with
``--scoring-procs``, in the scoring processes of :mod:`cohort.verifiers.hosting.procs`, which sit behind the
host). What the host refuses it raises as a domain error; the server's one interceptor
(:mod:`cohort.rpc.status`) maps those (:data:`ERRORS`), undecodable requests and draining to status codes,
and counts every call in the metrics.

Request-level errors (documented limits, see :class:`~cohort.verifiers.hosting.host.ServerLimits`):

==============================================  ====================
unknown verifier, empty group or batch,          INVALID_ARGUMENT
duplicate index, too many groups / rollouts,
missing or wrong kind of reference, bad option,
a request that does not parse
message larger than ``max_message_bytes``        RESOURCE_EXHAUSTED (by gRPC)
queue full (``max_queued_groups``)               RESOURCE_EXHAUSTED
draining after SIGTERM                           UNAVAILABLE
deadline passed                                  DEADLINE_EXCEEDED
==============================================  ====================

A verifier that raises or returns the wrong rollouts yields in-band VERIFIER_ERROR for
the affected rollouts: a bug in a verifier is never a reward of 0. A completion over
``max_completion_chars`` is its rollout's own problem: scored 0, flagged ``candidate_limit``, its group kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import grpc
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort import __version__
from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions, bind_error
from cohort.verifiers import convert
from cohort.verifiers.base import InvalidRequest, Verifier, VerifyContext
from cohort.verifiers.hosting.host import QueueFull, ServerLimits, VerifierHost
from cohort.verifiers.hosting.metrics import ServerMetrics
from cohort.verifiers.hosting.procs import ScoringProcesses, gil_bound

__all__ = ["ERRORS", "ServerLimits", "VerifierServicer", "serve"]

log = logging.getLogger("cohort.verifiers.hosting.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["VerifierService"].full_name
ERRORS = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,  # can never be scored: the client does not retry
    convert.MalformedMessage: grpc.StatusCode.INVALID_ARGUMENT,
    QueueFull: grpc.StatusCode.RESOURCE_EXHAUSTED,  # retry with backoff
}
"""The host's domain errors and their status codes (:mod:`cohort.rpc.status` applies them)."""


class VerifierServicer(pb_grpc.VerifierServiceServicer):
    """Converts messages; the host does the rest."""

    def __init__(self, host: VerifierHost, max_message_bytes: int) -> None:
        self.host = host
        self.max_message_bytes = max_message_bytes

    async def VerifyGroup(self, request, context):
        results = await self.host.score([convert.group_from_pb(request)], _context(context))
        return convert.group_result_to_pb(results[0])

    async def BatchVerifyGroups(self, request, context):
        results = await self.host.score([convert.group_from_pb(r) for r in request.requests], _context(context))
        return convert.batch_result_to_pb(results)

    async def ListVerifiers(self, request, context):
        lim = self.host.limits
        limits = pb.ServerLimits(
            max_groups_per_batch=lim.max_groups_per_batch,
            max_rollouts_per_group=lim.max_rollouts_per_group,
            max_message_bytes=self.max_message_bytes,
            max_queued_groups=lim.max_queued_groups,
        )
        limits.max_rollout_timeout.FromNanoseconds(int(lim.max_rollout_timeout_s * 1e9))
        infos = [
            pb.VerifierInfo(name=name, version=v.version, description=v.description, reference_kinds=list(v.reference_kinds))
            for name, v in sorted(self.host.verifiers.items())
        ]
        return pb.ListVerifiersResponse(verifiers=infos, limits=limits, server_version=f"cohort-rl {__version__}")


def _context(context: grpc.aio.ServicerContext) -> VerifyContext:
    """The call's deadline as the verifiers see it."""
    remaining = context.time_remaining()
    return VerifyContext(deadline=None if remaining is None else time.monotonic() + remaining)


async def serve(
    verifiers: dict[str, Verifier],
    options: RuntimeOptions,
    limits: ServerLimits = ServerLimits(),
    metrics_port: int | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    metrics = ServerMetrics()
    if metrics_port is not None:
        try:
            bound = metrics.start_http(options.host, metrics_port)
        except OSError as exc:
            raise bind_error(f"{options.host}:{metrics_port} (--metrics-port)", exc) from None
        log.info("metrics on http://%s:%d/metrics", options.host, bound)
        if options.port_file is not None:
            options.port_file.with_name(options.port_file.name + ".metrics").write_text(str(bound))
    runtime = GrpcRuntime(options)
    procs = None
    if limits.scoring_procs > 0 and any(gil_bound(v) for v in verifiers.values()):
        # started before health turns SERVING, so the first call finds them ready
        procs = await asyncio.to_thread(ScoringProcesses, verifiers, limits, limits.scoring_procs)
        log.info("%d scoring processes for %s", limits.scoring_procs, ", ".join(procs.names))
    host = VerifierHost(verifiers, limits, metrics, procs)
    runtime.add_service(SERVICE_NAME, pb_grpc.add_VerifierServiceServicer_to_server,
                        VerifierServicer(host, options.max_message_bytes), errors=ERRORS, observe=metrics.count_request)
    stop = host.close  # the scoring processes with it

    loading = list(verifiers.values())
    try:
        # a verifier that still loads something slow (math's worker pool) keeps health NOT_SERVING until a
        # call can be answered: SERVING means ready (Kubernetes' readiness probe, the conformance kit)
        await runtime.start(service_names=[SERVICE_NAME], health_names=sorted(verifiers),
                            serving=not any(not v.ready() for v in loading))
    except BaseException:  # e.g. the port is taken: do not leave the scoring processes behind
        stop()
        raise
    watchers = [asyncio.ensure_future(watch_worker_pools(runtime)), asyncio.ensure_future(watch_ready(runtime, loading))]
    try:
        await runtime.serve_until_signal(on_stop=stop)
    finally:
        for watcher in watchers:
            watcher.cancel()


async def watch_ready(runtime: GrpcRuntime, loading: Sequence[Verifier], every_s: float = 0.05) -> None:
    """Health turns SERVING once every verifier is ready (``ready()``, True by default: math's pool starts later):
    until then it started NOT_SERVING (see :func:`serve`)."""
    if all(v.ready() for v in loading):
        return
    while not all(v.ready() for v in loading):
        await asyncio.sleep(every_s)
    await runtime.mark_serving()


async def watch_worker_pools(runtime: GrpcRuntime, every_s: float = 0.5) -> None:
    """Health turns NOT_SERVING once a worker pool of this process gives up starting workers
    (:data:`verifiers.hosting.workers.MAX_START_FAILURES`): its verifier answers every rollout VERIFIER_ERROR."""
    from cohort.verifiers.hosting.workers import broken_pools

    while not (broken := broken_pools()):
        await asyncio.sleep(every_s)
    await runtime.mark_not_serving("; ".join(reason for _, reason in broken))
