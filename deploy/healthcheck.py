#!/usr/bin/env python3
"""Container health check: ask a gRPC server's ``grpc.health.v1.Health`` for SERVING.

    cohort-healthcheck [ENDPOINT] [--service NAME] [--timeout SECONDS]

ENDPOINT defaults to ``$COHORT_HEALTH_ENDPOINT`` or ``127.0.0.1:50051``; the service
name ``""`` (the default) is the server as a whole. Exit 0 when SERVING, 1 otherwise,
with one line on stderr saying why. For a server started with ``--tls-cert``, set
``COHORT_HEALTH_TLS_CA`` (and ``_CERT``, ``_KEY`` for mutual TLS): credentials then come from
``cohort.rpc.tls``, as for every Cohort client. This is what the images' HEALTHCHECK runs (podman,
Docker, compose); Kubernetes uses its native gRPC probe on the same service instead.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc

from cohort.rpc import health  # grpc + grpcio-health-checking only; TLS is imported only when configured

TLS_ENV_PREFIX = "COHORT_HEALTH_TLS_"


def _tls():
    """None (plaintext) unless ``COHORT_HEALTH_TLS_*`` is set; plaintext checks never import the TLS module."""
    if not any(k.startswith(TLS_ENV_PREFIX) and v.strip() for k, v in os.environ.items()):
        return None
    from cohort.rpc.tls import ClientTls

    return ClientTls.from_env(TLS_ENV_PREFIX)


def check(endpoint: str, service: str = "", timeout: float = 3.0) -> tuple[bool, str]:
    """(serving?, human-readable status) for one Health.Check call with a deadline."""
    try:
        tls = _tls()
    except ValueError as exc:  # cohort.rpc.tls.TlsError: a certificate file that cannot be used
        return False, str(exc)
    try:
        status = health.health_status(endpoint, service, timeout, tls)
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            from cohort.rpc.diagnose import explain  # the cause (refused, TLS expected, ...): only on a failure

            return False, f"{exc.code().name}: {explain(endpoint, exc.details() or '', tls)}"
        return False, f"{exc.code().name}: {exc.details()}"
    return status == health.SERVING, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cohort-healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("endpoint", nargs="?", default=os.environ.get("COHORT_HEALTH_ENDPOINT", "127.0.0.1:50051"))
    parser.add_argument("--service", default="", help="health service name ('' = whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="deadline in seconds")
    args = parser.parse_args(argv)
    ok, status = check(args.endpoint, args.service, args.timeout)
    print(f"{args.endpoint} {args.service or '<server>'}: {status}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
