"""Why a connection to a Cohort service failed, in one line naming the real cause and only its plausible fixes.

gRPC reports every failure to connect as ``UNAVAILABLE`` with a free-text detail, and several different
causes read the same ("Socket closed": a plaintext client at a TLS server, a TLS client without a
certificate at a mutual-TLS server, a certificate from another CA). :func:`explain` sorts them:

========================================  ======================================================
gRPC's detail (and the client's TLS)       cause named
========================================  ======================================================
resolving / DNS / lookup failed            the host name does not resolve (a typo?)
Connection refused                         nothing listens at host:port
Hostname Verification / No match found     the server's certificate does not carry that name
CERTIFICATE_VERIFY_FAILED                  the server's certificate is not signed by the client's CA
WRONG_VERSION_NUMBER (a TLS client)        the server speaks plaintext
Socket closed / reset                      one TLS handshake of our own (:func:`tls_probe`) tells:
                                           the server requires TLS, a client certificate (mutual
                                           TLS), or refuses this client's certificate
========================================  ======================================================

Used where a connection is first made: the verifier client's handshake (so ``cohort train``'s and
``cohort eval``'s start-up checks, ``cohort verify``), ``cohort health``, the images' ``cohort-healthcheck``
and the conformance kit.
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cohort.rpc.tls import ClientTls

__all__ = ["explain", "split_address", "tls_probe"]

_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS


def split_address(address: str) -> tuple[str, int | None]:
    """``(host, port)`` of a gRPC target such as ``host:50051``, ``[::1]:50051`` or ``dns:///host:50051``."""
    target = re.sub(r"^(dns|ipv4|ipv6):(///?)?", "", address)
    m = re.fullmatch(r"\[(?P<h6>[^\]]+)\](?::(?P<p6>\d+))?|(?P<h>[^:]*)(?::(?P<p>\d+))?", target)
    if m is None:  # a bare IPv6 address without brackets, a unix: socket, ...
        return target, None
    host, port = (m["h6"], m["p6"]) if m["h6"] is not None else (m["h"], m["p"])
    return host, None if port is None else int(port)


def tls_probe(address: str, tls: ClientTls | None = None, timeout_s: float = 2.0) -> str:
    """What the server at ``address`` does with one TLS handshake (the server's certificate is not checked;
    ``tls``'s client certificate is presented when it has one):

    ``"tls"``: TLS, no client certificate needed (or the one given accepted); ``"needs-certificate"``: it
    requires a client certificate (mutual TLS) and none was given; ``"refuses-certificate"``: it rejected the
    one given; ``"not-tls"``: it does not speak TLS; ``"unreachable"``: no TCP connection."""
    host, port = split_address(address)
    if port is None:
        return "unreachable"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    if tls is not None and tls.cert and tls.key:
        try:
            ctx.load_cert_chain(tls.cert, tls.key)
        except (OSError, ssl.SSLError):  # unusable here: gRPC's own error already said so
            pass
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return "unreachable"
    conn = ctx.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
    handshaken = False
    try:
        conn.do_handshake()
        handshaken = True
        # TLS 1.3: the server judges the client's certificate after the client's side of the handshake is
        # done, so a refusal arrives as an alert (or a hang-up) on the first read
        conn.sendall(_HTTP2_PREFACE)
        return "tls" if conn.recv(1) else _refused(tls)
    except ssl.SSLError as exc:
        reason = (exc.reason or str(exc)).upper()
        if "CERTIFICATE_REQUIRED" in reason or ("HANDSHAKE_FAILURE" in reason and not (tls and tls.cert)):
            return "needs-certificate"
        if any(word in reason for word in ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN",
                                           "UNSUPPORTED_CERTIFICATE", "DECRYPT_ERROR", "HANDSHAKE_FAILURE")):
            return "refuses-certificate"
        return "not-tls"
    except TimeoutError:  # no answer: after the handshake, a server waiting for more (it accepted us)
        return "tls" if handshaken else "not-tls"
    except OSError:  # closed or reset: during the handshake (not TLS) or after it (a refusal)
        return _refused(tls) if handshaken else "not-tls"
    finally:
        conn.close()


def _refused(tls: ClientTls | None) -> str:
    """A TLS server that hung up right after the handshake: it did not accept the client's certificate."""
    return "refuses-certificate" if tls is not None and tls.cert else "needs-certificate"


def explain(address: str, details: str, tls: ClientTls | None, probe_timeout_s: float = 2.0) -> str:
    """One line: why connecting to ``address`` failed (``details``: gRPC's ``exc.details()``; ``tls``: the
    client's TLS, None for plaintext). A failure that is not about connecting comes back as gRPC said it."""
    host = split_address(address)[0]
    first = (details or "").strip().splitlines()[0] if (details or "").strip() else ""
    text = first.lower()
    mode = "plaintext" if tls is None else ("mutual TLS" if tls.cert else "TLS")
    if "connection refused" in text:
        return (f"nothing is listening at {address} (connection refused): is the server running, "
                "and on this host and port?")
    if any(word in text for word in ("resolv", "dns resolution", "lookup", "name or service not known",
                                     "domain name not found")):
        return (f"cannot resolve host {host!r} (DNS lookup of {address} failed): check the host name "
                "(and that this machine's DNS knows it)")
    if "hostname verification" in text or "no match found for server name" in text or "peer name" in text:
        name = tls.server_name if tls is not None and tls.server_name else host
        return (f"the certificate of the server at {address} does not carry the name {name!r}: connect by a "
                "name it carries, or set the TLS server name to one of them")
    if "certificate_verify_failed" in text or "unable to get local issuer" in text:
        ca = f"the CA {tls.ca}" if tls is not None and tls.ca else "the system's CAs (no CA given)"
        return (f"the certificate of the server at {address} is not signed by {ca}: give the CA that "
                "signed the server's certificate")
    if tls is not None and ("wrong_version_number" in text or "record_layer_failure" in text):
        return f"the server at {address} speaks plaintext, not TLS: connect without TLS settings (or enable TLS on it)"
    if re.search(r"socket closed|connection reset|end of file|\beof\b", text):
        verdict = tls_probe(address, tls, probe_timeout_s)
        if tls is None and verdict == "needs-certificate":
            return (f"the server at {address} requires mutual TLS and this client is plaintext: give the CA of "
                    "its certificate and a client certificate and key signed by the CA it trusts")
        if tls is None and verdict in ("tls", "refuses-certificate"):
            return (f"the server at {address} speaks TLS and this client is plaintext: give the CA of its "
                    "certificate (TLS settings)")
        if tls is not None and verdict == "needs-certificate":
            return (f"the server at {address} requires a client certificate (mutual TLS) and this client "
                    "presents none: give a client certificate and key signed by the CA it trusts")
        if tls is not None and verdict == "refuses-certificate":
            return (f"the server at {address} refused this client's certificate ({tls.cert}): it is not signed "
                    "by a CA the server trusts (its --client-ca)")
        return f"the server at {address} closed the connection ({mode} client): is it a gRPC server of this protocol?"
    if "deadline" in text or "timed out" in text or "timeout" in text:
        return (f"no answer from {address} in time ({mode}): is the host up and the port open "
                "(a firewall that drops packets looks like this)?")
    return first or "no details"
