"""Per-scheme credentials, endpoints and transport options, and the cached obstore stores.

Every ``configure_*`` call replaces that scheme's options of its kind. A store is built
once per (scheme, bucket or host, configuration) and reused by every thread: obstore
stores are thread-safe and hold the connection pool.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from dataio.exceptions import DataioError
from dataio.io.uri import SCHEMES, Location

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = [
    "Transport",
    "configure_credentials",
    "configure_endpoint",
    "configure_transport",
    "redact",
    "store_for",
    "transport_for",
]

log = logging.getLogger("dataio.io")

_S3_LIKE = ("s3", "r2")
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN")
_MIB = 1 << 20


@dataclass(frozen=True)
class Transport:
    """Request timeout and the range plan of large eager reads for one scheme."""

    timeout_secs: float | None = None
    readall_chunk_mib: int = 32
    readall_concurrency: int = 8

    @property
    def chunk_bytes(self) -> int:
        return self.readall_chunk_mib * _MIB


_lock = threading.Lock()
_credentials: dict[str, dict[str, str]] = {}
_endpoints: dict[str, tuple[str, str | None]] = {}
_transports: dict[str, Transport] = {}
_stores: dict[tuple[Any, ...], ObjectStore] = {}


def _check_scheme(scheme: str) -> str:
    name = scheme.lower().removesuffix("://")
    if name not in SCHEMES or name == "file":
        choices = ", ".join(repr(s) for s in SCHEMES if s != "file")
        raise DataioError(f"cannot configure scheme {scheme!r}; choose one of {choices}")
    return name


def configure_credentials(
    scheme: str,
    method: Literal["default", "anonymous"] | None = None,
    *,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    bearer_token: str | None = None,
) -> None:
    """Set how requests for ``scheme`` authenticate; replaces earlier credentials.

    ``method="default"`` uses the platform chain (``AWS_*`` variables, profiles,
    instance metadata); ``"anonymous"`` signs nothing. Keys select static credentials:
    ``access_key_id`` + ``secret_access_key`` (+ ``session_token``) for S3-compatible
    stores, ``bearer_token`` for ``http(s)``. Keys never appear in errors or logs.

    Example:
        >>> import dataio  # doctest: +SKIP
        >>> dataio.configure_credentials("r2", access_key_id="K", secret_access_key="S")
    """
    name = _check_scheme(scheme)
    keys = {
        k: v
        for k, v in {
            "access_key_id": access_key_id,
            "secret_access_key": secret_access_key,
            "session_token": session_token,
            "bearer_token": bearer_token,
        }.items()
        if v is not None
    }
    if keys and method is not None:
        raise DataioError(f"pass either method={method!r} or keys, not both")
    if method not in (None, "default", "anonymous"):
        raise DataioError(f"unknown credential method {method!r}; use 'default' or 'anonymous'")
    if name in _S3_LIKE and keys and not {"access_key_id", "secret_access_key"} <= keys.keys():
        raise DataioError(f"{name} keys need both access_key_id and secret_access_key")
    with _lock:
        _credentials[name] = keys or {"method": method or "default"}


def configure_endpoint(scheme: str, url: str, *, region: str | None = None) -> None:
    """Send ``scheme`` requests to ``url`` (an S3-compatible server); replaces the earlier one.

    An ``http://`` endpoint allows plain HTTP. ``region`` sets the signing region.

    Example:
        >>> import dataio  # doctest: +SKIP
        >>> dataio.configure_endpoint("r2", "https://ACCT.r2.cloudflarestorage.com")
    """
    name = _check_scheme(scheme)
    if name not in _S3_LIKE:
        raise DataioError(f"configure_endpoint applies to s3:// and r2://, not {scheme!r}")
    if not url.startswith(("http://", "https://")):
        raise DataioError(f"endpoint {url!r} must start with http:// or https://")
    with _lock:
        _endpoints[name] = (url.rstrip("/"), region)


def configure_transport(
    scheme: str,
    *,
    timeout_secs: float | None = None,
    readall_chunk_mib: int | None = None,
    readall_concurrency: int | None = None,
) -> None:
    """Set the per-attempt timeout and range plan of ``scheme``; replaces its earlier options.

    Large eager reads split into ranged requests of at least ``readall_chunk_mib`` MiB,
    ``readall_concurrency`` at a time, and only when the object has a strong ETag;
    ``readall_concurrency=1`` disables splitting. Defaults: no extra timeout beyond
    obstore's 30 s, 32 MiB, 8 (environment: ``DATAIO_READALL_CHUNK_MIB``,
    ``DATAIO_READALL_CONCURRENCY``). Pass options together to keep them all.

    Example:
        >>> dataio.configure_transport("https", timeout_secs=30)  # doctest: +SKIP
    """
    name = _check_scheme(scheme)
    if timeout_secs is not None and timeout_secs <= 0:
        raise DataioError(f"timeout_secs must be positive, got {timeout_secs!r}")
    for label, value in (
        ("readall_chunk_mib", readall_chunk_mib),
        ("readall_concurrency", readall_concurrency),
    ):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise DataioError(f"{label} must be a positive integer, got {value!r}")
    base = _default_transport()
    with _lock:
        _transports[name] = Transport(
            timeout_secs=timeout_secs,
            readall_chunk_mib=readall_chunk_mib or base.readall_chunk_mib,
            readall_concurrency=readall_concurrency or base.readall_concurrency,
        )


def _default_transport() -> Transport:
    def env_int(name: str, default: int) -> int:
        text = os.environ.get(name)
        if not text:
            return default
        try:
            value = int(text)
        except ValueError:
            raise DataioError(f"{name}={text!r} is not an integer") from None
        if value < 1:
            raise DataioError(f"{name}={text!r} must be at least 1")
        return value

    return Transport(
        readall_chunk_mib=env_int("DATAIO_READALL_CHUNK_MIB", 32),
        readall_concurrency=env_int("DATAIO_READALL_CONCURRENCY", 8),
    )


def transport_for(scheme: str) -> Transport:
    """The transport options in force for ``scheme``."""
    return _transports.get(scheme) or _default_transport()


def reset() -> None:
    """Forget every configuration and cached store (tests use this between servers)."""
    with _lock:
        _credentials.clear()
        _endpoints.clear()
        _transports.clear()
        _stores.clear()


def redact(text: str) -> str:
    """Replace every configured or environment credential inside ``text`` by ``***``."""
    secrets = {v for keys in _credentials.values() for k, v in keys.items() if k != "method"}
    secrets.update(os.environ[k] for k in _SECRET_ENV if os.environ.get(k))
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def store_for(location: Location) -> ObjectStore:
    """The cached obstore store serving ``location``'s scheme and bucket/host."""
    scheme = location.scheme
    if scheme == "file":
        key: tuple[Any, ...] = ("file",)
    else:
        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (
            scheme,
            location.authority,
            tuple(sorted(_credentials.get(scheme, {}).items())),
            _endpoints.get(scheme),
            transport_for(scheme),
            env if scheme in _S3_LIKE else (),
        )
    store = _stores.get(key)
    if store is None:
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = _build(location)
                log.debug("opened a %s store for %r", scheme, location.authority)
    return store


