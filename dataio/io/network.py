"""The network environment of remote requests: HTTP proxies and custom TLS roots.

:func:`client_options` turns the process environment into obstore client options for
one origin. It is called once per store, when the store is built, so variables set
later apply after :func:`dataio.io.config.reset` or to hosts not contacted yet.

Proxies. ``http_proxy`` / ``https_proxy`` / ``all_proxy`` and their uppercase forms
pick the proxy; ``no_proxy`` / ``NO_PROXY`` exempt hosts. dataio decides per origin. A
proxied origin gets that ``proxy_url``. An exempt one, while any proxy variable is set,
gets an explicit "no proxy", because reqwest (obstore 0.12.1 bundles reqwest 0.13 and
hyper-util's environment matcher) reads the same variables on its own, at client build,
whenever it has no ``proxy_url`` -- and decides differently: it ignores ``host:port``
entries of ``NO_PROXY`` (``NO_PROXY=10.1.2.3:9000`` would still proxy that server),
reads uppercase ``NO_PROXY`` before lowercase, and its ``*`` leaves IP literals proxied.
Any ``proxy_url`` switches that lookup off; ``proxy_excludes`` listing ``*`` (names) and
the two all-address networks (IP literals) then leaves the placeholder proxy unused.

TLS roots. ``SSL_CERT_FILE`` (else ``AWS_CA_BUNDLE``) names a PEM bundle that replaces
the built-in roots: its certificates go in as ``root_certificate`` together with
``disable_system_certificates``; ``root_certificate`` alone would add them to the
platform roots. (reqwest's native-roots loader also reads ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` by itself, but merges them; the explicit options make the bundle the
only trust anchors, and give ``AWS_CA_BUNDLE`` the same meaning.)
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from dataio.exceptions import DataioError

__all__ = [
    "client_options",
    "origin",
    "proxy_for",
    "proxy_passwords",
    "tls_context",
    "tls_roots",
]

_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy")
# a proxy_url that is never contacted: proxy_excludes below exempts every host from it
_UNUSED_PROXY = "http://dataio-no-proxy.invalid:9"
_EVERY_HOST = "*,0.0.0.0/0,::/0"
_PEM_CERT = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def client_options(origin: str) -> dict[str, Any]:
    """Extra obstore client options for requests to ``origin`` (``scheme://host[:port]``):
    the proxy the environment assigns it, and the custom TLS roots.

    Raises:
        DataioError: a proxy variable holds an unsupported or malformed URL, or the CA
            bundle cannot be read or holds no valid certificate.

    Example:
        >>> client_options("https://data.example.com")  # doctest: +SKIP
        {'proxy_url': 'http://proxy.corp:3128'}
    """
    options = _tls_options(os.environ)
    proxy = proxy_for(origin)
    if proxy is not None:
        options["proxy_url"] = proxy
    elif any(os.environ.get(name) for lower in _PROXY_VARS for name in (lower, lower.upper())):
        options["proxy_url"] = _UNUSED_PROXY
        options["proxy_excludes"] = _EVERY_HOST
    return options


def origin(url: str) -> str:
    """The ``scheme://host[:port]`` part of ``url``, which proxies and redirects go by.

    Example:
        >>> origin("https://huggingface.co/api/models/org/name/tree/main?cursor=3")
        'https://huggingface.co'
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def proxy_for(origin: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL that requests to ``origin`` go through, or None for a direct
    connection, under the ``*_proxy`` / ``no_proxy`` variables of ``environ``
    (default: the process environment).

    Example:
        >>> env = {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".internal"}
        >>> proxy_for("https://example.com", env)
        'http://proxy:3128'
        >>> proxy_for("https://s3.internal:9000", env) is None
        True
    """
    env = os.environ if environ is None else environ
    url = urlsplit(origin)
    scheme = url.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not url.hostname:
        return None
    choice = _variable(env, f"{scheme}_proxy") or _variable(env, "all_proxy")
    if choice is None:
        return None
    host = url.hostname.rstrip(".")
    port = url.port or _DEFAULT_PORTS[scheme]
    if _bypassed(host, port, _variable(env, "no_proxy", empty_is_unset=False)):
        return None
    return _checked_proxy(*choice)


def proxy_passwords(environ: Mapping[str, str] | None = None) -> set[str]:
    """The passwords inside the proxy variables of ``environ`` (default: the process
    environment), as written and percent-decoded, for masking them in messages.

    Example:
        >>> sorted(proxy_passwords({"HTTPS_PROXY": "http://bob:p%40ss@proxy:3128"}))
        ['p%40ss', 'p@ss']
    """
    env = os.environ if environ is None else environ
    found: set[str] = set()
    for lower in _PROXY_VARS:
        for name in (lower, lower.upper()):
            value = env.get(name, "")
            userinfo = value.partition("://")[2] if "://" in value else value
            userinfo = userinfo.rpartition("@")[0]
            if ":" in userinfo:
                password = userinfo.split(":", 1)[1]
                found.update(form for form in (password, unquote(password)) if form)
    return found


def _variable(
    env: Mapping[str, str], lower: str, *, empty_is_unset: bool = True
) -> tuple[str, str] | None:
    """``(name, value)`` of the lowercase variable if set, else of the uppercase one."""
    upper = lower.upper()
    if lower in env:
        name = lower
    elif upper in env and not (upper == "HTTP_PROXY" and "REQUEST_METHOD" in env):
        # under CGI, HTTP_PROXY may come from a client's "Proxy:" request header
        name = upper
    else:
        return None
    value = env[name].strip()
    if not value and empty_is_unset:
        return None
    return name, value


def _checked_proxy(name: str, value: str) -> str:
    text = value if "://" in value else "http://" + value
    url = urlsplit(text)
    shown = _without_password(text)
    scheme = url.scheme.lower()
    if scheme != "http":
        kind = "SOCKS" if scheme.startswith("socks") else f"{scheme}://"
        raise DataioError(
            f"{name}={shown!r} asks for a {kind} proxy, which dataio does not support; "
            "use an http:// proxy URL (HTTPS origins still travel encrypted through CONNECT)"
        )
    try:
        port = url.port
    except ValueError:
        port = -1
    if not url.hostname or port == -1 or url.path not in ("", "/") or url.query:
        raise DataioError(
            f"{name}={shown!r} is not a proxy URL; write it as http://[user:password@]host:port"
        )
    return text


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


@dataclass(frozen=True)
class _Exemption:
    """One ``no_proxy`` entry: a domain suffix or an IP network, maybe with a port."""

    domain: str | None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    port: int | None

    def covers(
        self, host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, port: int
    ) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        domain = self.domain or ""
        return host == domain or host.endswith("." + domain)


def _bypassed(host: str, port: int, setting: tuple[str, str] | None) -> bool:
    if setting is None:
        return False
    host = host.lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in setting[1].split(","):
        entry = entry.strip().lower()
        if entry == "*":
            return True
        exemption = _exemption(entry)
        if exemption is not None and exemption.covers(host, address, port):
            return True
    return False


def _exemption(entry: str) -> _Exemption | None:
    if not entry:
        return None
    network = _network(entry)
    if network is not None:
        return _Exemption(None, network, None)
    host, port = entry, None
    if entry.startswith("["):  # [v6] or [v6]:port
        inside, _, after = entry[1:].partition("]")
        host = inside
        if after.startswith(":") and after[1:].isdigit():
            port = int(after[1:])
    elif entry.count(":") == 1:
        name, _, digits = entry.partition(":")
        if digits.isdigit():
            host, port = name, int(digits)
    network = _network(host)
    if network is not None:
        return _Exemption(None, network, port)
    domain = host.removeprefix("*.").lstrip(".").rstrip(".")
    return _Exemption(domain, None, port) if domain else None


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def tls_roots(environ: Mapping[str, str] | None = None) -> str | None:
    """The PEM bundle that replaces the built-in TLS roots (``SSL_CERT_FILE``, else
    ``AWS_CA_BUNDLE``), checked; None when neither is set.

    Example:
        >>> tls_roots({}) is None
        True
    """
    options = _tls_options(os.environ if environ is None else environ)
    root: str | None = options.get("root_certificate")
    return root


def tls_context() -> ssl.SSLContext:
    """A client TLS context trusting what obstore's requests trust: the bundle of
    ``SSL_CERT_FILE`` (else ``AWS_CA_BUNDLE``) in place of the system roots when set."""
    pem = tls_roots()
    return ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()


def _tls_options(env: Mapping[str, str]) -> dict[str, Any]:
    for name in ("SSL_CERT_FILE", "AWS_CA_BUNDLE"):
        path = env.get(name, "").strip()
        if path:
            return {
                "root_certificate": _bundle(name, path),
                "disable_system_certificates": True,
            }
    return {}


def _bundle(name: str, path: str) -> str:
    """The certificates of the PEM bundle at ``path``, checked by OpenSSL."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", errors="replace")
    except OSError as exc:
        raise DataioError(
            f"{name}={path!r}: cannot read the CA bundle ({exc.strerror or exc}); "
            "point it at a readable PEM file of trusted certificates or unset it"
        ) from None
    blocks = _PEM_CERT.findall(text)
    if not blocks:
        raise DataioError(
            f"{name}={path!r} holds no PEM certificate ('-----BEGIN CERTIFICATE-----' "
            "blocks); point it at a PEM bundle of trusted CA certificates"
        )
    pem = "\n".join(blocks) + "\n"
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise DataioError(
            f"{name}={path!r} holds a certificate that does not parse ({exc}); "
            "replace the file with a valid PEM bundle"
        ) from None
    return pem
