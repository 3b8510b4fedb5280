"""TLS and mutual TLS for every Cohort server and client: the one place that builds gRPC credentials.

Certificates are PEM files (Kubernetes secrets mount them). gRPC does the handshake and the
checks; this module only reads the files and hands them to ``grpc.ssl_server_credentials`` /
``grpc.ssl_channel_credentials``:

- a server with :class:`ServerTls` serves TLS with ``cert`` + ``key``; with ``client_ca`` it also
  requires every client to present a certificate signed by that CA (mutual TLS: only holders of
  such a certificate, e.g. the trainer, get in);
- a client with :class:`ClientTls` checks the server's certificate against ``ca`` (the system
  roots when unset) and, with ``cert`` + ``key``, presents its own.

Without either, servers and clients speak plaintext: the default on loopback. A file that is
missing, unreadable, empty or not PEM is a :class:`TlsError` with a one-line message naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["ClientTls", "ServerTls", "TlsError", "aio_channel", "channel", "read_pem"]


class TlsError(ValueError):
    """A certificate or key file cannot be used; the message is one line and names the file."""


def read_pem(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a PEM file, or :class:`TlsError` saying what is wrong with it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise TlsError(f"{what} {p}: no such file") from None
    except IsADirectoryError:
        raise TlsError(f"{what} {p}: is a directory, expected a PEM file") from None
    except OSError as exc:
        raise TlsError(f"{what} {p}: cannot read: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{what} {p}: {'empty' if not data.strip() else 'not a PEM file (no -----BEGIN line)'}")
    return data


@dataclass(frozen=True)
class ServerTls:
    cert: str
    """PEM certificate chain of the server."""
    key: str
    """PEM private key of ``cert``."""
    client_ca: str | None = None
    """PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)."""

    def credentials(self) -> grpc.ServerCredentials:
        chain = read_pem(self.cert, "TLS certificate")
        key = read_pem(self.key, "TLS key")
        roots = read_pem(self.client_ca, "client CA") if self.client_ca else None
        return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                           require_client_auth=roots is not None)

    @classmethod
    def from_options(cls, cert: str | os.PathLike | None, key: str | os.PathLike | None,
                     client_ca: str | os.PathLike | None = None) -> ServerTls | None:
        """None (plaintext) when nothing is given; :class:`TlsError` for a half-given pair."""
        if cert is None and key is None:
            if client_ca is not None:
                raise TlsError("--client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)")
            return None
        if cert is None or key is None:
            raise TlsError("--tls-cert and --tls-key go together")
        tls = cls(str(cert), str(key), None if client_ca is None else str(client_ca))
        tls.credentials()  # fail at startup, with the file's name, not at the first handshake
        return tls


@dataclass(frozen=True)
class ClientTls:
    ca: str | None = None
    """PEM CA bundle that signed the server's certificate; None: the system roots."""
    cert: str | None = None
    """PEM certificate the client presents (mutual TLS); goes with ``key``."""
    key: str | None = None
    server_name: str | None = None
    """Name to check the server's certificate against, when it differs from the address's host."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise TlsError("a client certificate and its key go together (tls cert and key)")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.ca, "CA") if self.ca else None,
            private_key=read_pem(self.key, "TLS key") if self.key else None,
            certificate_chain=read_pem(self.cert, "TLS certificate") if self.cert else None,
        )

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    @classmethod
    def from_options(cls, ca: str | os.PathLike | None = None, cert: str | os.PathLike | None = None,
                     key: str | os.PathLike | None = None, server_name: str | None = None) -> ClientTls | None:
        """None (plaintext) when nothing is given."""
        if ca is None and cert is None and key is None and not server_name:
            return None
        tls = cls(*(None if v is None else str(v) for v in (ca, cert, key)), server_name or None)
        tls.credentials()
        return tls

    @classmethod
    def from_env(cls, prefix: str, environ: Mapping[str, str] | None = None) -> ClientTls | None:
        """From ``{prefix}CA``, ``{prefix}CERT``, ``{prefix}KEY``, ``{prefix}SERVER_NAME`` (unset: plaintext)."""
        env = os.environ if environ is None else environ
        get = lambda name: env.get(prefix + name, "").strip() or None  # noqa: E731
        try:
            return cls.from_options(get("CA"), get("CERT"), get("KEY"), get("SERVER_NAME"))
        except TlsError as exc:
            raise TlsError(f"{prefix}*: {exc}") from None


MAX_MESSAGE_BYTES = 64 << 20
"""The largest message a Cohort client sends or takes (gRPC's default receive limit is 4 MiB): a batch of
groups, a tool result or a sandbox reply; a server advertises its own limit (``Limits.max_message_bytes``)."""

CHANNEL_OPTIONS: dict[str, object] = {
    "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
    # gRPC's default reconnect backoff grows to 120 s: a restarted server would stay unused (every call
    # failing fast) for that long. Reconnect within a second instead; a down server costs a connect
    # attempt a second, nothing more.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.enable_retries": 0,  # retries and failover are ours, across endpoints (cohort.rpc.retry)
}
"""Options of every Cohort client channel (the caller's own options override them)."""


def _options(options: Sequence[tuple[str, object]], tls: ClientTls | None) -> list[tuple[str, object]]:
    merged = {**CHANNEL_OPTIONS, **dict(options), **dict(tls.channel_options() if tls else ())}
    return list(merged.items())


def channel(address: str, tls: ClientTls | None = None, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    """A blocking channel: TLS when ``tls`` is given, plaintext otherwise; :data:`CHANNEL_OPTIONS` first."""
    if tls is None:
        return grpc.insecure_channel(address, options=_options(options, tls))
    return grpc.secure_channel(address, tls.credentials(), options=_options(options, tls))


def aio_channel(address: str, tls: ClientTls | None = None,
                options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    """An asyncio channel: TLS when ``tls`` is given, plaintext otherwise; :data:`CHANNEL_OPTIONS` first."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=_options(options, tls))
    return grpc.aio.secure_channel(address, tls.credentials(), options=_options(options, tls))
