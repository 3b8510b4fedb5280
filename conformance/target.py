"""The server under test, seen over the wire only: channel, stubs, limits and helpers shared by checks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.conformance.cases import Case
from cohort.rpc.tls import ClientTls, channel

CLIENT_MESSAGE_BYTES = 256 * 1024 * 1024

# (index, status, verdict, reward, components): what must not change between two identical calls.
Outcome = tuple[int, str, str, float, tuple[tuple[str, float], ...], tuple[tuple[int, float], ...]]  # ..., components, steps


class CheckFailed(Exception):
    """A rule is broken; the message says how, in one or two lines."""


class CheckSkipped(Exception):
    """A rule cannot be checked here (e.g. SIGTERM without --server-cmd)."""


class EndpointUnreachable(RuntimeError):
    pass


class VerifierNotServed(RuntimeError):
    """ListVerifiers answers, and the verifier under test is not among the names it lists."""


@dataclass
class KitOptions:
    call_timeout_s: float = 30.0
    """Deadline of ordinary calls made by the kit."""
    first_call_timeout_s: float = 15.0
    """Deadline of each method's first call (the deadline rule's own budget: 5 s + ``recovery_s``). A
    server that leaves it unanswered is reported hung at once, and every later rule that needs an
    answer fails without waiting again: a hung server gets its verdict in about this time."""
    short_deadline_s: float = 0.05
    """The deadline of the deadline rule (50 ms)."""
    recovery_s: float = 10.0
    """After the short-deadline calls, the server must answer a normal call within this time."""
    concurrent_batches: int = 16
    grace_s: float = 30.0
    """After SIGTERM the server must exit by itself within this time."""
    startup_s: float = 60.0
    """How long a server started with --server-cmd may take to turn SERVING."""
    tls: ClientTls | None = None
    """Connect with TLS (mutual TLS with a client certificate); plaintext when None."""


def outcome(result: pb.RolloutResult) -> Outcome:
    return (
        result.index,
        pb.RolloutStatus.Name(result.status),
        pb.Verdict.Name(result.verdict),
        result.reward,
        tuple(sorted(result.reward_components.items())),
        tuple((s.end, s.reward) for s in result.steps),
    )


def describe(o: Outcome) -> str:
    _, status, verdict, reward, components, steps = o
    status = status.removeprefix("ROLLOUT_STATUS_")
    if status != "OK":
        return status
    comps = ", ".join(f"{k}={v:g}" for k, v in components)
    return (f"{verdict.removeprefix('VERDICT_')} reward={reward!r}" + (f" ({comps})" if comps else "")
            + (f" steps={list(steps)}" if steps else ""))


@dataclass
class Target:
    endpoint: str
    verifier: str
    cases: Sequence[Case]
    options: KitOptions = field(default_factory=KitOptions)
    limits: pb.ServerLimits | None = None
    process: object | None = None  # a runner.ServerProcess when the kit started the server
    _baseline: dict[str, dict[int, Outcome]] | None = None
    hung: str | None = None
    """Set when a method's first call went unanswered; later calls to that service fail at once with it."""
    hung_service: str | None = None
    served: tuple[str, ...] | None = None
    """The verifier names ListVerifiers gave (None when it did not answer)."""

    def __post_init__(self) -> None:
        opts = [
            ("grpc.max_receive_message_length", CLIENT_MESSAGE_BYTES),
            ("grpc.max_send_message_length", CLIENT_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
        ]
        self.channel = channel(self.endpoint, self.options.tls, opts)
        self.stub = self.guarded(pb_grpc.VerifierServiceStub(self.channel))
        self._answered: set[tuple[str, str]] = set()

    def guarded(self, stub: object) -> _GuardedStub:
        """``stub`` with hang detection: see :attr:`KitOptions.first_call_timeout_s`."""
        return _GuardedStub(stub, self)

    def close(self) -> None:
        self.channel.close()

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            from cohort.rpc.diagnose import explain

            try:  # one call, for gRPC's reason of the failure, which names the cause
                pb_grpc.VerifierServiceStub(self.channel).ListVerifiers(pb.ListVerifiersRequest(), timeout=2.0)
                why = "it answers now (it was starting?)"
            except grpc.RpcError as exc:
                why = explain(self.endpoint, exc.details() or "", self.options.tls)
            raise EndpointUnreachable(f"cannot connect to {self.endpoint} within {timeout_s:g}s: {why}") from None

    def fetch_limits(self) -> None:
        """The advertised limits, if ListVerifiers answers (the list_verifiers rule judges it)."""
        try:
            resp = self.stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=self.options.call_timeout_s)
        except (grpc.RpcError, CheckFailed):  # a hang is recorded in self.hung and reported by the rules
            return
        self.served = tuple(v.name for v in resp.verifiers)
        if resp.HasField("limits"):
            self.limits = resp.limits

    # ---- requests ----------------------------------------------------------------------------

    def batch(self, suffix: str = "", reverse: bool = False) -> pb.BatchVerifyGroupsRequest:
        """Every case in one batch; ``suffix`` renames group ids, ``reverse`` flips the case order."""
        requests = []
        for case in reversed(self.cases) if reverse else self.cases:
            req = pb.VerifyGroupRequest()
            req.CopyFrom(case.request)
            req.group_id += suffix
            requests.append(req)
        return pb.BatchVerifyGroupsRequest(requests=requests)

    def repeated_batch(self, n_groups: int, tag: str) -> pb.BatchVerifyGroupsRequest:
        """``n_groups`` groups cycling through the cases, ids ``<case>#<tag>.<k>`` (capped by the limits)."""
        n_groups = max(1, min(n_groups, self.max_groups()))
        requests = []
        for k in range(n_groups):
            req = pb.VerifyGroupRequest()
            req.CopyFrom(self.cases[k % len(self.cases)].request)
            req.group_id = f"{req.group_id}#{tag}.{k}"
            requests.append(req)
        return pb.BatchVerifyGroupsRequest(requests=requests)

    def max_groups(self) -> int:
        advertised = self.limits.max_groups_per_batch if self.limits is not None else 0
        return advertised or 64

    def max_queued(self) -> int:
        """Groups the server lets wait at once (advertised ``max_queued_groups``; 0: it does not say)."""
        return self.limits.max_queued_groups if self.limits is not None else 0

    def call_batch(self, request: pb.BatchVerifyGroupsRequest, timeout_s: float | None = None) -> pb.BatchVerifyGroupsResponse:
        return self.stub.BatchVerifyGroups(request, timeout=timeout_s or self.options.call_timeout_s)

    # ---- the serial reference ----------------------------------------------------------------

    def baseline(self) -> dict[str, dict[int, Outcome]]:
        """Outcomes of one serial batch of all cases, by case group id and rollout index."""
        if self._baseline is None:
            response = call(lambda: self.call_batch(self.batch()), "the batch of all cases")
            self._baseline = {}
            for req, resp in zip(self.batch().requests, response.responses):
                self._baseline[req.group_id] = {r.index: outcome(r) for r in resp.results}
        return self._baseline

    def compare_to_baseline(
        self, request: pb.BatchVerifyGroupsRequest, response: pb.BatchVerifyGroupsResponse, how: str, limit: int = 3,
        allow_timeout: bool = False,
    ) -> list[str]:
        """Differences between a response and the serial baseline (groups matched by position).

        ``allow_timeout``: an in-band VERIFIER_TIMEOUT is acceptable (the call's own deadline was short).
        """
        base = self.baseline()
        problems: list[str] = []
        if len(response.responses) != len(request.requests):
            return [f"{how}: {len(response.responses)} responses for {len(request.requests)} groups"]
        for req, resp in zip(request.requests, response.responses):
            case_id = req.group_id.split("#", 1)[0]
            expected = base.get(case_id, {})
            if resp.group_id != req.group_id:
                problems.append(f"{how}: group {req.group_id!r} answered as {resp.group_id!r}")
                continue
            got = {r.index: outcome(r) for r in resp.results}
            for index, want in expected.items():
                have = got.get(index)
                if allow_timeout and have is not None and have[1] == "ROLLOUT_STATUS_VERIFIER_TIMEOUT":
                    continue
                if have != want:
                    problems.append(
                        f"{how}: group {req.group_id!r} rollout {index}: "
                        f"{'missing' if have is None else describe(have)}, serially {describe(want)}"
                    )
            if len(problems) >= limit:
                break
        return problems[:limit]


