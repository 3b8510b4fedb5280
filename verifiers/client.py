"""Async client of ``grpo.verifier.v1``: what the trainer (and ``cohort verify``) use to score.

- One ``BatchVerifyGroups`` per batch per verifier (split only above the server's advertised
  ``max_groups_per_batch``).
- Several endpoints per verifier, tried by the one retry/failover policy of every Cohort client
  (:mod:`cohort.rpc.retry`): round robin across calls, failover to the next endpoint on
  UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED / INTERNAL / UNKNOWN, exponential backoff
  once every endpoint has been tried, and a timeout per attempt within the call's deadline (a frozen
  replica costs one attempt, not the deadline). Scoring is pure, so retries are safe.
- Every answer is checked against the request it answers (group ids in order, one result per
  rollout, indexes echoed); a mismatch makes those rollouts VERIFIER_ERROR.
- When every attempt fails, the rollouts come back DEPENDENCY_UNAVAILABLE: an infrastructure
  failure is never a reward of 0. INVALID_ARGUMENT is a bug in the request and raises.
- TLS per verifier (``WeightedVerifier.tls``, see :mod:`cohort.rpc.tls`); plaintext when unset.
- :meth:`VerifierClient.score`, the one scoring call of the trainer, ``cohort verify`` and the adapters, routes
  each row (``records.route``), rides out an outage as the caller chose (mask, wait or drop) and combines the
  verifiers with weights (:mod:`cohort.verifiers.combine`); blocking callers: :mod:`cohort.verifiers.blocking`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import grpc
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2 as pb
from cohort.proto.grpo.verifier.v1 import verifier_service_pb2_grpc as pb_grpc

from cohort.rpc.diagnose import explain
from cohort.rpc.retry import Exhausted, Failover, RequestRejected, RetryPolicy, call_with_failover, short_error
from cohort.rpc.tls import ClientTls, aio_channel
from cohort.verifiers import convert
from cohort.verifiers.base import GroupRequest, GroupResult, RolloutResult, RolloutStatus, checked_steps
from cohort.verifiers.combine import ScoredRollout, combine
from cohort.verifiers.records import Record, group_requests, route

log = logging.getLogger("cohort.verifiers.client")


class VerifierRequestError(ValueError):
    """The server rejected the request itself (INVALID_ARGUMENT etc.): a bug, not an outage."""


class HandshakeError(RuntimeError):
    pass


class VerifierUnavailable(RuntimeError):
    """Every attempt of one call to a verifier failed: an outage, never a verdict on the rollouts."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"verifier {name!r} unavailable: {detail}")
        self.name = name


class OutageError(RuntimeError):
    """A verifier stayed unavailable longer than the call's ``max_outage_s``."""


OnOutage = Literal["mask", "wait", "drop"]
"""What :meth:`VerifierClient.score` does while a verifier is unavailable: mask its rollouts
(DEPENDENCY_UNAVAILABLE), wait until it is back, or leave it out and renormalise the other weights."""

OUTAGE_POLL_S = 0.5
"""Longest wait between two tries of an unavailable verifier (channels reconnect as fast: cohort.rpc.tls)."""

REPORT_EVERY_S = 30.0
"""While a verifier stays unavailable, one line this often (with the count of failed calls)."""


@dataclass
class Availability:
    """One verifier's outages as the client sees them: one log line when an outage starts, one every
    :data:`REPORT_EVERY_S` while it lasts, one when it ends (never a line per failed attempt)."""

    name: str
    note: str = ""
    """Said with the first line of an outage: what the caller does meanwhile (e.g. the trainer pauses)."""
    down_since: float | None = None
    failed_calls: int = 0
    last_error: str = ""
    down_s: float = 0.0
    """Seconds unavailable over the ended outages (:meth:`total_down_s` adds the current one)."""
    _last_report: float = 0.0

    def failed(self, error: str) -> None:
        now = time.monotonic()
        self.last_error = error
        if self.down_since is None:
            self.down_since, self._last_report, self.failed_calls = now, now, 1
            log.warning("verifier %s unavailable (%s)%s", self.name, error, f"; {self.note}" if self.note else "")
            return
        self.failed_calls += 1
        if now - self._last_report >= REPORT_EVERY_S:
            self._last_report = now
            log.warning("verifier %s still unavailable after %.0f s (%d calls failed; last: %s)", self.name,
                        now - self.down_since, self.failed_calls, error)

    def succeeded(self) -> None:
        if self.down_since is not None:
            took = time.monotonic() - self.down_since
            self.down_s += took
            log.warning("verifier %s is back after %.1f s (%d calls failed meanwhile)", self.name, took, self.failed_calls)
            self.down_since = None

    def total_down_s(self) -> float:
        return self.down_s + (0.0 if self.down_since is None else time.monotonic() - self.down_since)


