"""The verifier server: hosts any registered verifiers behind ``grpo.verifier.v1.VerifierService``.

The servicer only validates and converts messages; the scoring itself is
``Verifier.verify_group`` on plain dataclasses, run in a bounded thread pool
(each verifier owns its hard deadlines, e.g. killable worker processes).

Request-level errors (documented limits, see :class:`Limits`):

==============================================  ====================
unknown verifier, empty group, duplicate index,  INVALID_ARGUMENT
too many groups / rollouts, completion too long,
missing or wrong kind of reference, bad option
message larger than ``max_message_bytes``        RESOURCE_EXHAUSTED (by gRPC)
queue full (``max_queued_groups``)               RESOURCE_EXHAUSTED
draining after SIGTERM                           UNAVAILABLE
deadline passed                                  DEADLINE_EXCEEDED
==============================================  ====================

A verifier that raises or returns the wrong rollouts yields in-band VERIFIER_ERROR for
the affected rollouts: a bug in a verifier is never a reward of 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import grpc
from google.protobuf.message import DecodeError
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort import __version__
from cohort.rpc.runtime import GrpcRuntime, RuntimeOptions, abort_draining, bind_error
from cohort.verifiers import convert
from cohort.verifiers.base import (
    GroupRequest,
    GroupResult,
    InvalidRequest,
    RolloutResult,
    RolloutStatus,
    Verifier,
    VerifyContext,
    step_problem,
)
from cohort.verifiers.metrics import ServerMetrics
from cohort.verifiers.procs import ScoringProcesses, gil_bound

log = logging.getLogger("cohort.verifiers.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["VerifierService"].full_name


@dataclass(frozen=True)
class Limits:
    max_groups_per_batch: int = 4096
    max_rollouts_per_group: int = 1024
    max_completion_chars: int = 1_000_000
    max_queued_groups: int = 16384
    max_rollout_timeout_s: float = 60.0
    workers: int = 16
    """Threads running ``verify_group``; a batch is split into at most this many chunks."""
    scoring_procs: int = 0
    """Worker processes for GIL-bound verifiers (``max_concurrency = 1``); 0 scores them in threads."""


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Scorer:
    """Validates requests and runs verifiers; knows nothing about gRPC messages."""

    def __init__(self, verifiers: dict[str, Verifier], limits: Limits, metrics: ServerMetrics | None = None) -> None:
        self.verifiers = verifiers
        self.limits = limits
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="verify")
        self.queued = 0

    def validate(self, group: GroupRequest) -> None:
        lim = self.limits
        verifier = self.verifiers.get(group.verifier)
        if verifier is None:
            served = ", ".join(sorted(self.verifiers))
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"unknown verifier {group.verifier!r}; served here: {served}")
        if not group.rollouts:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"group {group.group_id!r} has no rollouts")
        if len(group.rollouts) > lim.max_rollouts_per_group:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"group {group.group_id!r} has {len(group.rollouts)} rollouts; the limit is {lim.max_rollouts_per_group}",
            )
        # Checked in bulk (every rollout of every batch passes here); only a group that fails is walked,
        # to name its first problem in rollout order.
        indexes = [r.index for r in group.rollouts]
        if len(set(indexes)) != len(indexes) or max(map(len, [r.completion for r in group.rollouts])) > lim.max_completion_chars:
            seen: set[int] = set()
            for r in group.rollouts:
                if r.index in seen:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"group {group.group_id!r}: duplicate rollout index {r.index}")
                seen.add(r.index)
                if len(r.completion) > lim.max_completion_chars:
                    raise RequestError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"group {group.group_id!r} rollout {r.index}: completion of {len(r.completion)} characters; "
                        f"the limit is {lim.max_completion_chars}",
                    )
        kinds = tuple(verifier.reference_kinds)
        if kinds and group.reference.kind not in kinds:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"group {group.group_id!r}: verifier {group.verifier!r} needs reference.{' or reference.'.join(kinds)}, "
                f"got {group.reference.kind}",
            )

    def admit(self, n_groups: int) -> None:
        if n_groups > self.limits.max_groups_per_batch:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{n_groups} groups in one call; the limit is {self.limits.max_groups_per_batch}",
            )
        if self.queued + n_groups > self.limits.max_queued_groups:
            raise RequestError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"queue full ({self.queued} groups queued, limit {self.limits.max_queued_groups}); retry with backoff",
            )

    def _clamp(self, group: GroupRequest) -> GroupRequest:
        t = group.rollout_timeout_s
        if t is not None and t > self.limits.max_rollout_timeout_s:
            return replace(group, rollout_timeout_s=self.limits.max_rollout_timeout_s)
        return group

    def _score_one(self, group: GroupRequest, ctx: VerifyContext) -> GroupResult:
        verifier = self.verifiers[group.verifier]
        start = time.perf_counter()
        if ctx.expired():
            results = [RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_TIMEOUT, "call deadline passed before scoring") for r in group.rollouts]
        else:
            try:
                results = list(verifier.verify_group(self._clamp(group), ctx))
            except InvalidRequest as exc:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            except Exception as exc:  # a verifier bug: in-band VERIFIER_ERROR, logged, never reward 0
                log.exception("verifier %s failed on group %r", group.verifier, group.group_id)
                results = [RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR, f"verifier raised {exc!r}") for r in group.rollouts]
        results = _match_results(group, results)
        if any(r.steps for r in results):
            results = _checked_steps(group, results)
        if self.metrics is not None:
            self.metrics.observe_results(group.verifier, results)
        return GroupResult(group.group_id, group.verifier, verifier.version, tuple(results), time.perf_counter() - start)

    def score_now(self, groups: Sequence[GroupRequest], ctx: VerifyContext) -> list[GroupResult]:
        """Score validated groups in this thread, one after the other."""
        return [self._score_one(g, ctx) for g in groups]

    @contextlib.contextmanager
    def admitted(self, n_groups: int) -> Iterator[None]:
        """Hold ``n_groups`` places in the bounded queue (RequestError when it is full)."""
        self.admit(n_groups)
        self.queued += n_groups
        if self.metrics is not None:
            self.metrics.queue_depth.set(self.queued)
        try:
            yield
        finally:
            self.queued -= n_groups
            if self.metrics is not None:
                self.metrics.queue_depth.set(self.queued)

    async def score(self, groups: Sequence[GroupRequest], ctx: VerifyContext) -> list[GroupResult]:
        """Score groups concurrently (at most ``workers`` chunks); results in request order."""
        for g in groups:
            self.validate(g)
        with self.admitted(len(groups)):
            loop = asyncio.get_running_loop()
            # Verifiers bound by the GIL (pure Python, no waiting) say so with `max_concurrency = 1`:
            # splitting their work over threads only adds contention.
            caps = [getattr(self.verifiers[g.verifier], "max_concurrency", None) or self.limits.workers for g in groups]
            n_chunks = max(1, min(len(groups), self.limits.workers, max(caps)))
            size = -(-len(groups) // n_chunks)
            chunks = [groups[i : i + size] for i in range(0, len(groups), size)]
            futures = [loop.run_in_executor(self.executor, self.score_now, chunk, ctx) for chunk in chunks]
            done = await asyncio.gather(*futures)
            return [r for chunk in done for r in chunk]

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        for verifier in self.verifiers.values():
            close = getattr(verifier, "close", None)
            if callable(close):
                close()


def _match_results(group: GroupRequest, results: list[RolloutResult]) -> list[RolloutResult]:
    """One result per rollout, in rollout order; anything missing or unknown becomes VERIFIER_ERROR."""
    if [r.index for r in results] == [r.index for r in group.rollouts]:
        matched = results
    else:
        by_index: dict[int, RolloutResult] = {}
        for r in results:
            by_index.setdefault(r.index, r)
        matched = [
            by_index.get(ro.index) or RolloutResult.unusable(ro.index, RolloutStatus.VERIFIER_ERROR, "verifier returned no result for this rollout")
            for ro in group.rollouts
        ]
    return matched


def _checked_steps(group: GroupRequest, results: list[RolloutResult]) -> list[RolloutResult]:
    """Step rewards as the contract has them: malformed ones make the rollout VERIFIER_ERROR (a verifier
    bug, never a reward); the steps of a result that is not OK are dropped (they mean nothing there)."""
    out = []
    for rollout, r in zip(group.rollouts, results):
        if r.steps and r.status is not RolloutStatus.OK:
            r = replace(r, steps=())
        elif r.steps and (problem := step_problem(r.steps, rollout.completion)) is not None:
            log.error("verifier %s, group %r rollout %d: malformed step rewards: %s", group.verifier, group.group_id,
                      r.index, problem)
            r = RolloutResult.unusable(r.index, RolloutStatus.VERIFIER_ERROR, f"verifier sent malformed step rewards: {problem}")
        out.append(r)
    return out


class VerifierServicer(pb_grpc.VerifierServiceServicer):
    """Converts messages and maps errors to status codes; nothing else."""

    def __init__(self, scorer: Scorer, runtime: GrpcRuntime, metrics: ServerMetrics, procs: ScoringProcesses | None = None) -> None:
        self.scorer = scorer
        self.runtime = runtime
        self.metrics = metrics
        self.procs = procs

    async def _score(self, method: str, requests: Sequence[pb.VerifyGroupRequest], context, *, payload: bytes | None = None,
                     columns: bool = False):
        """Domain results; or, given the request's wire ``payload``, the reply as bytes when scoring processes take it."""
        if self.runtime.draining:
            self.metrics.count_request(method, "UNAVAILABLE")
            await abort_draining(context)
        start = time.perf_counter()
        remaining = context.time_remaining()
        ctx = VerifyContext(deadline=None if remaining is None else time.monotonic() + remaining)
        with self.runtime.track(), self.metrics.track_in_flight():
            try:
                if payload is not None and self.procs is not None and self.procs.handles([r.verifier for r in requests]):
                    with self.scorer.admitted(len(requests)):
                        results, tally = await self.procs.score(payload, requests, ctx.deadline, columns)
                    self.metrics.observe_tally(tally)
                else:
                    results = await self.scorer.score([convert.group_from_pb(r) for r in requests], ctx)
            except convert.MalformedMessage as exc:
                code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
            except RequestError as exc:
                code, message = exc.code, str(exc)
            else:
                self.metrics.count_request(method, "OK", time.perf_counter() - start)
                return results
        self.metrics.count_request(method, code.name, time.perf_counter() - start)
        await context.abort(code, message)
        return None

    async def VerifyGroup(self, request, context):
        # with scoring processes, one group travels as a batch of one (same hard timeouts as a batch)
        takes = self.procs is not None and self.procs.handles([request.verifier])
        payload = pb.BatchVerifyGroupsRequest(requests=[request]).SerializeToString() if takes else None
        results = await self._score("VerifyGroup", [request], context, payload=payload)
        if isinstance(results, bytes):
            return pb.BatchVerifyGroupsResponse.FromString(results).responses[0]
        return convert.group_result_to_pb(results[0])

    async def BatchVerifyGroups(self, payload: bytes, context) -> pb.BatchVerifyGroupsResponse | bytes:
        """Takes the request's wire bytes (see :func:`add_to_server`); may answer with the reply's."""
        try:
            request = pb.BatchVerifyGroupsRequest.FromString(payload)
        except DecodeError:
            self.metrics.count_request("BatchVerifyGroups", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "BatchVerifyGroupsRequest does not parse")
        if not request.requests:
            self.metrics.count_request("BatchVerifyGroups", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "BatchVerifyGroupsRequest.requests is empty")
        columns = request.result_layout == pb.RESULT_LAYOUT_COLUMNS
        results = await self._score("BatchVerifyGroups", request.requests, context, payload=payload, columns=columns)
        if isinstance(results, bytes):  # joined by the scoring processes: forwarded as is
            return results
        return convert.batch_result_to_pb(results, columns)

    async def ListVerifiers(self, request, context):
        lim = self.scorer.limits
        limits = pb.ServerLimits(
            max_groups_per_batch=lim.max_groups_per_batch,
            max_rollouts_per_group=lim.max_rollouts_per_group,
            max_message_bytes=self.runtime.options.max_message_bytes,
            max_queued_groups=lim.max_queued_groups,
        )
        limits.max_rollout_timeout.FromNanoseconds(int(lim.max_rollout_timeout_s * 1e9))
        infos = [
            pb.VerifierInfo(name=name, version=v.version, description=v.description, reference_kinds=list(v.reference_kinds))
            for name, v in sorted(self.scorer.verifiers.items())
        ]
        return pb.ListVerifiersResponse(verifiers=infos, limits=limits, server_version=f"cohort-rl {__version__}")


