"""Hugging Face Hub locations: ``hf://[datasets/|spaces/]org/name[@revision]/path``.

Files are read through the Hub's ``resolve`` URLs by an obstore HTTP store (built in
:mod:`dataio.io.config`), which follows the Hub's redirects to its CDN and drops the
``Authorization`` header when a redirect leaves the Hub's origin. Listings use the
Hub's ``tree`` API, page by page (``Link: rel="next"``). The Hub is read-only here.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote

from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    PermissionDeniedError,
    TransportError,
    TransportTimeoutError,
)
from dataio.io.network import origin, proxy_for, tls_context
from dataio.io.uri import Location

__all__ = ["DEFAULT_ENDPOINT", "Repo", "endpoint", "keys", "ls", "repo", "resolve_url", "token"]

DEFAULT_ENDPOINT = "https://huggingface.co"
_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_MAX_PAGES = 10_000


class Repo:
    """The repository of an ``hf`` location: ``kind`` (models, datasets, spaces),
    ``repo_id`` (``org/name``) and ``revision`` (decoded, default ``main``)."""

    __slots__ = ("kind", "repo_id", "revision")

    def __init__(self, kind: str, repo_id: str, revision: str) -> None:
        self.kind, self.repo_id, self.revision = kind, repo_id, revision

    @property
    def url_prefix(self) -> str:
        """``[datasets/|spaces/]org/name``, as the Hub's file URLs start."""
        return self.repo_id if self.kind == "models" else f"{self.kind}/{self.repo_id}"


def repo(location: Location) -> Repo:
    """Split an ``hf`` location's authority into its :class:`Repo`.

    Example:
        >>> from dataio.io.uri import parse
        >>> r = repo(parse("hf://datasets/org/name@refs%2Fpr%2F1/a.json"))
        >>> (r.kind, r.repo_id, r.revision)
        ('datasets', 'org/name', 'refs/pr/1')
    """
    name, _, revision = location.authority.partition("@")
    parts = name.split("/")
    kind = parts.pop(0) if len(parts) == 3 else "models"
    return Repo(kind, "/".join(parts), unquote(revision) if revision else "main")


def endpoint(configured: tuple[str, str | None] | None) -> str:
    """The Hub's base URL: the configured endpoint, else ``HF_ENDPOINT``, else the Hub."""
    if configured is not None:
        return configured[0].rstrip("/")
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token(credentials: dict[str, str]) -> str | None:
    """The bearer token: a configured one, none for ``method="anonymous"``, else
    ``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``)."""
    if "bearer_token" in credentials:
        return credentials["bearer_token"]
    if credentials.get("method") == "anonymous":
        return None
    return next((os.environ[k] for k in _TOKEN_ENV if os.environ.get(k)), None)


def resolve_url(base: str, location: Location) -> str:
    """The URL that files of ``location``'s repository and revision live under.

    Example:
        >>> from dataio.io.uri import parse
        >>> resolve_url("https://huggingface.co", parse("hf://datasets/o/n@refs/pr/1/x"))
        'https://huggingface.co/datasets/o/n/resolve/refs%2Fpr%2F1'
    """
    found = repo(location)
    return f"{base}/{found.url_prefix}/resolve/{quote(found.revision, safe='')}"


def ls(location: Location) -> list[str]:
    """The files and folders (ending in ``/``) directly under an ``hf`` prefix.

    Example:
        >>> ls(parse("hf://datasets/org/name/data/"))  # doctest: +SKIP
        ['hf://datasets/org/name/data/train.parquet', 'hf://datasets/org/name/data/val/']
    """
    found = []
    for entry in _tree(location, location.key.strip("/"), recursive=False):
        path = str(entry["path"])
        found.append(location.child(path + "/" if entry["type"] == "directory" else path))
    return sorted(found)


def keys(location: Location, prefix: str | None) -> list[str]:
    """Every file path (not folders) under the folder ``prefix`` of the repository.

    Example:
        >>> keys(parse("hf://org/model/**/*.safetensors"), None)  # doctest: +SKIP
        ['model-00001-of-00002.safetensors', 'sub/x.safetensors']
    """
    entries = _tree(location, (prefix or "").strip("/"), recursive=True)
    return [str(e["path"]) for e in entries if e["type"] == "file"]


def _tree(location: Location, path: str, *, recursive: bool) -> list[dict[str, Any]]:
    from dataio.io.config import credentials_for, endpoint_for, transport_for

    found = repo(location)
    base = endpoint(endpoint_for("hf"))
    url = f"{base}/api/{found.kind}/{found.repo_id}/tree/{quote(found.revision, safe='')}"
    if path:
        url += "/" + quote(path)
    if recursive:
        url += "?recursive=true"
    secret = token(credentials_for("hf"))
    timeout = transport_for("hf").timeout_secs or 30.0
    entries: list[dict[str, Any]] = []
    for _ in range(_MAX_PAGES):
        body, next_url = _get(url, secret, timeout, location, missing_path_ok=bool(path))
        entries.extend(body)
        if next_url is None:
            return entries
        if origin(next_url) != origin(base):
            raise DataioError(
                f"ls {str(location)!r}: the Hub paged to another origin ({origin(next_url)!r}); "
                "check dataio.configure_endpoint('hf', ...) or HF_ENDPOINT"
            )
        url = next_url
    raise DataioError(f"ls {str(location)!r}: the Hub listing did not end after {_MAX_PAGES} pages")


def _opener(url: str) -> urllib.request.OpenerDirector:
    proxy = proxy_for(origin(url))
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}),
        urllib.request.HTTPSHandler(context=tls_context()),
        _SameOriginRedirects(),
    )


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the token to another origin."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and origin(newurl) != origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _get(
    url: str, secret: str | None, timeout: float, location: Location, *, missing_path_ok: bool
) -> tuple[list[dict[str, Any]], str | None]:
    headers = {"Accept": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    target = str(location)
    try:
        with _opener(url).open(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
            body = json.loads(r.read())
            link = _NEXT.search(r.headers.get("Link", ""))
    except urllib.error.HTTPError as exc:
        code = exc.headers.get("X-Error-Code", "")
        if exc.code == 404 and code == "EntryNotFound" and missing_path_ok:
            return [], None  # a missing folder lists as empty, as on object stores
        raise _http_error(exc.code, code, target) from None
    except TimeoutError:
        raise TransportTimeoutError(
            f"ls {target!r} timed out; raise the limit with "
            "dataio.configure_transport('hf', timeout_secs=...)"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransportError(f"ls {target!r} failed: the Hub did not answer ({reason})") from None
    except ValueError:
        raise DataioError(f"ls {target!r}: the Hub answered something other than JSON") from None
    if not isinstance(body, list):
        raise DataioError(f"ls {target!r}: the Hub answered {type(body).__name__}, not a list")
    return body, link.group(1) if link else None


def _http_error(status: int, code: str, target: str) -> DataioError:
    if status == 401:
        return AuthenticationError(
            f"ls {target!r}: the Hub refused the request ({code or 401}); the repository "
            "may be private, gated or missing: set HF_TOKEN or "
            "dataio.configure_credentials('hf', bearer_token=...)"
        )
    if status == 403:
        return PermissionDeniedError(
            f"ls {target!r}: permission denied; the token may lack access to this repository"
        )
    if status == 404:
        return NotFoundError(
            f"no repository, revision or folder at {target!r} ({code or 404}); "
            "check the repository id and the @revision"
        )
    return TransportError(f"ls {target!r} failed: the Hub answered HTTP {status} {code}".rstrip())
