"""Custom TLS roots: ``SSL_CERT_FILE`` (else ``AWS_CA_BUNDLE``) replaces the built-in
roots, against an HTTPS range server whose CA is generated per test session.

``SSL_CERT_DIR`` stands in for the system roots: rustls' native-roots loader reads it,
so a CA placed there is trusted unless a configured bundle replaces the roots."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.tls_server import Authority, TLSRangeServer, make_ca

import dataio.io as dio
from dataio.exceptions import DataioError, TransportError
from dataio.io import config


def _use(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config.reset()


@pytest.fixture
def url(https_server: TLSRangeServer) -> str:
    https_server.objects["/t/a.bin"] = b"over tls"
    return f"{https_server.url}/t/a.bin"


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A second, unrelated CA."""
    return make_ca(tmp_path_factory.mktemp("other-ca"), common_name="unrelated CA")


def test_an_unknown_ca_is_a_transport_error(network_env: pytest.MonkeyPatch, url: str) -> None:
    _use(network_env)
    with pytest.raises(TransportError) as info:
        dio.read(url)
    assert "a.bin" in str(info.value)
    assert "TLS certificate is not trusted" in str(info.value)
    assert "SSL_CERT_FILE" in str(info.value)


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "AWS_CA_BUNDLE"])
def test_a_bundle_makes_the_server_trusted(
    network_env: pytest.MonkeyPatch, url: str, authority: Authority, variable: str
) -> None:
    _use(network_env, **{variable: str(authority.ca_pem)})
    assert dio.read(url) == b"over tls"
    assert dio.head(url)["size"] == 8
    dio.write(url.replace("a.bin", "b.bin"), b"written")
    assert dio.read(url.replace("a.bin", "b.bin")) == b"written"


def test_ssl_cert_file_wins_over_aws_ca_bundle(
    network_env: pytest.MonkeyPatch, url: str, authority: Authority, other: Authority
) -> None:
    _use(network_env, SSL_CERT_FILE=str(other.ca_pem), AWS_CA_BUNDLE=str(authority.ca_pem))
    with pytest.raises(TransportError):
        dio.read(url)
    _use(network_env, SSL_CERT_FILE="", AWS_CA_BUNDLE=str(authority.ca_pem))
    assert dio.read(url) == b"over tls"


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "AWS_CA_BUNDLE"])
def test_a_bundle_replaces_the_built_in_roots(
    network_env: pytest.MonkeyPatch,
    url: str,
    authority: Authority,
    other: Authority,
    tmp_path: Path,
    variable: str,
) -> None:
    system = tmp_path / "system-roots"
    system.mkdir()
    (system / "ca.pem").write_bytes(authority.ca_pem.read_bytes())
    _use(network_env, SSL_CERT_DIR=str(system))
    assert dio.read(url) == b"over tls"  # the stand-in system roots trust the server
    _use(network_env, **{variable: str(other.ca_pem)})
    with pytest.raises(TransportError):
        dio.read(url)


def test_a_bundle_may_hold_several_certificates_and_other_text(
    network_env: pytest.MonkeyPatch,
    url: str,
    authority: Authority,
    other: Authority,
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(
        "# corporate roots\n"
        + other.ca_pem.read_text()
        + "\nsubject=dataio test CA\n"
        + authority.ca_pem.read_text()
    )
    _use(network_env, SSL_CERT_FILE=str(bundle))
    assert dio.read(url) == b"over tls"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", "parse"),
        ("no certificates in here\n", "no PEM certificate"),
        ("", "no PEM certificate"),
    ],
)
@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "AWS_CA_BUNDLE"])
def test_an_invalid_bundle_fails_naming_the_file(
    network_env: pytest.MonkeyPatch,
    url: str,
    tmp_path: Path,
    content: str,
    problem: str,
    variable: str,
) -> None:
    bundle = tmp_path / "broken.pem"
    bundle.write_text(content)
    _use(network_env, **{variable: str(bundle)})
    with pytest.raises(DataioError, match=problem) as info:
        dio.read(url)
    assert variable in str(info.value) and str(bundle) in str(info.value)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_bundle_fails_naming_the_file(
    network_env: pytest.MonkeyPatch, url: str, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "nowhere.pem" if kind == "missing" else tmp_path
    _use(network_env, SSL_CERT_FILE=str(path))
    with pytest.raises(DataioError, match="cannot read the CA bundle") as info:
        dio.read(url)
    assert str(path) in str(info.value)


def test_a_bundle_applies_to_plain_http_stores_without_harm(
    network_env: pytest.MonkeyPatch, http: str, authority: Authority
) -> None:
    _use(network_env, SSL_CERT_FILE=str(authority.ca_pem))
    dio.write(f"{http}/plain.bin", b"plain")
    assert dio.read(f"{http}/plain.bin") == b"plain"
