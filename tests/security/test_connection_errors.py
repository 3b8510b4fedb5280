"""Every failure to connect names its real cause and only the plausible fixes (``cohort.rpc.diagnose``).

Real ``cohort serve arith`` servers on 127.0.0.1 (plaintext, TLS, mutual TLS) with certificates made at test
time (``conftest.py``), a port nothing listens on, and a host under the reserved ``.invalid`` TLD (RFC 6761:
it never resolves, nothing leaves the machine). Each case goes through the verifier client's handshake (what
``cohort train`` and ``cohort verify`` do first) and is judged by its text.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.rpc.diagnose import split_address, tls_probe
from cohort.rpc.launch import ServiceProcess
from cohort.rpc.tls import ClientTls
from cohort.verifiers.client import HandshakeError, VerifierClient, WeightedVerifier

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def servers(pki):
    """``{"plaintext"|"tls"|"mutual": endpoint}``: the same verifier three ways."""
    procs = {"plaintext": ServiceProcess(["arith"]),
             "tls": ServiceProcess(["arith"], extra_args=pki.server_args(mutual=False), tls=ClientTls(ca=str(pki.ca))),
             "mutual": ServiceProcess(["arith"], extra_args=pki.server_args(),
                                      tls=ClientTls(ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key)))}
    try:
        for p in procs.values():
            p.start()
        yield {mode: p.endpoint for mode, p in procs.items()}
    finally:
        for p in procs.values():
            p.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def handshake_error(endpoint: str, tls: ClientTls | None) -> str:
    async def run() -> str:
        async with VerifierClient([WeightedVerifier("arith", 1.0, (endpoint,), tls=tls)], timeout_s=5,
                                  retries=0) as client:
            with pytest.raises(HandshakeError) as info:
                await client.handshake(timeout_s=5)
            return str(info.value)

    return asyncio.run(run())


def test_a_host_name_typo_names_the_host_and_dns_only():
    message = handshake_error("verifier-typo.invalid:50051", None)
    assert "cannot resolve host 'verifier-typo.invalid'" in message, message
    assert "check the host name" in message
    assert "TLS" not in message  # the issue: a typo was answered with "does the server require TLS?"


def test_nothing_listening_is_connection_refused():
    endpoint = f"127.0.0.1:{free_port()}"
    message = handshake_error(endpoint, None)
    assert f"nothing is listening at {endpoint} (connection refused)" in message, message
    assert "TLS" not in message


def test_plaintext_client_to_a_tls_server_is_told_the_server_speaks_tls(servers):
    message = handshake_error(servers["tls"], None)
    assert f"the server at {servers['tls']} speaks TLS and this client is plaintext" in message, message
    assert "Socket closed" not in message


def test_plaintext_client_to_a_mutual_tls_server_is_told_it_needs_a_certificate_too(servers):
    message = handshake_error(servers["mutual"], None)
    assert "requires mutual TLS and this client is plaintext" in message, message


def test_tls_client_without_a_certificate_at_a_mutual_tls_server(servers, pki):
    message = handshake_error(servers["mutual"], ClientTls(ca=str(pki.ca)))
    assert "requires a client certificate (mutual TLS) and this client presents none" in message, message
    assert "Socket closed" not in message  # the report: `Socket closed` with no TLS hint


def test_client_certificate_from_another_ca_is_named(servers, pki):
    tls = ClientTls(ca=str(pki.ca), cert=str(pki.other_client_cert), key=str(pki.other_client_key))
    message = handshake_error(servers["mutual"], tls)
    assert f"refused this client's certificate ({pki.other_client_cert})" in message, message
    assert "not signed by a CA the server trusts" in message


def test_server_certificate_from_another_ca_names_the_ca_given(servers, pki):
    message = handshake_error(servers["tls"], ClientTls(ca=str(pki.other_ca)))
    assert f"is not signed by the CA {pki.other_ca}" in message, message


def test_server_certificate_for_another_name(servers, pki):
    message = handshake_error(servers["tls"], ClientTls(ca=str(pki.ca), server_name="verifier.example"))
    assert "does not carry the name 'verifier.example'" in message, message


def test_tls_client_to_a_plaintext_server(servers, pki):
    message = handshake_error(servers["plaintext"], ClientTls(ca=str(pki.ca)))
    assert "speaks plaintext, not TLS" in message, message


def test_the_probe_tells_the_three_kinds_of_server_apart(servers, pki):
    assert tls_probe(servers["plaintext"]) == "not-tls"
    assert tls_probe(servers["tls"]) == "tls"
    assert tls_probe(servers["mutual"]) == "needs-certificate"
    ours = ClientTls(ca=str(pki.ca), cert=str(pki.client_cert), key=str(pki.client_key))
    assert tls_probe(servers["mutual"], ours) == "tls"
    assert tls_probe(f"127.0.0.1:{free_port()}") == "unreachable"


@pytest.mark.parametrize(("address", "parts"), [("host:50051", ("host", 50051)), ("[::1]:7", ("::1", 7)),
                                                ("dns:///a.b:9", ("a.b", 9)), ("host", ("host", None))])
def test_split_address(address, parts):
    assert split_address(address) == parts


def test_cli_health_and_conformance_name_the_cause(servers, pki):
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "health", servers["mutual"], "--tls-ca", str(pki.ca)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "requires a client certificate (mutual TLS)" in out.stderr, out.stderr
    out = subprocess.run([sys.executable, "-m", "cohort.cli", "conformance", "verifier-typo.invalid:50051",
                          "--verifier", "arith", "--rule", "health", "--connect-timeout", "1",
                          "--cases", str(ROOT / "tests" / "conformance" / "cases" / "math.jsonl")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2
    assert "cannot resolve host 'verifier-typo.invalid'" in out.stderr, out.stderr
