"""Per-scheme credentials, endpoints and transport options, and the cached obstore stores.

Every ``configure_*`` call replaces that scheme's options of its kind. A store is built
once per (scheme, bucket or host, configuration) and reused by every thread: obstore
stores are thread-safe and hold the connection pool.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from dataio.exceptions import DataioError
from dataio.io.knobs import object_shards, prepare_runtime, s3_client_options
from dataio.io.uri import SCHEMES, Location

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = [
    "Transport",
    "configure_credentials",
    "configure_endpoint",
    "configure_transport",
    "credentials_for",
    "endpoint_for",
    "redact",
    "store_for",
    "transport_for",
]

log = logging.getLogger("dataio.io")

_S3_LIKE = ("s3", "r2")
_SECRET_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BEARER_TOKEN",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)
# configured values that name things rather than prove identity: shown in messages
_PUBLIC_KEYS = ("method", "account_name", "service_account_path")
# the keys each scheme accepts, besides method (and account_name for az)
_KEYS = {
    "s3": ("access_key_id", "secret_access_key", "session_token"),
    "r2": ("access_key_id", "secret_access_key", "session_token"),
    "gs": ("service_account_path", "service_account_key", "bearer_token"),
    "az": ("account_name", "account_key", "sas_token", "bearer_token"),
    "hf": ("bearer_token",),
    "http": ("bearer_token",),
    "https": ("bearer_token",),
}
# environment variables each scheme's stores read, so a change builds a new store
_ENV_PREFIXES = {
    "s3": ("AWS_", "DATAIO_S3_"),
    "r2": ("AWS_", "DATAIO_S3_"),
    "gs": ("GOOGLE_",),
    "az": ("AZURE_", "AZURITE_"),
    "hf": ("HF_", "HUGGING_FACE_HUB_TOKEN"),
}
# SAS signatures and bearer tokens, wherever a message quotes a URL or header
_SECRET_PATTERNS = (
    (re.compile(r"(\bsig=)[^&\s\"'<>]+", re.IGNORECASE), r"\1***"),
    (re.compile(r"(://[^/\s:@'\"]+:)[^/\s@'\"]+@"), r"\1***@"),  # user:password@host
    (re.compile(r"(Bearer\s+)[^\s\"',;]+"), r"\1***"),
)
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
    account_name: str | None = None,
    account_key: str | None = None,
    sas_token: str | None = None,
    service_account_path: str | None = None,
    service_account_key: str | None = None,
) -> None:
    """Set how requests for ``scheme`` authenticate; replaces earlier credentials.

    ``method="default"`` uses the platform chain (``AWS_*``, ``GOOGLE_*``,
    ``AZURE_STORAGE_*`` or ``HF_TOKEN`` variables, profiles, instance metadata);
    ``"anonymous"`` signs nothing. Keys select static credentials:

    * ``s3``/``r2``: ``access_key_id`` + ``secret_access_key`` (+ ``session_token``);
    * ``gs``: ``service_account_path`` (a key file), ``service_account_key`` (its JSON
      text) or ``bearer_token`` (an OAuth token). An emulator is reached with a key
      holding ``"gcs_base_url"`` and ``"disable_oauth": true``. ``"anonymous"`` suits
      reading public buckets: obstore still fetches a token before writing;
    * ``az``: ``account_name`` with ``account_key``, ``sas_token`` or ``bearer_token``;
      ``account_name`` may also accompany a ``method``;
    * ``hf``, ``http(s)``: ``bearer_token``.

    Secrets never appear in errors or logs.

    Example:
        >>> import dataio
        >>> dataio.configure_credentials("r2", access_key_id="K", secret_access_key="S")
    """
    name = _check_scheme(scheme)
    given = {
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
        "session_token": session_token,
        "bearer_token": bearer_token,
        "account_name": account_name,
        "account_key": account_key,
        "sas_token": sas_token,
        "service_account_path": service_account_path,
        "service_account_key": service_account_key,
    }
    keys = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(keys.keys() - set(_KEYS[name]))
    if unknown:
        allowed = ", ".join(_KEYS[name])
        raise DataioError(
            f"{name}:// takes no {', '.join(unknown)}; its keys are {allowed} (or a method)"
        )
    if method not in (None, "default", "anonymous"):
        raise DataioError(f"unknown credential method {method!r}; use 'default' or 'anonymous'")
    secrets = {k for k in keys if k != "account_name"}
    if secrets and method is not None:
        raise DataioError(f"pass either method={method!r} or keys, not both")
    if name in _S3_LIKE and keys and not {"access_key_id", "secret_access_key"} <= keys.keys():
        raise DataioError(f"{name} keys need both access_key_id and secret_access_key")
    if len(secrets) > 1 and name in ("gs", "az"):
        raise DataioError(f"{name}:// takes one of {', '.join(sorted(secrets))}, not several")
    if name == "az" and secrets and "account_name" not in keys:
        keys["account_name"] = _azure_env_account() or ""
        if not keys["account_name"]:
            raise DataioError(
                "az:// keys need the storage account: pass account_name=... or set "
                "AZURE_STORAGE_ACCOUNT_NAME"
            )
    if "sas_token" in keys:
        keys["sas_token"] = keys["sas_token"].lstrip("?")
    if not secrets:
        keys["method"] = method or "default"
    with _lock:
        _credentials[name] = keys


def configure_endpoint(scheme: str, url: str, *, region: str | None = None) -> None:
    """Send ``scheme`` requests to ``url`` instead of the service's own endpoint;
    replaces the earlier one.

    For ``s3``/``r2`` an S3-compatible server (``region`` sets the signing region);
    ``gs`` a GCS JSON/XML API base such as an emulator; ``az`` the blob account
    endpoint (path style ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite, whose
    first path segment then names the account); ``hf`` a Hub mirror (else
    ``HF_ENDPOINT``). An ``http://`` endpoint allows plain HTTP.

    Example:
        >>> import dataio
        >>> dataio.configure_endpoint("r2", "https://ACCT.r2.cloudflarestorage.com")
    """
    name = _check_scheme(scheme)
    if name in ("http", "https"):
        raise DataioError(
            f"configure_endpoint does not apply to {scheme!r}: its URIs name the host"
        )
    if region is not None and name not in _S3_LIKE:
        raise DataioError(f"region applies to s3:// and r2:// only, not {scheme!r}")
    if not url.startswith(("http://", "https://")) or not urlsplit(url).hostname:
        raise DataioError(f"endpoint {url!r} must be an http:// or https:// URL with a host")
    with _lock:
        _endpoints[name] = (url.rstrip("/"), region)


def credentials_for(scheme: str) -> dict[str, str]:
    """The credentials configured for ``scheme`` (``{"method": "default"}`` if none)."""
    return dict(_credentials.get(scheme) or {"method": "default"})


def endpoint_for(scheme: str) -> tuple[str, str | None] | None:
    """The ``(url, region)`` configured for ``scheme``, or None."""
    return _endpoints.get(scheme)


def configure_transport(
    scheme: str,
    *,
    timeout_secs: float | None = None,
    readall_chunk_mib: int | None = None,
    readall_concurrency: int | None = None,
) -> None:
    """Set the per-attempt timeout and range plan of ``scheme``; replaces its earlier options.

    Large eager reads split into ranged requests of at least ``readall_chunk_mib`` MiB,
    ``readall_concurrency`` at a time, and only when the object has a strong ETag and
    its first chunk arrived slower than 400 MB/s (a faster connection reads on alone);
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
        readall_concurrency=env_int("DATAIO_READALL_CONCURRENCY", object_shards() or 8),
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
        _derived.clear()


