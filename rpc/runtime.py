"""Server plumbing shared by every Cohort gRPC service: health, reflection, drain, port file.

A service module builds its servicer(s), then::

    runtime = GrpcRuntime(RuntimeOptions(host="127.0.0.1", port=50051))
    runtime.add_service(SERVICE_NAME, add_FooServicer_to_server, servicer, errors={BadFoo: INVALID_ARGUMENT})
    await runtime.start(service_names=[SERVICE_NAME], health_names=["math"])
    await runtime.serve_until_signal()   # SIGTERM / SIGINT -> drain

Status codes are the server's one interceptor's (:mod:`cohort.rpc.status`): a request that does not parse,
a service's domain errors (``errors``), and draining. Drain sequence on SIGTERM: every health status turns
NOT_SERVING (load balancers and Kubernetes stop routing), ``draining`` becomes true (the interceptor answers
new calls UNAVAILABLE), in-flight calls finish (up to ``grace_s``), then the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from cohort.rpc.status import Errors, Observe, StatusInterceptor
from cohort.rpc.tls import ServerTls

log = logging.getLogger("cohort.grpc")

HEALTH_SERVICE = "grpc.health.v1.Health"

_BIND_REASONS = {
    errno.EADDRINUSE: "address in use",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "not an address of this machine",
}


class BindError(OSError):
    """A server could not listen on its address; ``reason`` says why in words ("address in use")."""

    def __init__(self, address: str, reason: str, code: int | None = None) -> None:
        super().__init__(f"cannot bind {address}: {reason}")
        self.address, self.reason, self.code = address, reason, code

    @property
    def in_use(self) -> bool:
        return self.code == errno.EADDRINUSE


def bind_error(address: str, exc: OSError) -> BindError:
    """The :class:`BindError` for an ``OSError`` raised by ``bind`` (e.g. the metrics HTTP server)."""
    return BindError(address, _BIND_REASONS.get(exc.errno, exc.strerror or str(exc)), exc.errno)


def _refused_bind(host: str, port: int, address: str) -> BindError | None:
    """Why the OS refuses ``host:port``, asked with a plain socket (grpc only raises ``RuntimeError("Failed
    to bind ...")`` and logs a C-core line); None when it would bind. SO_REUSEADDR as grpc sets it, so a port
    in TIME_WAIT is not reported as in use."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), port))
    except OSError as exc:
        return bind_error(address, exc)
    return None


class HealthServicer(health_aio.HealthServicer):
    """grpcio-health-checking's aio servicer plus ``List`` (in grpc.health.v1 since 2024; the aio servicer
    answers UNIMPLEMENTED), so ``cohort health --service typo`` can say which names the server knows."""

    def __init__(self) -> None:
        super().__init__()
        self._names: dict[str, None] = {"": None}

    async def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        self._names[service] = None
        await super().set(service, status)

    async def List(self, request: health_pb2.HealthListRequest, context) -> health_pb2.HealthListResponse:
        statuses = {name: await self.Check(health_pb2.HealthCheckRequest(service=name), context)
                    for name in self._names}
        return health_pb2.HealthListResponse(statuses=statuses)


@dataclass(frozen=True)
class RuntimeOptions:
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port; the bound port is written to ``port_file`` when given."""
    max_message_bytes: int = 8 * 1024 * 1024
    """Larger requests are rejected by gRPC with RESOURCE_EXHAUSTED."""
    grace_s: float = 30.0
    """How long in-flight calls may run after SIGTERM."""
    drain_delay_s: float = 0.0
    """Extra time spent NOT_SERVING before stopping, for load balancers to notice."""
    port_file: Path | None = None
    tls: ServerTls | None = None
    """Serve TLS (mutual TLS when it names a client CA); plaintext when None. See :mod:`cohort.rpc.tls`."""


class GrpcRuntime:
    def __init__(self, options: RuntimeOptions, interceptors: list | None = None) -> None:
        self.options = options
        self.status = StatusInterceptor(self)
        limit = options.max_message_bytes
        self.server = grpc.aio.server(
            interceptors=[self.status, *(interceptors or [])],
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.health = HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._health_names: list[str] = []
        self.port = 0

    def add_service(self, name: str, add_to_server: Callable, servicer, errors: Errors | None = None,
                    observe: Observe | None = None) -> None:
        """Register ``servicer`` with its generated ``add_...Servicer_to_server``; the interceptor then refuses its
        calls while draining, tracks them, and maps its domain ``errors`` to status codes (:mod:`cohort.rpc.status`)."""
        add_to_server(servicer, self.server)
        self.status.add(name, errors, observe)

    async def start(self, service_names: list[str], health_names: list[str], serving: bool = True) -> int:
        """Bind, start, and mark overall health plus each name SERVING; returns the bound port. With
        ``serving=False`` they start NOT_SERVING (something slow is still loading: calls could not be
        answered in time yet) until :meth:`mark_serving`."""
        reflection.enable_server_reflection([*service_names, HEALTH_SERVICE, reflection.SERVICE_NAME], self.server)
        address = f"{self.options.host}:{self.options.port}"
        if ":" in self.options.host and not self.options.host.startswith("["):
            address = f"[{self.options.host}]:{self.options.port}"
        if self.options.port and (refused := _refused_bind(self.options.host, self.options.port, address)):
            raise refused  # before grpc tries: its failure is a RuntimeError without a reason
        try:
            if self.options.tls is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, self.options.tls.credentials())
        except RuntimeError:  # "Failed to bind to address ...": lost a race for the port, or a v6-only clash
            self.port = 0
        if self.port == 0:
            raise _refused_bind(self.options.host, self.options.port, address) or BindError(
                address, "grpc could not listen there (GRPC_VERBOSITY=debug says why)")
        await self.server.start()
        self._health_names = ["", *service_names, *health_names]
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in self._health_names:
            await self.health.set(name, status)
        if self.options.port_file is not None:
            tmp = self.options.port_file.with_suffix(".tmp")
            tmp.write_text(str(self.port))
            os.replace(tmp, self.options.port_file)
        tls = self.options.tls
        how = "plaintext" if tls is None else "mutual TLS" if tls.client_ca else "TLS"
        log.info("serving %s on %s:%d (%s)", ", ".join(health_names or service_names), self.options.host, self.port, how)
        return self.port

    async def mark_serving(self) -> None:
        """Every health name SERVING: what :meth:`start` with ``serving=False`` waited for is ready (not while
        draining: a drain's NOT_SERVING stays)."""
        if self.draining:
            return
        for name in self._health_names:
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("health SERVING: ready to answer")

    async def mark_not_serving(self, reason: str) -> None:
        """Every health name NOT_SERVING (something the whole server needs is gone, e.g. its worker processes
        cannot start): probes fail and the orchestrator replaces the server; calls are still answered."""
        log.error("health NOT_SERVING: %s", reason)
        for name in self._health_names:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """``with runtime.track():`` around each unit of work that a drain must wait for."""
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def drain_and_stop(self) -> None:
        if self.draining:
            return
        self.draining = True
        log.info("draining: health NOT_SERVING, waiting for %d in-flight calls", self.in_flight)
        await self.health.enter_graceful_shutdown()
        deadline = time.monotonic() + self.options.grace_s
        if self.options.drain_delay_s > 0:
            await asyncio.sleep(self.options.drain_delay_s)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            log.warning("grace period over with %d calls in flight; cancelling them", self.in_flight)
        await self.server.stop(grace=max(0.0, deadline - time.monotonic()))

    async def serve_until_signal(self, on_stop: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM/SIGINT, or until the launching process is gone (``PARENT_FD_ENV``), then drain."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        parent_fd = _parent_pipe()
        if parent_fd is not None:  # readable = EOF: every holder of the write end has exited, however it died

            def parent_gone() -> None:
                log.warning("the process that launched this server is gone; draining")
                loop.remove_reader(parent_fd)
                stop.set()

            loop.add_reader(parent_fd, parent_gone)
        waiter = asyncio.ensure_future(self.server.wait_for_termination())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            await self.drain_and_stop()
        waiter.cancel()
        stopper.cancel()
        if on_stop is not None:
            on_stop()


PARENT_FD_ENV = "COHORT_PARENT_FD"
"""A server launched by another process (``cohort.rpc.launch``) gets the read end of a pipe whose write end
only the launcher holds: when the launcher exits, even by SIGKILL, the pipe reads EOF and the server drains
and stops instead of living on as an orphan."""


def _parent_pipe() -> int | None:
    value = os.environ.pop(PARENT_FD_ENV, None)  # popped: the server's own children do not watch it
    if value is None:
        return None
    try:
        fd = int(value)
        os.fstat(fd)
    except (ValueError, OSError):
        log.warning("%s=%r is not an open file descriptor; not watching the parent", PARENT_FD_ENV, value)
        return None
    return fd


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
