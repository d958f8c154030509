"""Turn obstore and OS errors into dataio errors whose messages carry no credentials."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    TransportError,
    TransportTimeoutError,
)
from dataio.io.config import redact

__all__ = ["call", "translate"]

T = TypeVar("T")

_AUTH_CODES = re.compile(
    r"InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken|"
    r"AuthFailure|InvalidClientTokenId|401 Unauthorized|"
    # Azure answers a bad key or SAS with 403 and this code or message (Azurite says
    # AuthorizationFailure, which Azure keeps for network rules, with the same message)
    r"AuthenticationFailed|InvalidAuthenticationInfo|Server failed to authenticate|"
    # GCS
    r"AuthenticationRequired|Invalid Credentials"
)
# where each scheme's credentials come from, for the hint of an authentication error
_CREDENTIAL_HINTS = {
    "gs": "dataio.configure_credentials('gs', ...) or the GOOGLE_* environment",
    "az": "dataio.configure_credentials('az', ...) or the AZURE_STORAGE_* environment",
    "hf": (
        "HF_TOKEN, huggingface-cli login or dataio.configure_credentials('hf', "
        "bearer_token=...); the repository may also be private, gated or missing"
    ),
    "http": "dataio.configure_credentials(scheme, bearer_token=...)",
    "https": "dataio.configure_credentials(scheme, bearer_token=...)",
}
_TLS = re.compile(r"InvalidCertificate\(\s*(\w+)")
_PROXY_AUTH = re.compile(r"407 Proxy Authentication Required|ProxyAuthRequired")
_TIMEOUT = re.compile(r"timed out|TimedOut|kind: Timeout|deadline has elapsed", re.IGNORECASE)
_CONNECTION = re.compile(
    r"connection|connect|error sending request|broken pipe|reset by peer|"
    r"unexpected end|IncompleteMessage|body",
    re.IGNORECASE,
)


def call(fn: Callable[[], T], uri: object, verb: str) -> T:
    """Run ``fn`` and raise a translated error for ``uri`` if it fails.

    The new error is raised outside the ``except`` block so the original exception,
    whose text may quote request details, is not chained to it.
    """
    try:
        return fn()
    except DataioError:
        raise
    except Exception as exc:  # obstore raises several unrelated types
        error = translate(exc, uri, verb)
    raise error


# the status itself, not any number that happens to contain 416 (byte counts, ports)
_RANGE = re.compile(r"\b416\b|Range Not Satisfiable|InvalidRange")


def translate(exc: BaseException, uri: object, verb: str) -> DataioError:
    """The dataio error for ``exc`` raised while doing ``verb`` on ``uri``."""
    from obstore import exceptions as obx

    detail = _summary(exc)
    full = str(exc)  # obstore's debug part names the failure kind (Timeout, Connect, ...)
    target = redact(str(uri))
    if isinstance(exc, obx.NotFoundError | FileNotFoundError):
        return NotFoundError(
            f"no object at {target!r}; check the path, bucket and key{_offline_hint(uri)}"
        )
    if isinstance(exc, ValueError) and "null byte" in full:
        # os.open refuses a path holding NUL; no file can have such a name
        return NotFoundError(f"no object at {target!r}: the path holds a NUL byte")
    # the full text: error bodies name their code after the URL, past the summary's cut
    if isinstance(exc, obx.UnauthenticatedError) or _AUTH_CODES.search(full):
        return AuthenticationError(
            f"{verb} {target!r}: the server rejected the credentials ({_first_code(full)}); "
            f"check {_hint(uri)}"
        )
    if isinstance(exc, obx.PermissionDeniedError | PermissionError) or "403 Forbidden" in detail:
        return PermissionDeniedError(
            f"{verb} {target!r}: permission denied; the credentials in use may not do this"
        )
    if isinstance(exc, obx.PreconditionError) or "412 Precondition Failed" in full:
        # only pinned reads send If-Match: the object is no longer the version they read
        return TransportError(
            f"{verb} {target!r}: the object changed while it was being read (its ETag no "
            "longer matches the one its first bytes came with); read it again"
        )
    if _RANGE.search(detail):
        return OutOfRangeError(f"{verb} {target!r}: the byte range lies past the end of the object")
    tls = _TLS.search(full)
    if tls:
        return TransportError(
            f"{verb} {target!r}: the server's TLS certificate is not trusted ({tls.group(1)}); "
            "if a private CA signed it, point SSL_CERT_FILE (or AWS_CA_BUNDLE) at a PEM "
            "bundle holding that CA"
        )
    if _PROXY_AUTH.search(full):
        return AuthenticationError(
            f"{verb} {target!r}: the HTTP proxy rejected its credentials (407); check "
            "user:password in HTTP_PROXY / HTTPS_PROXY / ALL_PROXY (percent-encode "
            "reserved characters)"
        )
    if isinstance(exc, TimeoutError) or _TIMEOUT.search(full):
        return TransportTimeoutError(
            f"{verb} {target!r} timed out ({detail}); raise the limit with "
            "dataio.configure_transport(scheme, timeout_secs=...)"
        )
    if isinstance(exc, ConnectionError) or _CONNECTION.search(full):
        return TransportError(f"{verb} {target!r} failed: the server went away ({detail})")
    if isinstance(exc, IsADirectoryError):
        return DataioError(f"{verb} {target!r}: it is a directory, not a file")
    return DataioError(f"{verb} {target!r} failed: {detail}")


_SIGNED_PARTS = re.compile(
    r"<(AWSAccessKeyId|SignatureProvided|StringToSign|StringToSignBytes|CanonicalRequest|"
    r"CanonicalRequestBytes|HostId|RequestId)>.*?</\1>",
    re.DOTALL,
)


def _summary(exc: BaseException) -> str:
    text = str(exc).split("\n\nDebug source:", 1)[0].strip()
    # S3 error bodies quote the access key and the signed request: never show them
    text = _SIGNED_PARTS.sub(r"<\1>***</\1>", text)
    text = re.sub(r"Credential=[^,\s]+", "Credential=***", text)
    text = " ".join(text.split())
    if len(text) > 300:
        text = text[:300] + "..."
    return redact(text) or type(exc).__name__


def _offline_hint(uri: object) -> str:
    from dataio.io.hf import offline_hint
    from dataio.io.uri import parse

    try:
        return offline_hint(parse(str(uri)))
    except DataioError:
        return ""


def _hint(uri: object) -> str:
    text = str(uri)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    default = "dataio.configure_credentials or the AWS_* environment"
    return _CREDENTIAL_HINTS.get(scheme, default)


def _first_code(detail: str) -> str:
    found = _AUTH_CODES.search(detail)
    return found.group(0) if found else "unauthenticated"
