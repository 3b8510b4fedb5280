"""The one ``grpc.health.v1`` probe of every Cohort tool: the local launcher (`launch.py`), the images'
``cohort-healthcheck`` (`deploy/healthcheck.py`), `cohort health` and the conformance kit.

Import-light on purpose (grpc and grpcio-health-checking only; TLS is imported when asked for), because
the images' health check process starts every few seconds.

>>> health_status("127.0.0.1:50051", "math", timeout_s=1.0)   # doctest: +SKIP
'SERVING'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

if TYPE_CHECKING:
    from cohort.rpc.tls import ClientTls

SERVING = "SERVING"


class _HealthStub(Protocol):
    def Check(self, request: health_pb2.HealthCheckRequest, timeout: float | None = None): ...


def stub(ch: grpc.Channel) -> health_pb2_grpc.HealthStub:
    return health_pb2_grpc.HealthStub(ch)


def status(health: _HealthStub, service: str = "", timeout_s: float = 2.0) -> str:
    """The status name of ``service`` ("SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", ...) from one
    ``Health.Check`` with a deadline; ``""`` is the server as a whole. Raises ``grpc.RpcError``."""
    resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def services(health: health_pb2_grpc.HealthStub, timeout_s: float = 2.0) -> list[str] | None:
    """The service names the server reports health for (``Health.List``), or None when it cannot say."""
    try:
        resp = health.List(health_pb2.HealthListRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return None
    return sorted(name for name in resp.statuses if name)


def open_channel(endpoint: str, tls: ClientTls | None = None) -> grpc.Channel:
    """Plaintext without touching the TLS module; TLS (mutual with a client certificate) when given."""
    if tls is None:
        return grpc.insecure_channel(endpoint)
    from cohort.rpc.tls import channel

    return channel(endpoint, tls)


def health_status(endpoint: str, service: str = "", timeout_s: float = 2.0, tls: ClientTls | None = None) -> str:
    """:func:`status` at ``endpoint`` on a channel of its own. Raises ``grpc.RpcError``."""
    with open_channel(endpoint, tls) as ch:
        return status(stub(ch), service, timeout_s)


def health_services(endpoint: str, timeout_s: float = 2.0, tls: ClientTls | None = None) -> list[str] | None:
    """:func:`services` at ``endpoint`` on a channel of its own."""
    with open_channel(endpoint, tls) as ch:
        return services(stub(ch), timeout_s)