_derived: dict[tuple[int, str], tuple[Any, Any]] = {}


def derived_store(base: Any, purpose: str, build: Callable[[], Any]) -> Any:
    """A store made from ``base`` for ``purpose`` (e.g. streams), built once per base
    store and forgotten by :func:`reset` along with the stores themselves."""
    key = (id(base), purpose)
    with _lock:
        hit = _derived.get(key)
        if hit is not None and hit[0] is base:
            return hit[1]
    made = build()  # outside the lock: build may read the configuration
    with _lock:
        hit = _derived.get(key)
        if hit is None or hit[0] is not base:
            hit = _derived[key] = (base, made)  # keeps base alive, so its id stays unique
    return hit[1]  # a thread that built concurrently gets the same store as the first


def redact(text: str) -> str:
    """Replace every configured or environment credential inside ``text`` by ``***``,
    and any SAS signature or bearer token, in whatever URL encoding it appears.

    Example:
        >>> redact("GET https://a.blob.core.windows.net/c/k?sv=2021&sig=abc%3D")
        'GET https://a.blob.core.windows.net/c/k?sv=2021&sig=***'
    """
    secrets: set[str] = set()
    for keys in list(_credentials.values()):
        for k, v in keys.items():
            if k not in _PUBLIC_KEYS:
                secrets.add(v)
                secrets.update(_json_secrets(v) if k == "service_account_key" else ())
                secrets.update(_sas_signatures(v) if k == "sas_token" else ())
    secrets.update(os.environ[k] for k in _SECRET_ENV if os.environ.get(k))
    secrets.update(_json_secrets(os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY", "")))
    secrets.update(_proxy_passwords())
    variants = {form for s in secrets for form in (s, quote(s, safe=""), unquote(s))}
    for secret in sorted(variants, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _proxy_passwords() -> set[str]:
    from dataio.io.network import proxy_passwords

    return proxy_passwords()


def _sas_signatures(token: str) -> list[str]:
    """The ``sig`` values of a SAS token: the part that grants access."""
    return [v for k, v in parse_qsl(token.lstrip("?")) if k == "sig"]


def _json_secrets(text: str) -> list[str]:
    """The private key of a service-account JSON text, and each line of it."""
    try:
        value = json.loads(text)
    except ValueError:
        return []
    key = value.get("private_key") if isinstance(value, dict) else None
    if not isinstance(key, str) or not key:
        return []
    body = [line for line in key.splitlines() if len(line) >= 16 and "-----" not in line]
    return [key, *body]


def store_for(location: Location) -> ObjectStore:
    """The cached obstore store serving ``location``'s scheme and bucket/host."""
    scheme = location.scheme
    if scheme == "file":
        key: tuple[Any, ...] = ("file",)
    else:
        prefixes = _ENV_PREFIXES.get(scheme, ())
        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefixes)))
        key = (
            scheme,
            location.authority,
            tuple(sorted(_credentials.get(scheme, {}).items())),
            _endpoints.get(scheme),
            transport_for(scheme),
            env if prefixes else (),
        )
    store = _stores.get(key)
    if store is None:
        if scheme == "hf":
            from dataio.io import hf

            hf.resolve(location)  # may ask the Hub which repository: not under the lock
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = _build(location)
                log.debug("opened a %s store for %r", scheme, redact(location.authority))
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


