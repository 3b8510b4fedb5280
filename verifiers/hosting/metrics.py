"""Prometheus metrics of a verifier server, on their own registry (several servers may share a process)."""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from cohort.verifiers.base import CANDIDATE_LIMIT, GroupResult

Counts = list[tuple[str, str, str, bool, int]]
"""(verifier, status, verdict, candidate_limit, rollouts) rows: what a scoring process tells the server's
metrics. ``candidate_limit``: the rollouts carry that flag (their own output hit a limit; scored, not masked)."""


def count_results(groups: Sequence[GroupResult]) -> Counts:
    """Rollouts by verifier, status, verdict and candidate limit (``.value`` per row, not per rollout: it is slow)."""
    tally = Tally([(g.verifier, r.status, r.verdict, CANDIDATE_LIMIT in r.flags) for g in groups for r in g.results])
    return [(verifier, status.value, verdict.value, limited, n) for (verifier, status, verdict, limited), n in tally.items()]


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("cohort_verifier_requests", "RPCs by method and status code", ["method", "code"], registry=r)
        self.latency = Histogram(
            "cohort_verifier_request_seconds",
            "RPC latency by method",
            ["method"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.rollouts = Counter(
            "cohort_verifier_rollouts", "Scored rollouts by verifier, status and verdict", ["verifier", "status", "verdict"], registry=r
        )
        self.candidate_limits = Counter(
            "cohort_verifier_candidate_limit_rollouts",
            "Rollouts scored with the flag candidate_limit (the policy's own output hit a limit), by verifier",
            ["verifier"], registry=r,
        )
        self.in_flight = Gauge("cohort_verifier_in_flight", "RPCs being scored now", registry=r)
        self.queue_depth = Gauge("cohort_verifier_queue_depth", "Groups admitted and not yet scored", registry=r)
        self._children: dict[tuple[str, str, str], Counter] = {}

    def count_request(self, method: str, code: str, seconds: float | None = None) -> None:
        self.requests.labels(method, code).inc()
        if seconds is not None:
            self.latency.labels(method).observe(seconds)

    def observe_counts(self, counts: Counts) -> None:
        for verifier, status, verdict, limited, n in counts:
            self._rollout_counter(verifier, status, verdict).inc(n)
            if limited:
                self.candidate_limits.labels(verifier).inc(n)

    def _rollout_counter(self, verifier: str, status: str, verdict: str):
        """The labelled child, cached: ``labels()`` validates and locks on every call."""
        key = (verifier, status, verdict)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.rollouts.labels(verifier, status, verdict)
        return child

    @contextlib.contextmanager
    def track_in_flight(self) -> Iterator[None]:
        self.in_flight.inc()
        try:
            yield
        finally:
            self.in_flight.dec()

    def start_http(self, host: str, port: int) -> int:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server.server_port
