"""HTTP proxies from the environment: which variable wins, which hosts are exempt, and
real requests through a loopback proxy (forwarded HTTP, CONNECT for HTTPS, Basic auth,
S3). The end-to-end cases include ones where reqwest's own reading of the same
variables would decide differently, so they prove that dataio's rules are the ones
applied."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from helpers.object_servers import MotoServer, RangeServer
from helpers.proxy_server import ProxyServer
from helpers.tls_server import Authority, TLSRangeServer

import dataio.io as dio
from dataio.exceptions import AuthenticationError, DataioError, TransportError
from dataio.io import config
from dataio.io.network import client_options, proxy_for, proxy_passwords

P = "http://proxy.test:3128"
ACCESS_KEY, SECRET_KEY = "AKIAPROXYTEST", "proxy-test-secret"


def _use(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config.reset()  # stores are built once per host: rebuild them under the new variables


@pytest.fixture
def origin(http_server: RangeServer) -> str:
    http_server.objects["/o/a.bin"] = b"through"
    return f"{http_server.url}/o/a.bin"


# -- the rules, on explicit environments ------------------------------------------------


@pytest.mark.parametrize(
    ("env", "origin", "expected"),
    [
        ({"HTTP_PROXY": P}, "http://h", P),
        ({"HTTP_PROXY": P}, "https://h", None),
        ({"HTTPS_PROXY": P}, "https://h", P),
        ({"HTTPS_PROXY": P}, "http://h", None),
        ({"ALL_PROXY": P}, "http://h", P),
        ({"ALL_PROXY": P}, "https://h", P),
        ({"HTTPS_PROXY": P, "ALL_PROXY": "http://other:1"}, "https://h", P),
        ({"https_proxy": P, "HTTPS_PROXY": "http://upper:1"}, "https://h", P),
        ({"all_proxy": P, "ALL_PROXY": "http://upper:1"}, "http://h", P),
        ({"http_proxy": "", "HTTP_PROXY": "http://upper:1", "ALL_PROXY": P}, "http://h", P),
        ({"REQUEST_METHOD": "GET", "HTTP_PROXY": P}, "http://h", None),
        ({"REQUEST_METHOD": "GET", "http_proxy": P}, "http://h", P),
        ({"REQUEST_METHOD": "GET", "HTTPS_PROXY": P}, "https://h", P),
        ({"REQUEST_METHOD": "GET", "HTTP_PROXY": "http://x:1", "ALL_PROXY": P}, "http://h", P),
        ({"HTTP_PROXY": "proxy.test:3128"}, "http://h", P),
        ({}, "http://h", None),
    ],
)
def test_which_variable_picks_the_proxy(
    env: dict[str, str], origin: str, expected: str | None
) -> None:
    assert proxy_for(origin, env) == expected


@pytest.mark.parametrize(
    ("no_proxy", "origin", "bypassed"),
    [
        ("example.com", "https://example.com", True),
        ("example.com", "https://data.example.com", True),
        ("example.com", "https://badexample.com", False),
        (".example.com", "https://a.b.example.com", True),
        (".example.com", "https://example.com", True),
        ("*.example.com", "https://a.example.com", True),
        ("Example.COM.", "https://DATA.example.com", True),
        ("other.org, example.com", "https://x.example.com", True),
        ("10.1.2.3", "http://10.1.2.3:9000", True),
        ("10.1.2.3", "http://10.1.2.4", False),
        ("10.0.0.0/8", "http://10.200.3.4", True),
        ("10.0.0.0/8", "http://11.0.0.1", False),
        ("fd00::/8", "http://[fd12::1]:9000", True),
        ("::1", "http://[::1]", True),
        ("10.1.2.3:9000", "http://10.1.2.3:9000", True),
        ("10.1.2.3:9000", "http://10.1.2.3:9001", False),
        ("example.com:8443", "https://a.example.com:8443", True),
        ("example.com:443", "https://example.com", True),
        ("example.com:443", "http://example.com", False),
        ("[::1]:8080", "http://[::1]:8080", True),
        ("[::1]:8080", "http://[::1]:8081", False),
        ("*", "https://anything.anywhere", True),
        ("*", "http://192.0.2.1", True),
        ("", "https://example.com", False),
        (" , ", "https://example.com", False),
    ],
)
def test_no_proxy_forms(no_proxy: str, origin: str, bypassed: bool) -> None:
    env = {"ALL_PROXY": P, "NO_PROXY": no_proxy}
    assert proxy_for(origin, env) == (None if bypassed else P)


def test_lowercase_no_proxy_wins() -> None:
    env = {"ALL_PROXY": P, "NO_PROXY": "example.com", "no_proxy": "other.org"}
    assert proxy_for("https://example.com", env) == P
    assert proxy_for("https://other.org", env) is None


@pytest.mark.parametrize(
    "url", ["https://user:hunter22@proxy:443", "socks5://user:hunter22@proxy:1080", "socks5h://p"]
)
def test_unsupported_proxy_transports_fail_by_name(url: str) -> None:
    with pytest.raises(DataioError, match="HTTPS_PROXY") as info:
        proxy_for("https://h", {"HTTPS_PROXY": url})
    assert "hunter22" not in str(info.value) and "http://" in str(info.value)


@pytest.mark.parametrize("url", ["http://:3128", "http://u:hunter22@proxy:port", "http://p:1/x"])
def test_malformed_proxy_urls_fail_by_name(url: str) -> None:
    with pytest.raises(DataioError, match="http_proxy") as info:
        proxy_for("http://h", {"http_proxy": url})
    assert "hunter22" not in str(info.value)


def test_a_direct_origin_switches_reqwests_own_proxy_lookup_off(
    network_env: pytest.MonkeyPatch,
) -> None:
    assert client_options("http://10.0.0.1") == {}
    network_env.setenv("HTTP_PROXY", P)
    network_env.setenv("NO_PROXY", "10.0.0.1:80")
    options = client_options("http://10.0.0.1")
    assert options["proxy_excludes"] == "*,0.0.0.0/0,::/0"
    assert client_options("http://10.0.0.2") == {"proxy_url": P}


# -- real requests through a loopback proxy ---------------------------------------------


def test_http_is_forwarded_in_absolute_form(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, origin: str
) -> None:
    _use(network_env, HTTP_PROXY=proxy.url)
    assert dio.read(origin) == b"through"
    dio.write(origin.replace("a.bin", "b.bin"), b"up")
    assert [(s.method, s.target) for s in proxy.seen] == [
        ("GET", origin),
        ("PUT", origin.replace("a.bin", "b.bin")),
    ]


def test_https_tunnels_through_connect_and_checks_the_origin_certificate(
    network_env: pytest.MonkeyPatch,
    proxy: ProxyServer,
    https_server: TLSRangeServer,
    authority: Authority,
) -> None:
    https_server.objects["/s.bin"] = b"secret payload"
    url = f"{https_server.url}/s.bin"
    _use(network_env, HTTPS_PROXY=proxy.url)
    with pytest.raises(DataioError):  # the tunnel does not skip origin verification
        dio.read(url)
    assert proxy.seen and all(s.method == "CONNECT" for s in proxy.seen)
    proxy.seen.clear()
    _use(network_env, SSL_CERT_FILE=str(authority.ca_pem))
    assert dio.read(url) == b"secret payload"
    assert {(s.method, s.target) for s in proxy.seen} == {
        ("CONNECT", f"127.0.0.1:{https_server.server_address[1]}")
    }


def test_all_proxy_serves_https_when_https_proxy_is_unset(
    network_env: pytest.MonkeyPatch,
    proxy: ProxyServer,
    https_server: TLSRangeServer,
    authority: Authority,
) -> None:
    https_server.objects["/s.bin"] = b"x"
    _use(network_env, ALL_PROXY=proxy.url, SSL_CERT_FILE=str(authority.ca_pem))
    assert dio.read(f"{https_server.url}/s.bin") == b"x"
    assert [s.method for s in proxy.seen] == ["CONNECT"]


@pytest.fixture
def guarded() -> Iterator[ProxyServer]:
    server = ProxyServer(auth=("alice", "pa:ss@word"))
    try:
        yield server
    finally:
        server.stop()


def _with_user(proxy: ProxyServer, user: str, password: str) -> str:
    host = proxy.url.removeprefix("http://")
    return f"http://{quote(user, safe='')}:{quote(password, safe='')}@{host}"


def test_basic_auth_reaches_the_proxy(
    network_env: pytest.MonkeyPatch,
    guarded: ProxyServer,
    origin: str,
    https_server: TLSRangeServer,
    authority: Authority,
) -> None:
    https_server.objects["/s.bin"] = b"tls"
    url = _with_user(guarded, "alice", "pa:ss@word")
    _use(network_env, HTTP_PROXY=url, HTTPS_PROXY=url, SSL_CERT_FILE=str(authority.ca_pem))
    assert dio.read(origin) == b"through"
    assert dio.read(f"{https_server.url}/s.bin") == b"tls"
    assert [s.method for s in guarded.seen] == ["GET", "CONNECT"]
    assert {s.proxy_authorization for s in guarded.seen} == {guarded.expected}


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_rejected_proxy_password_is_an_error_that_does_not_show_it(
    network_env: pytest.MonkeyPatch,
    guarded: ProxyServer,
    origin: str,
    https_server: TLSRangeServer,
    authority: Authority,
    scheme: str,
) -> None:
    url = _with_user(guarded, "alice", "wrong-hunter22")
    _use(network_env, ALL_PROXY=url, SSL_CERT_FILE=str(authority.ca_pem))
    target = origin if scheme == "http" else f"{https_server.url}/s.bin"
    with pytest.raises(DataioError) as info:
        dio.read(target)
    assert guarded.seen and all(s.proxy_authorization != guarded.expected for s in guarded.seen)
    assert "hunter22" not in str(info.value)
    if scheme == "http":  # a forwarded request gets the proxy's 407 as its answer
        assert isinstance(info.value, AuthenticationError)
        assert "proxy rejected its credentials" in str(info.value)


@pytest.mark.parametrize(
    ("no_proxy", "proxied"),
    [
        # reqwest alone ignores the port form and would proxy these: dataio does not
        ("127.0.0.1:{port}", False),
        ("127.0.0.1:1", True),
        ("127.0.0.0/8", False),
        ("127.0.0.2/32", True),
        ("*", False),
        ("localhost", True),  # a name exempts only origins addressed by that name
    ],
)
def test_no_proxy_decides_end_to_end(
    network_env: pytest.MonkeyPatch,
    proxy: ProxyServer,
    http_server: RangeServer,
    origin: str,
    no_proxy: str,
    proxied: bool,
) -> None:
    port = http_server.server_address[1]
    _use(network_env, HTTP_PROXY=proxy.url, NO_PROXY=no_proxy.format(port=port))
    assert dio.read(origin) == b"through"
    assert bool(proxy.seen) is proxied


def test_a_name_in_no_proxy_exempts_that_name(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, http_server: RangeServer
) -> None:
    http_server.objects["/n.bin"] = b"named"
    port = http_server.server_address[1]
    _use(network_env, http_proxy=proxy.url, no_proxy=f"example.com,localhost:{port}")
    assert dio.read(f"http://localhost:{port}/n.bin") == b"named"
    assert proxy.seen == []


def test_lowercase_proxy_variables_win(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, origin: str
) -> None:
    upper = ProxyServer()
    try:
        _use(network_env, http_proxy=proxy.url, HTTP_PROXY=upper.url)
        assert dio.read(origin) == b"through"
    finally:
        upper.stop()
    assert len(proxy.seen) == 1 and upper.seen == []


def test_lowercase_no_proxy_wins_end_to_end(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, origin: str
) -> None:
    _use(network_env, HTTP_PROXY=proxy.url, NO_PROXY="", no_proxy="127.0.0.1")
    assert dio.read(origin) == b"through"
    assert proxy.seen == []


def test_cgi_ignores_uppercase_http_proxy(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, origin: str
) -> None:
    _use(network_env, REQUEST_METHOD="GET", HTTP_PROXY=proxy.url)
    assert dio.read(origin) == b"through"
    assert proxy.seen == []
    _use(network_env, http_proxy=proxy.url)
    assert dio.read(origin) == b"through"
    assert len(proxy.seen) == 1


@pytest.mark.parametrize("url", ["socks5://bob:hunter22@127.0.0.1:1080", "https://127.0.0.1:1"])
def test_a_request_under_an_unsupported_proxy_fails_clearly(
    network_env: pytest.MonkeyPatch, origin: str, url: str
) -> None:
    _use(network_env, HTTP_PROXY=url)
    with pytest.raises(DataioError, match=r"HTTP_PROXY.*http://") as info:
        dio.read(origin)
    assert "hunter22" not in str(info.value)


def test_s3_through_the_proxy(
    network_env: pytest.MonkeyPatch, proxy: ProxyServer, moto: MotoServer, _bucket: str
) -> None:
    _use(network_env, HTTP_PROXY=proxy.url)
    dio.configure_endpoint("s3", moto.url, region="us-east-1")
    dio.configure_credentials("s3", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    uri = f"s3://{_bucket}/proxied/object.bin"
    dio.write(uri, b"signed through a proxy")
    assert dio.read(uri) == b"signed through a proxy"
    assert dio.ls(f"s3://{_bucket}/proxied/") == [uri]
    methods = [s.method for s in proxy.seen]
    assert methods[:2] == ["PUT", "GET"] and len(methods) == 3
    assert all(s.target.startswith(f"{moto.url}/{_bucket}") for s in proxy.seen)


def test_an_unreachable_proxy_is_a_transport_error_without_the_password(
    network_env: pytest.MonkeyPatch, origin: str
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _use(network_env, HTTP_PROXY=f"http://bob:hunter22@127.0.0.1:{port}")
    with pytest.raises(TransportError) as info:
        dio.read(origin)
    assert "hunter22" not in str(info.value)


def test_proxy_passwords_are_found_for_masking() -> None:
    env = {
        "HTTPS_PROXY": "http://bob:p%40ss@proxy:3128",
        "all_proxy": "carol:plain@proxy:1",
        "HTTP_PROXY": "http://nopassword@proxy:1",
        "NO_PROXY": "u:not-a-password@x",
    }
    assert proxy_passwords(env) == {"p%40ss", "p@ss", "plain"}
    assert proxy_passwords({}) == set()