def _options(transport: Transport, base: str) -> dict[str, Any]:
    """Client and retry options of a store whose requests go to ``base`` (a URL): plain
    HTTP only for an ``http://`` base, timeouts, and the network environment's proxy
    and TLS roots for its origin."""
    from dataio.io.network import client_options, origin

    client: dict[str, Any] = {
        "allow_http": base.startswith("http://"),
        **client_options(origin(base)),
    }
    if transport.timeout_secs is not None:
        client["timeout"] = timedelta(seconds=transport.timeout_secs)
        client["connect_timeout"] = timedelta(seconds=min(transport.timeout_secs, 10.0))
    return {"client_options": client, "retry_config": _retry(transport)}


def _store_credentials(credentials: dict[str, str], **names: str) -> dict[str, Any]:
    """obstore's config keys for ``credentials``: ``skip_signature`` for the anonymous
    method, and each configured key under obstore's name for it (``names``: ours=theirs)."""
    config: dict[str, Any] = {}
    if credentials.get("method") == "anonymous":
        config["skip_signature"] = True
    config.update({names[k]: v for k, v in credentials.items() if k in names})
    return config


def _build(location: Location) -> ObjectStore:
    from obstore.store import LocalStore

    prepare_runtime()  # DATAIO_IO_WORKERS sizes obstore's runtime before its first use
    scheme = location.scheme
    if scheme == "file":
        return LocalStore()
    builders = {"gs": _build_gcs, "az": _build_azure, "hf": _build_hf}
    build = builders.get(scheme, _build_http if scheme in ("http", "https") else _build_s3)
    return build(location, transport_for(scheme), credentials_for(scheme))


def _build_http(location: Location, transport: Transport, credentials: dict[str, str]) -> Any:
    from obstore.store import HTTPStore

    base = f"{location.scheme}://{location.authority}"
    options = _options(transport, base)
    if "bearer_token" in credentials:
        headers = {"Authorization": f"Bearer {credentials['bearer_token']}"}
        options["client_options"]["default_headers"] = headers
    return HTTPStore.from_url(base, **options)


def s3_target(scheme: str) -> tuple[str | None, str | None]:
    """The configured (endpoint, region) of an S3-like scheme; ``r2`` needs an endpoint
    and signs for region ``auto`` unless told otherwise."""
    endpoint, region = _endpoints.get(scheme, (None, None))
    if scheme == "r2":
        if endpoint is None:
            raise DataioError(
                "r2:// needs an endpoint: dataio.configure_endpoint('r2', "
                "'https://ACCOUNT.r2.cloudflarestorage.com')"
            )
        region = region or "auto"
    return endpoint, region


