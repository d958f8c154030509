"""A throwaway certificate authority and an HTTPS range server on 127.0.0.1.

:func:`make_ca` writes a CA certificate and a server certificate signed by it (valid for
``127.0.0.1``, ``::1`` and ``localhost``); :class:`TLSRangeServer` is the plain
:class:`~helpers.object_servers.RangeServer` speaking TLS with that certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from helpers.object_servers import RangeServer


@dataclass(frozen=True)
class Authority:
    """PEM files of one test CA and of a server certificate it signed."""

    ca_pem: Path
    server_cert: Path
    server_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(directory: Path, *, common_name: str = "dataio test CA") -> Authority:
    """Write ``ca.pem``, ``server.pem`` and ``server.key`` into ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    authority = Authority(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    authority.ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    authority.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    authority.server_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return authority


class TLSRangeServer(RangeServer):
    """:class:`RangeServer` over TLS: each accepted socket is wrapped server-side; the
    handshake runs in the handler thread, so a client that rejects the certificate
    costs only its own connection."""

    def __init__(self, authority: Authority) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(authority.server_cert, authority.server_key)
        super().__init__()

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = self.socket.accept()
        wrapped = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"