def _retry(transport: Transport) -> dict[str, Any]:
    # Bounded: at most 3 retries, backoff 50 ms doubling up to 1 s, and a ceiling on
    # the whole retried operation so a dead server fails in seconds, not minutes.
    ceiling = 4 * (transport.timeout_secs or 30.0)
    return {
        "max_retries": 3,
        "backoff": {
            "init_backoff": timedelta(milliseconds=50),
            "max_backoff": timedelta(seconds=1),
            "base": 2,
        },
        "retry_timeout": timedelta(seconds=ceiling),
    }


def _client(transport: Transport, *, allow_http: bool, origin: str) -> dict[str, Any]:
    """Client options for requests to ``origin`` (``scheme://host[:port]``): plain HTTP,
    timeouts, and the network environment's proxy and TLS roots."""
    from dataio.io.network import client_options

    options: dict[str, Any] = {"allow_http": allow_http, **client_options(origin)}
    if transport.timeout_secs is not None:
        options["timeout"] = timedelta(seconds=transport.timeout_secs)
        options["connect_timeout"] = timedelta(seconds=min(transport.timeout_secs, 10.0))
    return options


def _build(location: Location) -> ObjectStore:
    from obstore.store import HTTPStore, LocalStore, S3Store

    scheme = location.scheme
    if scheme == "file":
        return LocalStore()
    transport = transport_for(scheme)
    credentials = _credentials.get(scheme, {"method": "default"})
    if scheme in ("http", "https"):
        client = _client(
            transport, allow_http=scheme == "http", origin=f"{scheme}://{location.authority}"
        )
        if "bearer_token" in credentials:
            client["default_headers"] = {"Authorization": f"Bearer {credentials['bearer_token']}"}
        return HTTPStore.from_url(
            f"{scheme}://{location.authority}",
            client_options=client,  # type: ignore[arg-type]
            retry_config=_retry(transport),  # type: ignore[arg-type]
        )
    config: dict[str, Any] = {}
    endpoint, region = _endpoints.get(scheme, (None, None))
    if scheme == "r2" and endpoint is None:
        raise DataioError(
            "r2:// needs an endpoint: dataio.configure_endpoint('r2', "
            "'https://ACCOUNT.r2.cloudflarestorage.com')"
        )
    if endpoint is not None:
        config["endpoint"] = endpoint
    if region is not None:
        config["region"] = region
    elif scheme == "r2":
        config["region"] = "auto"
    if credentials.get("method") == "anonymous":
        config["skip_signature"] = True
    for name in ("access_key_id", "secret_access_key", "session_token"):
        if name in credentials:
            config[name] = credentials[name]
    effective = endpoint or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
    allow_http = bool(effective and effective.startswith("http://"))
    return S3Store(
        location.authority,
        config=config,  # type: ignore[arg-type]
        client_options=_client(  # type: ignore[arg-type]
            transport,
            allow_http=allow_http,
            origin=effective or f"https://{location.authority}.s3.amazonaws.com",
        ),
        retry_config=_retry(transport),  # type: ignore[arg-type]
    )