def _build_s3(location: Location, transport: Transport, credentials: dict[str, str]) -> Any:
    from obstore.store import S3Store

    config: dict[str, Any] = {}
    endpoint, region = s3_target(location.scheme)
    if endpoint is not None:
        config["endpoint"] = endpoint
    if region is not None:
        config["region"] = region
    config.update(
        _store_credentials(
            credentials,
            access_key_id="access_key_id",
            secret_access_key="secret_access_key",
            session_token="session_token",
        )
    )
    base = (
        endpoint
        or os.environ.get("AWS_ENDPOINT_URL")
        or os.environ.get("AWS_ENDPOINT")
        or f"https://{location.authority}.s3.amazonaws.com"
    )
    options = _options(transport, base)
    options["client_options"].update(s3_client_options())  # DATAIO_S3_HTTP_VERSION
    return S3Store(
        location.authority,
        config=config,  # type: ignore[arg-type]
        **options,
    )


def _build_gcs(location: Location, transport: Transport, credentials: dict[str, str]) -> Any:
    from obstore.store import GCSStore

    config = _store_credentials(
        credentials,
        service_account_path="service_account",
        service_account_key="service_account_key",
        bearer_token="bearer_token",
    )
    configured = _endpoints.get("gs")
    if configured is not None:
        config["base_url"] = configured[0]
    base = _gcs_base(configured, credentials)
    return GCSStore(
        location.authority,
        config=config,  # type: ignore[arg-type]
        **_options(transport, base),
    )


def _gcs_base(configured: tuple[str, str | None] | None, credentials: dict[str, str]) -> str:
    """Where GCS requests go: the configured endpoint, else the service account's
    ``gcs_base_url`` (how emulators are reached), else ``GOOGLE_BASE_URL``, else GCS."""
    if configured is not None:
        return configured[0]
    texts = [credentials.get("service_account_key"), os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY")]
    for path in (
        credentials.get("service_account_path"),
        os.environ.get("GOOGLE_SERVICE_ACCOUNT"),
        os.environ.get("GOOGLE_SERVICE_ACCOUNT_PATH"),
        os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"),
    ):
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    texts.append(f.read())
            except OSError:
                continue  # obstore reports the unreadable file when it loads it
    for text in texts:
        try:
            value = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("gcs_base_url"), str):
            return str(value["gcs_base_url"])
    return os.environ.get("GOOGLE_BASE_URL") or "https://storage.googleapis.com"


def _build_azure(location: Location, transport: Transport, credentials: dict[str, str]) -> Any:
    from obstore.store import AzureStore

    config: dict[str, Any] = {}
    configured = _endpoints.get("az")
    emulator = os.environ.get("AZURE_STORAGE_USE_EMULATOR", "").lower() in ("1", "true")
    account = credentials.get("account_name") or _azure_env_account()
    if configured is not None:
        config["endpoint"] = configured[0]
        segments = urlsplit(configured[0]).path.strip("/").split("/")
        account = account or segments[0]  # path-style endpoints start with the account
    if not account and not emulator:
        raise DataioError(
            f"cannot open {str(location)!r}: az:// needs a storage account; use "
            "dataio.configure_credentials('az', account_name=..., account_key=...) or set "
            "AZURE_STORAGE_ACCOUNT_NAME (and AZURE_STORAGE_ACCOUNT_KEY)"
        )
    if account:
        config["account_name"] = account
    config.update(
        _store_credentials(
            credentials, account_key="account_key", sas_token="sas_key", bearer_token="token"
        )
    )
    if configured is not None:
        base = configured[0]
    elif emulator:
        base = os.environ.get("AZURITE_BLOB_STORAGE_URL") or "http://127.0.0.1:10000"
    else:
        base = f"https://{account}.blob.core.windows.net"
    return AzureStore(
        location.authority,
        config=config,  # type: ignore[arg-type]
        **_options(transport, base),
    )


def _azure_env_account() -> str | None:
    return os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT")


def _build_hf(location: Location, transport: Transport, credentials: dict[str, str]) -> Any:
    from obstore.store import HTTPStore

    from dataio.io import hf

    if hf.offline():  # HF_HUB_OFFLINE: the shared cache's snapshot, no network
        return hf.cache_store(location)
    base = hf.endpoint(_endpoints.get("hf"))
    options = _options(transport, base)
    secret = hf.token(credentials)
    if secret:
        # reqwest drops it when a redirect leaves this origin (the Hub's CDN)
        options["client_options"]["default_headers"] = {"Authorization": f"Bearer {secret}"}
    return HTTPStore.from_url(hf.resolve_url(base, location), **options)
