"""The verifier server: hosts any registered verifiers behind ``grpo.verifier.v1.VerifierService``.

The servicer only converts messages and maps the host's domain errors to status codes; validation
and scoring are :class:`~verifiers.hosting.host.VerifierHost`'s (``Verifier.verify_group`` on plain
dataclasses, in a bounded thread pool or, for GIL-bound verifiers with ``--scoring-procs``, in the
scoring processes of :mod:`verifiers.hosting.procs`).

Request-level errors (documented limits, see :class:`~verifiers.hosting.host.Limits`):

==============================================  ====================
unknown verifier, empty group, duplicate index,  INVALID_ARGUMENT
too many groups / rollouts,
missing or wrong kind of reference, bad option
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
from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions, abort_draining, bind_error
from cohort.verifiers import convert
from cohort.verifiers.base import GroupResult, InvalidRequest, Verifier, VerifyContext
from cohort.verifiers.hosting.host import ServerLimits, QueueFull, VerifierHost
from cohort.verifiers.hosting.metrics import ServerMetrics
from cohort.verifiers.hosting.procs import ScoringProcesses, gil_bound

__all__ = ["ServerLimits", "VerifierServicer", "add_to_server", "serve", "status_code"]

log = logging.getLogger("cohort.verifiers.hosting.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["VerifierService"].full_name


def status_code(exc: Exception) -> grpc.StatusCode:
    """The status code of a request the host refused (its domain error)."""
    return grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(exc, QueueFull) else grpc.StatusCode.INVALID_ARGUMENT


class VerifierServicer(pb_grpc.VerifierServiceServicer):
    """Converts messages and maps errors to status codes; nothing else."""

    def __init__(self, host: VerifierHost, runtime: GrpcRuntime, metrics: ServerMetrics, procs: ScoringProcesses | None = None) -> None:
        self.host = host
        self.runtime = runtime
        self.metrics = metrics
        self.procs = procs

    async def _score(self, method: str, requests: Sequence[pb.VerifyGroupRequest], context,
                     payload: bytes | None = None) -> list[GroupResult] | bytes | None:
        """The domain results; or, when the scoring processes take the batch (its wire ``payload``
        given), its serialized reply: they decode and encode it themselves (see :mod:`verifiers.hosting.procs`)."""
        if self.runtime.draining:
            self.metrics.count_request(method, "UNAVAILABLE")
            await abort_draining(context)
        start = time.perf_counter()
        remaining = context.time_remaining()
        ctx = VerifyContext(deadline=None if remaining is None else time.monotonic() + remaining)
        with self.runtime.track(), self.metrics.track_in_flight():
            try:
                if payload is not None and self.procs is not None and self.procs.handles([r.verifier for r in requests]):
                    with self.host.admitted(len(requests)):
                        results, counts = await self.procs.score(payload, len(requests), ctx.deadline)
                    self.metrics.observe_counts(counts)
                else:
                    results = await self.host.score([convert.group_from_pb(r) for r in requests], ctx)
            except (convert.MalformedMessage, InvalidRequest, QueueFull) as exc:
                code, message = status_code(exc), str(exc)
            else:
                self.metrics.count_request(method, "OK", time.perf_counter() - start)
                return results
        self.metrics.count_request(method, code.name, time.perf_counter() - start)
        await context.abort(code, message)
        return None

    async def VerifyGroup(self, request, context):
        # with scoring processes, one group travels as a batch of one (the same hard timeouts as a batch)
        takes = self.procs is not None and self.procs.handles([request.verifier])
        payload = pb.BatchVerifyGroupsRequest(requests=[request]).SerializeToString() if takes else None
        results = await self._score("VerifyGroup", [request], context, payload)
        if isinstance(results, bytes):
            return pb.BatchVerifyGroupsResponse.FromString(results).responses[0]
        return convert.group_result_to_pb(results[0])

    async def BatchVerifyGroups(self, payload: bytes, context) -> pb.BatchVerifyGroupsResponse | bytes:
        """Takes the request's wire bytes (see :func:`add_to_server`); may answer with the reply's."""
        try:
            request = convert.batch_from_bytes(payload)
        except convert.MalformedMessage as exc:
            self.metrics.count_request("BatchVerifyGroups", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not request.requests:
            self.metrics.count_request("BatchVerifyGroups", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "BatchVerifyGroupsRequest.requests is empty")
        results = await self._score("BatchVerifyGroups", request.requests, context, payload)
        if isinstance(results, bytes):  # joined by the scoring processes: forwarded as they are
            return results
        return convert.batch_result_to_pb(results)

    async def ListVerifiers(self, request, context):
        lim = self.host.limits
        limits = pb.ServerLimits(
            max_groups_per_batch=lim.max_groups_per_batch,
            max_rollouts_per_group=lim.max_rollouts_per_group,
            max_message_bytes=self.runtime.options.max_message_bytes,
            max_queued_groups=lim.max_queued_groups,
        )
        limits.max_rollout_timeout.FromNanoseconds(int(lim.max_rollout_timeout_s * 1e9))
        infos = [
            pb.VerifierInfo(name=name, version=v.version, description=v.description, reference_kinds=list(v.reference_kinds))
            for name, v in sorted(self.host.verifiers.items())
        ]
        return pb.ListVerifiersResponse(verifiers=infos, limits=limits, server_version=f"cohort-rl {__version__}")


def add_to_server(servicer: VerifierServicer, server: grpc.aio.Server) -> None:
    """The generated ``add_VerifierServiceServicer_to_server``, except that BatchVerifyGroups gets its
    request as wire bytes and may answer with wire bytes: the scoring processes decode their chunks of
    the request and encode their replies, which the server joins and forwards without parsing them."""
    handlers = {
        "BatchVerifyGroups": grpc.unary_unary_rpc_method_handler(
            servicer.BatchVerifyGroups, request_deserializer=None, response_serializer=_serialize_reply),
        "VerifyGroup": grpc.unary_unary_rpc_method_handler(
            servicer.VerifyGroup, pb.VerifyGroupRequest.FromString, pb.VerifyGroupResponse.SerializeToString),
        "ListVerifiers": grpc.unary_unary_rpc_method_handler(
            servicer.ListVerifiers, pb.ListVerifiersRequest.FromString, pb.ListVerifiersResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _serialize_reply(reply: pb.BatchVerifyGroupsResponse | bytes) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


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
    host = VerifierHost(verifiers, limits, metrics)
    procs = None
    if limits.scoring_procs > 0 and any(gil_bound(v) for v in verifiers.values()):
        # started before health turns SERVING, so the first call finds them ready
        procs = await asyncio.to_thread(ScoringProcesses, verifiers, limits, limits.scoring_procs)
        log.info("%d scoring processes for %s", limits.scoring_procs, ", ".join(procs.names))
    add_to_server(VerifierServicer(host, runtime, metrics, procs), runtime.server)

    def stop() -> None:
        host.close()
        if procs is not None:
            procs.close()

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