@dataclass(frozen=True)
class WeightedVerifier:
    name: str
    weight: float = 1.0
    endpoints: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    tls: ClientTls | None = None
    """TLS (mutual TLS with a client certificate) to every endpoint of this verifier; None: plaintext."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        if not self.endpoints:
            raise ValueError(f"verifier {self.name!r} has no endpoints")


@dataclass
class _Endpoint:
    address: str
    channel: grpc.aio.Channel
    stub: pb_grpc.VerifierServiceStub


class _Pool:
    """The endpoints of one verifier, tried in round-robin order.

    Channels are created on first use, inside the running event loop (grpc.aio binds them to it).
    """

    def __init__(self, addresses: Sequence[str], tls: ClientTls | None, policy: RetryPolicy) -> None:
        self.addresses = list(addresses)
        self.tls = tls
        self._endpoints: list[_Endpoint] | None = None
        self.failover = Failover(len(self.addresses), policy)

    @property
    def endpoints(self) -> list[_Endpoint]:
        if self._endpoints is None:
            self._endpoints = []
            for address in self.addresses:
                channel = aio_channel(address, self.tls)  # cohort.rpc.tls.CHANNEL_OPTIONS
                self._endpoints.append(_Endpoint(address, channel, pb_grpc.VerifierServiceStub(channel)))
        return self._endpoints

    async def close(self) -> None:
        if self._endpoints is not None:
            await asyncio.gather(*(e.channel.close() for e in self._endpoints))
            self._endpoints = None


class VerifierClient:
    def __init__(
        self,
        verifiers: Sequence[WeightedVerifier] | Mapping[str, Sequence[str]],
        *,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 0.05,
        tls: ClientTls | None = None,
        attempt_timeout_s: float | None = None,
        outage_note: str = "",
    ) -> None:
        """``tls`` applies to verifiers given as a mapping of endpoints (a ``WeightedVerifier`` carries its own).

        ``timeout_s`` bounds a whole call with its retries; ``attempt_timeout_s`` one attempt (default:
        what is left split over the endpoints still to try, see :class:`cohort.rpc.retry.RetryPolicy`)."""
        if isinstance(verifiers, Mapping):
            verifiers = [WeightedVerifier(name, 1.0, tuple(eps), tls=tls) for name, eps in verifiers.items()]
        names = [v.name for v in verifiers]
        if len(set(names)) != len(names):
            raise ValueError(f"verifier configured twice: {names}")
        if timeout_s <= 0 or retries < 0:
            raise ValueError("timeout_s must be > 0, retries >= 0")
        self.verifiers = {v.name: v for v in verifiers}
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(attempts=retries + 1, backoff_s=backoff_s, attempt_timeout_s=attempt_timeout_s)
        self._pools = {v.name: _Pool(v.endpoints, v.tls, self.policy) for v in verifiers}
        self.versions: dict[str, str] = {}
        self.reference_kinds: dict[str, tuple[str, ...]] = {}
        """Per verifier, the reference kinds its servers accept (from the handshake; empty: any)."""
        self.max_groups: dict[str, int] = {}
        self.servers: dict[str, list[str]] = {}
        """Per verifier, one description per reachable endpoint (address, server version, limits), from the handshake."""
        self.availability = {v.name: Availability(v.name, outage_note) for v in verifiers}
        self.stats = {"calls": 0, "retries": 0, "failed_groups": 0}

    async def __aenter__(self) -> VerifierClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._pools.values()))

    # ---- handshake ----------------------------------------------------------------------------

    async def handshake(self, timeout_s: float = 10.0) -> dict[str, str]:
        """``ListVerifiers`` on every endpoint; raises unless each verifier is served somewhere."""
        problems: list[str] = []
        for name, pool in self._pools.items():
            reachable = 0
            for ep in pool.endpoints:
                try:
                    resp = await ep.stub.ListVerifiers(pb.ListVerifiersRequest(), timeout=timeout_s)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        # the real cause (DNS, refused, TLS expected, certificate...): may take a TLS probe
                        why = await asyncio.to_thread(explain, ep.address, exc.details() or "", pool.tls)
                        why = f"{exc.code().name}: {why}"
                    else:
                        why = f"{exc.code().name} {exc.details()}"
                    problems.append(f"{name} @ {ep.address}: {why}")
                    continue
                served = {v.name: v.version for v in resp.verifiers}
                if name not in served:
                    problems.append(f"{name} @ {ep.address}: not served there (serves {sorted(served)})")
                    continue
                reachable += 1
                self.versions[name] = served[name]
                self.servers.setdefault(name, []).append(_describe(ep.address, resp))
                self.reference_kinds[name] = next(tuple(v.reference_kinds) for v in resp.verifiers if v.name == name)
                if resp.limits.max_groups_per_batch:
                    self.max_groups[name] = min(self.max_groups.get(name, 1 << 30), resp.limits.max_groups_per_batch)
            if reachable == 0:
                raise HandshakeError(f"no endpoint serves verifier {name!r}: " + "; ".join(problems))
        for p in problems:
            log.warning("handshake: %s", p)
        return dict(self.versions)

    def describe(self) -> list[str]:
        """One line per verifier: its endpoints, TLS mode, and what each server said in the handshake."""
        lines = []
        for name, v in self.verifiers.items():
            mode = "plaintext" if v.tls is None else ("mutual TLS" if v.tls.cert else "TLS")
            lines.append(f"verifier {name} (weight {v.weight:g}, {mode}): " + "; ".join(self.servers.get(name, ())))
        return lines

    # ---- one verifier -------------------------------------------------------------------------

    async def verify_groups(self, groups: Sequence[GroupRequest], *, on_outage: OnOutage = "mask",
                            max_outage_s: float | None = None) -> list[GroupResult | None]:
        """Score groups (any mix of configured verifiers): one call per verifier (per chunk of the server's
        ``max_groups_per_batch``), all at once; results in request order.

        A verifier whose every attempt failed has its rollouts masked, DEPENDENCY_UNAVAILABLE (``"mask"``), or
        is tried again with backoff (capped at :data:`OUTAGE_POLL_S`, so a restarted verifier is used within
        about a second) until it is back (``"wait"``; :class:`OutageError` once down over ``max_outage_s``), or
        gives None for its groups while another verifier with weight is up (``"drop"``; else it waits).
        Scoring is pure, so a retry is safe."""
        if on_outage not in ("mask", "wait", "drop"):
            raise ValueError(f"on_outage must be 'mask', 'wait' or 'drop', not {on_outage!r}")
        by_verifier: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            if g.verifier not in self._pools:
                raise ValueError(f"verifier {g.verifier!r} is not configured (have {sorted(self._pools)})")
            by_verifier.setdefault(g.verifier, []).append(i)
        out: list[GroupResult | None] = [None] * len(groups)

        async def run(name: str, positions: list[int]) -> None:
            chunk_size = min(len(positions), self.max_groups.get(name, len(positions)))
            chunks = [positions[i : i + chunk_size] for i in range(0, len(positions), chunk_size)]
            wait = 0.05
            while True:
                deadline = time.monotonic() + self.timeout_s
                try:
                    results = await asyncio.gather(*(self._call(name, [groups[p] for p in c], deadline, on_outage)
                                                     for c in chunks))
                    break
                except VerifierUnavailable:
                    if on_outage == "drop" and self._droppable(name):
                        return
                    since = self.availability[name].down_since
                    if max_outage_s is not None and since is not None and time.monotonic() - since > max_outage_s:
                        raise OutageError(f"verifier {name!r} unavailable for over max_outage_s={max_outage_s:g} s "
                                          f"(last error: {self.availability[name].last_error})") from None
                    await asyncio.sleep(wait)
                    wait = min(OUTAGE_POLL_S, wait * 2)
            for chunk, res in zip(chunks, results):
                for p, r in zip(chunk, res):
                    out[p] = r

        await asyncio.gather(*(run(name, pos) for name, pos in by_verifier.items()))
        return out

    def _droppable(self, name: str) -> bool:
        """A verifier may be left out while another verifier with weight is up."""
        return any(n != name and v.weight > 0 and self.availability[n].down_since is None
                   for n, v in self.verifiers.items())

    async def _call(self, name: str, groups: list[GroupRequest], deadline: float,
                    on_outage: OnOutage = "mask") -> list[GroupResult]:
        request = convert.batch_to_pb(groups)
        pool = self._pools[name]
        tries = 0

        async def invoke(endpoint: int, timeout: float) -> list[GroupResult]:
            nonlocal tries
            ep = pool.endpoints[endpoint]
            self.stats["calls"] += 1
            self.stats["retries"] += tries > 0
            tries += 1
            try:
                response = await ep.stub.BatchVerifyGroups(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                log.debug("verifier %s @ %s: %s; %s", name, ep.address, short_error(exc),
                          "retrying" if len(pool.endpoints) == 1 else "failing over")
                raise
            return _checked(name, groups, response, ep.address)

        try:
            results = await call_with_failover(pool.failover, deadline, invoke, asyncio.sleep)
        except RequestRejected as exc:
            raise VerifierRequestError(f"{name} @ {pool.addresses[exc.endpoint]} rejected the request: {exc}") from None
        except Exhausted as exc:
            errors = [f"{pool.addresses[i]}: {e}" for i, e in exc.errors] + (["client deadline passed"] if exc.deadline_passed else [])
            self.stats["failed_groups"] += len(groups)
            detail = f"{len(errors)} attempt(s) failed: " + " | ".join(errors[-2:])
            self.availability[name].failed(errors[-1] if errors else "no attempt made")
            if on_outage != "mask":
                raise VerifierUnavailable(name, detail) from None
            detail = f"verifier {name!r} unavailable after {detail}"
            return [_unusable(g, name, RolloutStatus.DEPENDENCY_UNAVAILABLE, detail) for g in groups]
        self.availability[name].succeeded()
        return results

    # ---- the one scoring call: route, fan out, combine ----------------------------------------

    @property
    def defaults(self) -> dict[str, tuple[float, dict[str, str]]]:
        """The router's defaults (``records.route``): configured verifier name -> (weight, options)."""
        return {name: (v.weight, dict(v.options)) for name, v in self.verifiers.items()}

    async def score(self, rows: Sequence[Record], *, on_outage: OnOutage = "mask",
                    max_outage_s: float | None = None) -> list[list[ScoredRollout]]:
        """Each row's rollouts scored by the verifiers the one router (``records.route``) gives it (the row's
        own list, else every configured verifier that accepts its reference kind, as the handshake said),
        through :meth:`verify_groups` (``on_outage``, ``max_outage_s``), combined with weights. Group ids are
        the rows' task ids. :class:`~cohort.verifiers.records.RecordError` for a row that cannot be routed."""
        kinds = self.reference_kinds or None  # before a handshake: every verifier
        plan = [(row, route(row.task, self.defaults, kinds)) for row in rows]
        groups = [g for row, routes in plan for g in group_requests(row.task, row.rollouts, routes)]
        results = iter(await self.verify_groups(groups, on_outage=on_outage, max_outage_s=max_outage_s))
        by_row = [{r.name: next(results) for r in routes} for _, routes in plan]
        dropped = frozenset(name for found in by_row for name, result in found.items() if result is None)
        return [combine(row.rollouts, found, {r.name: r.weight for r in routes}, dropped)
                for (row, routes), found in zip(plan, by_row)]


