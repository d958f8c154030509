"""Real object servers on 127.0.0.1 for the IO tests, and a ``base`` URI per scheme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.cloud_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite, GcsEmulator, HubServer
from helpers.object_servers import MotoServer, RangeServer
from helpers.proxy_server import ProxyServer
from helpers.stream_server import StreamServer
from helpers.tls_server import Authority, TLSRangeServer, make_ca
from helpers.webdav_server import WebDAVServer

import dataio.io as dio
from dataio.io import config

ACCESS_KEY = "AKIADATAIOTESTKEY01"
SECRET_KEY = "dataio-test-secret-never-shown"


@pytest.fixture(autouse=True)
def fresh_config() -> Iterator[None]:
    """Each test starts and ends with no configuration and no cached stores."""
    config.reset()
    yield
    config.reset()


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _bucket(moto: MotoServer) -> str:
    moto.create_bucket("dataio-tests")
    return "dataio-tests"


@pytest.fixture
def s3(moto: MotoServer, _bucket: str, request: pytest.FixtureRequest) -> str:
    """An ``s3://`` base URI, unique to this test, with endpoint and keys configured."""
    dio.configure_endpoint("s3", moto.url, region="us-east-1")
    dio.configure_credentials("s3", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    return f"s3://{_bucket}/{request.node.name.replace('[', '-').replace(']', '')}"


@pytest.fixture
def http_server() -> Iterator[RangeServer]:
    server = RangeServer()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def http(http_server: RangeServer) -> str:
    return http_server.url + "/objects"


@pytest.fixture(params=["local-path", "file-uri", "s3", "http"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A writable base URI on each backend."""
    kind = request.param
    if kind == "local-path":
        return str(tmp_path)
    if kind == "file-uri":
        return tmp_path.as_uri()
    return str(request.getfixturevalue(kind))


_NETWORK_ENV = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "REQUEST_METHOD",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "AWS_CA_BUNDLE",
)


@pytest.fixture
def network_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A monkeypatch with every proxy and TLS-root variable of the host removed."""
    for name in _NETWORK_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


@pytest.fixture(scope="session")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A test CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def https_server(authority: Authority) -> Iterator[TLSRangeServer]:
    server = TLSRangeServer(authority)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def proxy() -> Iterator[ProxyServer]:
    server = ProxyServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def webdav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDAVServer]:
    server = WebDAVServer(tmp_path_factory.mktemp("webdav"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def webdav(webdav_server: WebDAVServer, request: pytest.FixtureRequest) -> str:
    """An ``http://`` base URI on the WebDAV server, unique to this test (its folder
    exists, empty)."""
    name = request.node.name.replace("[", "-").replace("]", "")
    (webdav_server.root / name).mkdir()
    return f"{webdav_server.url}/{name}"


@pytest.fixture
def stream_server() -> Iterator[StreamServer]:
    """A scripted server for streaming tests (chunked bodies, stalls, dying mid-body)."""
    server = StreamServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scripted_s3(stream_server: StreamServer) -> StreamServer:
    """The scripted server standing in for an S3 endpoint (anonymous requests), so the
    obstore path of streams meets the same faults; routes are ``/bucket/key``."""
    dio.configure_endpoint("s3", stream_server.url, region="us-east-1")
    dio.configure_credentials("s3", method="anonymous")
    return stream_server


# -- gs://, az:// and hf:// (servers in helpers/cloud_servers.py) --------------------


def _test_name(request: pytest.FixtureRequest) -> str:
    return request.node.name.replace("[", "-").replace("]", "")


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    server = GcsEmulator()
    try:
        server.create_bucket("dataio-tests")
        yield server
    finally:
        server.stop()


@pytest.fixture
def gs(gcs_emulator: GcsEmulator, request: pytest.FixtureRequest) -> str:
    """A ``gs://`` base URI, unique to this test, on the emulator, reached the way
    object_store documents for emulators: a service-account key with OAuth disabled.
    (``method="anonymous"`` would do for reads, but obstore's writes then still ask the
    cloud metadata server for a token, a request that must not leave this machine.)"""
    dio.configure_endpoint("gs", gcs_emulator.url)
    dio.configure_credentials("gs", service_account_key=gcs_emulator.service_account())
    return f"gs://dataio-tests/{_test_name(request)}"


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite()
    try:
        server.create_container("dataio-tests")
        yield server
    finally:
        server.stop()


@pytest.fixture
def az(azurite: Azurite, request: pytest.FixtureRequest) -> str:
    """An ``az://`` base URI, unique to this test, on Azurite with the account key."""
    dio.configure_endpoint("az", azurite.url)
    dio.configure_credentials("az", account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY)
    return f"az://dataio-tests/{_test_name(request)}"


HF_TOKEN = "hf_dataioTestTokenNeverShown"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    """A Hub (and its CDN) with no ``HF_*`` variables from the environment, and an
    empty Hugging Face home (no token file, no cache) under ``tmp_path``."""
    from dataio.io import hf

    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_ENDPOINT",
        "HF_TOKEN_PATH",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "XDG_CACHE_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(hf, "_known", {})  # what the Hub said about repositories
    server = HubServer(token=HF_TOKEN)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def always_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large reads split into ranged requests however fast their first chunk arrived
    (loopback servers are usually fast enough to be read on in one request)."""
    from dataio.io import verbs

    monkeypatch.setattr(verbs, "SPLIT_BELOW", float("inf"))