class DefaultDeadline(grpc.StreamStreamClientInterceptor):
    """Gives a deadline to streaming calls made without one (grpc_reflection's descriptor database)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        if client_call_details.timeout is None:
            client_call_details = client_call_details._replace(timeout=self.seconds)
        return continuation(client_call_details, request_iterator)


class _GuardedStub:
    """A stub whose methods detect a hung server on their first call and then stop waiting on it."""

    def __init__(self, stub: object, target: Target) -> None:
        self._stub, self._target = stub, target

    def __getattr__(self, name: str) -> _GuardedMethod:
        return _GuardedMethod(getattr(self._stub, name), name, self._target, type(self._stub).__name__)


class _GuardedMethod:
    def __init__(self, method, name: str, target: Target, service: str) -> None:
        self._method, self._name, self._target, self._service = method, name, target, service

    def _check(self) -> None:
        if self._target.hung is not None and self._target.hung_service == self._service:
            raise CheckFailed(f"not tried: {self._target.hung}")

    def __call__(self, request, timeout: float | None = None, **kwargs):
        self._check()
        t = self._target
        first = (self._service, self._name) not in t._answered
        limit = t.options.first_call_timeout_s
        if first and (timeout is None or timeout > limit):
            timeout = limit
        try:
            response = self._method(request, timeout=timeout, **kwargs)
        except grpc.RpcError as exc:
            if first and exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None and timeout >= limit:
                t.hung = f"the server hangs: its first {self._name} call got no answer within {timeout:g}s"
                t.hung_service = self._service
                raise CheckFailed(t.hung) from None
            raise
        t._answered.add((self._service, self._name))
        return response

    def future(self, request, **kwargs):
        self._check()
        return self._method.future(request, **kwargs)


def call(fn, what: str):
    """Run one RPC; an unexpected status fails the check with the code and message."""
    try:
        return fn()
    except grpc.RpcError as exc:
        raise CheckFailed(f"{what} failed: {exc.code().name}: {exc.details()}") from None


def wait_futures(futures: Sequence[grpc.Future]) -> list[tuple[object | None, grpc.RpcError | None, float]]:
    """(response, error, completion time) for each future, in order."""
    out: list[tuple[object | None, grpc.RpcError | None, float]] = [None] * len(futures)  # type: ignore[list-item]
    pending = dict(enumerate(futures))
    while pending:
        for i, fut in list(pending.items()):
            if fut.done():
                try:
                    out[i] = (fut.result(), None, time.monotonic())
                except grpc.RpcError as exc:
                    out[i] = (None, exc, time.monotonic())
                del pending[i]
        if pending:
            time.sleep(0.001)
    return out