def _describe(address: str, resp: pb.ListVerifiersResponse) -> str:
    lim = resp.limits
    limits = ", ".join(f"{k} {v}" for k, v in (("max groups/batch", lim.max_groups_per_batch),
                                               ("max rollouts/group", lim.max_rollouts_per_group),
                                               ("max message bytes", lim.max_message_bytes),
                                               ("max queued groups", lim.max_queued_groups)) if v)
    return f"{address} server {resp.server_version or '?'}" + (f" ({limits})" if limits else "")


def _checked(name: str, groups: list[GroupRequest], response: pb.BatchVerifyGroupsResponse, address: str) -> list[GroupResult]:
    """Results that answer exactly these groups, one per rollout, else VERIFIER_ERROR."""
    if len(response.responses) != len(groups):
        detail = f"{address} answered {len(response.responses)} groups for {len(groups)} requested"
        log.error("verifier %s: %s", name, detail)
        return [_unusable(g, name, RolloutStatus.VERIFIER_ERROR, detail) for g in groups]
    results = convert.batch_result_from_pb(response)
    out = []
    for g, result in zip(groups, results):
        got = [r.index for r in result.results]
        want = [r.index for r in g.rollouts]
        if result.group_id != g.group_id or got != want:
            detail = f"{address} answered group {result.group_id!r} with indexes {got[:8]} for group {g.group_id!r} with {want[:8]}"
            if result.group_id == g.group_id and sorted(got) == sorted(want) and len(set(got)) == len(got):
                by_index = {r.index: r for r in result.results}  # same set, other order: reorder
                out.append(GroupResult(result.group_id, name, result.verifier_version, tuple(by_index[i] for i in want)))
                continue
            log.error("verifier %s: %s", name, detail)
            out.append(_unusable(g, name, RolloutStatus.VERIFIER_ERROR, detail))
            continue
        out.append(replace(result, results=tuple(checked_steps(g, result.results, address)))
                   if any(r.steps for r in result.results) else result)
    return out


def _unusable(group: GroupRequest, name: str, status: RolloutStatus, detail: str) -> GroupResult:
    return GroupResult(group.group_id, name, "", tuple(RolloutResult.unusable(r.index, status, detail) for r in group.rollouts))