def add_to_server(servicer: VerifierServicer, server: grpc.aio.Server) -> None:
    """The generated ``add_VerifierServiceServicer_to_server``, except that BatchVerifyGroups gets its
    request as wire bytes and may answer with wire bytes: the scoring processes work on serialized
    chunks, so the server forwards their joined replies instead of parsing and re-serializing them."""
    handlers = {
        "BatchVerifyGroups": grpc.unary_unary_rpc_method_handler(
            servicer.BatchVerifyGroups, request_deserializer=None, response_serializer=_serialize_reply
        ),
        "VerifyGroup": grpc.unary_unary_rpc_method_handler(
            servicer.VerifyGroup, pb.VerifyGroupRequest.FromString, pb.VerifyGroupResponse.SerializeToString
        ),
        "ListVerifiers": grpc.unary_unary_rpc_method_handler(
            servicer.ListVerifiers, pb.ListVerifiersRequest.FromString, pb.ListVerifiersResponse.SerializeToString
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def _serialize_reply(reply: pb.BatchVerifyGroupsResponse | bytes) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


async def serve(
    verifiers: dict[str, Verifier],
    options: RuntimeOptions,
    limits: Limits = Limits(),
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
    scorer = Scorer(verifiers, limits, metrics)
    procs = None
    if limits.scoring_procs > 0 and any(gil_bound(v) for v in verifiers.values()):
        # started before health turns SERVING, so the first call finds them ready
        procs = await asyncio.to_thread(ScoringProcesses, verifiers, limits, limits.scoring_procs)
        log.info("%d scoring processes for %s", limits.scoring_procs, ", ".join(procs.names))
    add_to_server(VerifierServicer(scorer, runtime, metrics, procs), runtime.server)

    def stop() -> None:
        scorer.close()
        if procs is not None:
            procs.close()

    try:
        await runtime.start(service_names=[SERVICE_NAME], health_names=sorted(verifiers))
    except BaseException:  # e.g. the port is taken: do not leave the scoring processes behind
        stop()
        raise
    await runtime.serve_until_signal(on_stop=stop)
