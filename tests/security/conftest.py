"""Security fixtures. `pki`: a throwaway PKI made at test time with ``cryptography``: a CA, a server certificate for loopback
(127.0.0.1, ::1, localhost), a client certificate, and a second CA with its own client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    return path.with_suffix(".crt"), path.with_suffix(".key")


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path

    @classmethod
    def create(cls, folder: Path, cn: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (_builder(cn, _name(cn), key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        path, _ = _write(folder / cn, cert, key)
        return cls(cert, key, path)

    def issue(self, folder: Path, cn: str, server: bool) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (_builder(cn, self.cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        return _write(folder / cn, builder.sign(self.key, hashes.SHA256()), key)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path

    @classmethod
    def create(cls, folder: Path) -> Pki:
        ca = Authority.create(folder, "cohort-test-ca")
        other = Authority.create(folder, "someone-elses-ca")
        server = ca.issue(folder, "verifier", server=True)
        client = ca.issue(folder, "trainer", server=False)
        stranger = other.issue(folder, "stranger", server=False)
        return cls(ca.cert_path, *server, *client, other.cert_path, *stranger)

    def server_args(self, mutual: bool = True) -> list[str]:
        args = ["--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key)]
        return args + (["--client-ca", str(self.ca)] if mutual else [])


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))
