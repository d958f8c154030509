"""Hugging Face Hub locations: ``hf://[datasets/|spaces/][owner/]name[@revision]/path``.

Files are read through the Hub's ``resolve`` URLs by an obstore HTTP store (built in
:mod:`dataio.io.config`), which follows the Hub's redirects to its CDN and drops the
``Authorization`` header when a redirect leaves the Hub's origin. Listings use the
Hub's ``tree`` API, page by page (``Link: rel="next"``). The Hub is read-only here.

The Hub's conventions (those of ``huggingface_hub``): the token comes from ``HF_TOKEN``
or the file ``huggingface-cli login`` writes; ``HF_ENDPOINT`` names a mirror;
``HF_HUB_OFFLINE=1`` reads the shared cache (``HF_HUB_CACHE``) and nothing else.
``owner/name`` without ``@revision`` may also be a repository without owner (``gpt2``)
and a folder of it: the Hub is asked once which one exists (through ``huggingface_hub``
when it is installed, else directly), as ``huggingface_hub`` asked before it dropped
such ids.

Online, with ``huggingface_hub`` installed (and set up for the endpoint in use), a
whole-file read goes through the shared cache (:func:`download`): ``hf_hub_download``
fetches the file into ``HF_HUB_CACHE`` once and every later read (and any
``HF_HUB_OFFLINE`` read) is served from there. Ranged reads (a safetensors tensor, an
HDF5 dataset) of a file the cache already holds read it there (:func:`cached_file`);
of any other file they stay ranged, as do ``read(offset=, size=)``, scans and
streams: caching them would mean downloading whole files that are read in part. So
does a reader that fetches the rest of a file whole after reading its header by
ranges (``read_safetensors`` asking for most of the tensors): it must read the
version its header came from (:class:`~dataio.io.ranged.Pin`), which
``hf_hub_download`` cannot promise, so it downloads directly (into
``DATAIO_CACHE_DIR`` when that is set), unless the shared cache held the file already.
Without ``huggingface_hub`` files are read directly from the Hub, and the cache is
only read offline.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
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

__all__ = [
    "DEFAULT_ENDPOINT",
    "Repo",
    "cache_dir",
    "cache_store",
    "cached_file",
    "download",
    "endpoint",
    "keys",
    "ls",
    "offline",
    "offline_hint",
    "repo",
    "resolve",
    "resolve_url",
    "token",
    "token_path",
]

log = logging.getLogger("dataio.io")

DEFAULT_ENDPOINT = "https://huggingface.co"
_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TRUE = ("1", "ON", "YES", "TRUE")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_MAX_PAGES = 10_000
_MEMORY_FILE_BYTES = 64 << 20
# (endpoint, kind, repo id, revision, token) -> whether the Hub has that repository
_known: dict[tuple[str, str, str, str, str | None], bool] = {}


class Repo:
    """The repository of an ``hf`` location: ``kind`` (models, datasets, spaces),
    ``repo_id`` (``owner/name`` or ``name``), ``revision`` (decoded, default ``main``),
    ``pinned`` (the revision was written) and ``subfolder``: the part of the written
    repository that is a folder of it (``onnx`` of ``hf://gpt2/onnx/model.onnx``)."""

    __slots__ = ("kind", "pinned", "repo_id", "revision", "subfolder")

    def __init__(
        self, kind: str, repo_id: str, revision: str, *, pinned: bool = False, subfolder: str = ""
    ) -> None:
        self.kind, self.repo_id, self.revision = kind, repo_id, revision
        self.pinned, self.subfolder = pinned, subfolder

    @property
    def url_prefix(self) -> str:
        """``[datasets/|spaces/]owner/name``, as the Hub's file URLs start."""
        return self.repo_id if self.kind == "models" else f"{self.kind}/{self.repo_id}"

    @property
    def folder(self) -> str:
        """The repository's folder in the shared cache: ``models--owner--name``."""
        return "--".join([self.kind, *self.repo_id.split("/")])

    def path(self, key: str) -> str:
        """The path in the repository of ``key``, a key of a location of this repository."""
        return "/".join(p for p in (self.subfolder, key) if p)


def repo(location: Location) -> Repo:
    """The repository of an ``hf`` location as written (see :func:`resolve`).

    Example:
        >>> from dataio.io.uri import parse
        >>> r = repo(parse("hf://datasets/org/name@refs%2Fpr%2F1/a.json"))
        >>> (r.kind, r.repo_id, r.revision)
        ('datasets', 'org/name', 'refs/pr/1')
    """
    name, at, revision = location.authority.partition("@")
    parts = name.split("/")
    kind = parts.pop(0) if parts[0] in ("datasets", "spaces") and len(parts) > 1 else "models"
    return Repo(kind, "/".join(parts), unquote(revision) if at else "main", pinned=bool(at))


def resolve(location: Location) -> Repo:
    """The repository of an ``hf`` location, asking the Hub when the URI leaves it open.

    ``hf://a/b/c`` names the repository ``a/b``, unless the Hub has no ``a/b`` but has
    ``a``: then it is the file ``b/c`` of ``a`` (``hf://gpt2/config.json``). Answers are
    remembered for the process; offline, the shared cache decides.

    Example:
        >>> resolve(parse("hf://gpt2/onnx/model.onnx")).subfolder  # doctest: +SKIP
        'onnx'
    """
    written = repo(location)
    if written.pinned or "/" not in written.repo_id:
        return written
    owner, name = written.repo_id.split("/")
    bare = Repo(written.kind, owner, written.revision, subfolder=name)
    if _exists(written) is False and _exists(bare):
        return bare
    return written


def endpoint(configured: tuple[str, str | None] | None) -> str:
    """The Hub's base URL: the configured endpoint, else ``HF_ENDPOINT``, else the Hub."""
    if configured is not None:
        return configured[0].rstrip("/")
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token(credentials: dict[str, str]) -> str | None:
    """The bearer token: a configured one, none for ``method="anonymous"``, else
    ``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``), else the token file that
    ``huggingface-cli login`` writes (:func:`token_path`)."""
    if "bearer_token" in credentials:
        return credentials["bearer_token"]
    if credentials.get("method") == "anonymous":
        return None
    found = next((os.environ[k].strip() for k in _TOKEN_ENV if os.environ.get(k)), None)
    if found:
        return found
    try:
        return Path(token_path()).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None  # no login (or an unreadable file): anonymous, as huggingface_hub


def _home() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _expand(os.environ.get("HF_HOME") or os.path.join(base, "huggingface"))


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def token_path() -> str:
    """The token file: ``HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
    ``~/.cache/huggingface/token`` (``$XDG_CACHE_HOME/huggingface/token``)."""
    configured = os.environ.get("HF_TOKEN_PATH")
    return _expand(configured) if configured else os.path.join(_home(), "token")


def cache_dir() -> str:
    """The shared hub cache: ``HF_HUB_CACHE`` (or ``HUGGINGFACE_HUB_CACHE``), else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    configured = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return _expand(configured) if configured else os.path.join(_home(), "hub")


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) forbids the network."""
    # as huggingface_hub: the first one set decides (HF_HUB_OFFLINE=0 wins)
    value = next((os.environ[k] for k in _OFFLINE_ENV if os.environ.get(k)), "")
    return value.strip().upper() in _TRUE


def resolve_url(base: str, location: Location) -> str:
    """The URL that the keys of ``location`` live under (its repository's files at its
    revision, in its subfolder).

    Example:
        >>> from dataio.io.uri import parse
        >>> resolve_url("https://huggingface.co", parse("hf://datasets/o/n@refs/pr/1/x"))
        'https://huggingface.co/datasets/o/n/resolve/refs%2Fpr%2F1'
    """
    found = resolve(location)
    url = f"{base}/{found.url_prefix}/resolve/{quote(found.revision, safe='')}"
    return url + (f"/{quote(found.subfolder)}" if found.subfolder else "")


def cache_store(location: Location) -> Any:
    """An obstore store over ``location``'s snapshot in the shared cache (offline mode).

    Raises:
        NotFoundError: the cache holds no snapshot of that repository and revision.
    """
    from obstore.store import LocalStore

    found = resolve(location)
    snapshot = _snapshot(found)
    if snapshot is None:
        written = repo(location)
        also = f" (nor {written.repo_id!r})" if written.repo_id != found.repo_id else ""
        raise NotFoundError(
            f"{str(location)!r}: HF_HUB_OFFLINE is set and the Hugging Face cache "
            f"{cache_dir()!r} holds no {found.kind[:-1]} {found.repo_id!r}{also} at revision "
            f"{found.revision!r}; download it first (huggingface-cli download) or unset "
            "HF_HUB_OFFLINE"
        )
    folder = os.path.join(snapshot, found.subfolder)
    if not location.key and os.path.isfile(folder):
        return _file_store(location, folder)
    if not os.path.isdir(folder):
        raise NotFoundError(f"no object at {str(location)!r}{offline_hint(location)}")
    return LocalStore(prefix=folder)


def _file_store(location: Location, path: str) -> Any:
    # hf://gpt2/config.json is the key "" under "gpt2/config.json", which a local store
    # cannot serve: hold the (small) file in memory instead
    import obstore
    from obstore.store import MemoryStore

    size = os.path.getsize(path)
    if size > _MEMORY_FILE_BYTES:
        raise DataioError(
            f"{str(location)!r}: offline, a top-level file of a repository without owner is "
            f"held in memory, and this one has {size} bytes; write the revision, which "
            f"reads it in place: hf://{location.authority.replace('/', '@main/', 1)}"
        )
    store = MemoryStore()
    obstore.put(store, "", Path(path).read_bytes())
    return store


def offline_hint(location: Location) -> str:
    """What a missing object of ``location`` means: '' online, the cache offline."""
    if location.scheme != "hf" or not offline():
        return ""
    return (
        f" (HF_HUB_OFFLINE is set: only files in the Hugging Face cache {cache_dir()!r} "
        "can be read)"
    )


def _snapshot(found: Repo) -> str | None:
    """The snapshot folder of a repository's revision in the shared cache, if any."""
    base = os.path.join(cache_dir(), found.folder)
    commit = found.revision
    if not _COMMIT.fullmatch(commit):
        refs = os.path.join(base, "refs")
        ref = os.path.normpath(os.path.join(refs, commit))
        if not ref.startswith(refs + os.sep):
            return None  # "@../x" names no ref
        try:
            commit = Path(ref).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
    if not _COMMIT.fullmatch(commit):
        return None  # a damaged ref: not a snapshot of this cache
    snapshot = os.path.join(base, "snapshots", commit)
    return snapshot if os.path.isdir(snapshot) else None


def _exists(found: Repo) -> bool | None:
    """Whether the Hub (or offline, the cache) has the repository; None: no answer."""
    if offline():
        return os.path.isdir(os.path.join(cache_dir(), found.folder))
    from dataio.io.config import credentials_for, endpoint_for, transport_for

    base = endpoint(endpoint_for("hf"))
    secret = token(credentials_for("hf"))
    key = (base, found.kind, found.repo_id, found.revision, secret)
    if key not in _known:
        timeout = transport_for("hf").timeout_secs or 30.0
        hub = _huggingface_hub(base)
        answer = (
            _exists_hub(base, secret, found, timeout)
            if hub
            else _exists_api(base, secret, found, timeout)
        )
        if answer is None:
            return None  # ask again next time: the Hub may answer then
        _known[key] = answer
    return _known[key]


def _huggingface_hub(base: str) -> bool:
    """Whether to ask through huggingface_hub: installed (0.23 or later) and set up for
    this endpoint. Its side requests (the agent registry it fetches for its user agent)
    go to the endpoint it read at import, so another one is asked directly instead."""
    try:
        import huggingface_hub.errors  # noqa: F401
        from huggingface_hub import constants
    except ImportError:
        return False
    return str(constants.ENDPOINT).rstrip("/") == base


def _exists_hub(base: str, secret: str | None, found: Repo, timeout: float) -> bool | None:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    api = HfApi(
        endpoint=base, token=secret or False, library_name="dataio", library_version=_version()
    )
    kind = found.kind[:-1]
    try:
        api.repo_info(found.repo_id, repo_type=kind, revision=found.revision, timeout=timeout)
    except (GatedRepoError, RevisionNotFoundError):
        return True  # it exists; reading it reports the gate or the revision
    except RepositoryNotFoundError:
        return False
    except Exception:  # unreachable, refused...: the read that follows reports it
        return None
    return True


def download(location: Location, *, check: Callable[[int], None] | None = None) -> str | None:
    """The path of ``location``'s file in the shared cache, downloaded there first if it
    is missing or stale, by ``huggingface_hub.hf_hub_download`` (its cache layout, locks
    and revision checks); ``None`` where dataio reads the file itself: offline (the
    cache store serves it), ``huggingface_hub`` missing or set up for another endpoint,
    or a cache folder it may not write.

    ``check`` gets the file's size as the Hub reports it (one HEAD, see
    :func:`cached_file`) before anything is downloaded, to refuse a file too large for
    a limit or a buffer; a file the cache holds for the revision is then served without
    asking the Hub again.

    As ``hf_hub_download``, a file already cached for the revision is served when the
    Hub cannot be asked (down, unreachable, or refusing the token).

    Raises:
        NotFoundError: no such repository, revision or file.
        AuthenticationError: the Hub refused the request and nothing is cached.
        TransportError: the Hub did not answer and nothing is cached.

    Example:
        >>> download(parse("hf://gpt2/config.json"))  # doctest: +SKIP
        '/home/me/.cache/huggingface/hub/models--gpt2/snapshots/607a.../config.json'
    """
    target = _hub_target(location)
    if target is None:
        return None
    found, filename, base = target
    from dataio.io.config import credentials_for, transport_for

    if check is not None:
        held = _cached(found, filename, base)
        if held is not None:  # else the Hub did not say: hf_hub_download tells why
            check(held[1])
            if held[0] is not None:
                return held[0]
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(
            found.repo_id,
            filename,
            repo_type=found.kind[:-1],
            revision=found.revision,
            cache_dir=cache_dir(),
            endpoint=base,
            token=token(credentials_for("hf")) or False,
            etag_timeout=transport_for("hf").timeout_secs or 30.0,
            library_name="dataio",
            library_version=_version(),
            tqdm_class=_bars(),
        )
    except PermissionError as exc:  # a read-only cache: read the file directly
        log.debug("cannot write the Hugging Face cache %r (%s); reading directly", cache_dir(), exc)
        return None
    except Exception as exc:  # huggingface_hub's errors, httpx's, OSError
        error = _download_error(exc, str(location), found)
    else:
        return str(path)
    raise error


def cached_file(location: Location) -> tuple[str | None, int] | None:
    """``(path, size)`` of ``location``'s file: ``path`` its copy in the shared cache
    when the cache holds the revision's current version (one HEAD asks the Hub which
    commit that is, through ``huggingface_hub``), else ``None``; the whole answer is
    ``None`` where the Hub did not say or :func:`download` would not use its cache.
    Ranged reads of a file other libraries downloaded then read it from disk instead
    of the network, and of any other, need no second HEAD for the size."""
    target = _hub_target(location)
    return None if target is None else _cached(*target)


def _hub_target(location: Location) -> tuple[Any, str, str] | None:
    """``(resolved repository, file name, endpoint)`` of ``location`` where its reads go
    through ``huggingface_hub``; ``None`` offline (the cache store serves every read),
    without ``huggingface_hub`` for this endpoint, or for a folder (the read that
    follows says so)."""
    if offline():
        return None
    from dataio.io.config import endpoint_for

    base = endpoint(endpoint_for("hf"))
    if not _huggingface_hub(base):
        return None
    found = resolve(location)
    filename = found.path(location.key)
    if not filename or filename.endswith("/"):
        return None
    return found, filename, base


def _cached(found: Any, filename: str, base: str) -> tuple[str | None, int] | None:
    """:func:`cached_file` of a resolved target."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    from dataio.io.config import credentials_for, transport_for

    url = hf_hub_url(
        found.repo_id, filename, repo_type=found.kind[:-1], revision=found.revision, endpoint=base
    )
    try:
        meta = get_hf_file_metadata(
            url,
            token=token(credentials_for("hf")) or False,
            timeout=transport_for("hf").timeout_secs or 30.0,
            endpoint=base,
            library_name="dataio",
            library_version=_version(),
        )
    except Exception:  # missing, refused, unreachable: the ranged read says which
        return None
    if meta.size is None:
        return None
    if not meta.commit_hash or not _COMMIT.fullmatch(meta.commit_hash):
        return None, meta.size
    path = os.path.join(cache_dir(), found.folder, "snapshots", meta.commit_hash, filename)
    try:
        size = os.path.getsize(path)
    except OSError:
        return None, meta.size
    return (path if size == meta.size else None), meta.size


def _bars() -> Any:
    """The tqdm class for ``hf_hub_download``'s bar: its own where dataio shows bars (a
    terminal, a notebook), a silent one elsewhere (logs)."""
    from dataio import progress

    if progress.resolve(None):
        return None
    from tqdm.std import tqdm

    class Silent(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})

    return Silent


def _download_error(exc: Exception, target: str, found: Repo) -> DataioError:
    """The dataio error for what ``hf_hub_download`` raised reading ``target``."""
    from huggingface_hub import errors

    cause = exc.__cause__ if isinstance(exc, errors.LocalEntryNotFoundError) else exc
    status = getattr(getattr(cause, "response", None), "status_code", None)
    if isinstance(exc, errors.LocalEntryNotFoundError):
        if "Timeout" in type(cause).__name__:
            return TransportTimeoutError(
                f"read {target!r} timed out and the Hugging Face cache holds no copy; raise "
                "the limit with dataio.configure_transport('hf', timeout_secs=...)"
            )
        return TransportError(
            f"read {target!r} failed: the Hub did not answer ({cause}) and the Hugging Face "
            f"cache {cache_dir()!r} holds no copy"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return NotFoundError(
            f"no revision {found.revision!r} of {found.repo_id!r} for {target!r}; check the "
            "@revision"
        )
    if isinstance(exc, errors.EntryNotFoundError) or status == 404:
        return NotFoundError(f"no object at {target!r}; check the repository id and the path")
    if status == 401 or isinstance(exc, errors.RepositoryNotFoundError):
        return AuthenticationError(
            f"read {target!r}: the Hub refused the request (401); the repository may be "
            "private, gated or missing: set HF_TOKEN, run huggingface-cli login or call "
            "dataio.configure_credentials('hf', bearer_token=...)"
        )
    if status == 403:
        return PermissionDeniedError(
            f"read {target!r}: permission denied; the token may lack access to this repository"
        )
    if "Timeout" in type(exc).__name__:
        return TransportTimeoutError(
            f"read {target!r} timed out; raise the limit with "
            "dataio.configure_transport('hf', timeout_secs=...)"
        )
    network = type(exc).__module__.startswith(("httpx", "httpcore"))
    if status is not None or network or isinstance(exc, OSError):
        return TransportError(f"read {target!r} failed: {type(exc).__name__}: {exc}"[:500])
    return DataioError(f"read {target!r} failed: {type(exc).__name__}: {exc}"[:500])


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dataio")
    except PackageNotFoundError:
        return None


def _exists_api(base: str, secret: str | None, found: Repo, timeout: float) -> bool | None:
    # the request huggingface_hub's repo_info makes
    revision = quote(found.revision, safe="")
    url = f"{base}/api/{found.kind}/{found.repo_id}/revision/{revision}"
    headers = {"Accept": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    try:
        with _opener(url).open(urllib.request.Request(url, headers=headers), timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        code = exc.headers.get("X-Error-Code", "")
        if code in ("GatedRepo", "RevisionNotFound"):
            return True
        if code == "RepoNotFound" or exc.code == 401:  # the Hub hides private repos behind 401
            return False
        return None
    except (urllib.error.URLError, OSError):
        return None


def _child(location: Location, found: Repo, path: str) -> str:
    """The URI of ``path`` (a path in the repository) in the style ``location`` was written."""
    if not found.subfolder:
        return location.child(path)
    kind = "" if found.kind == "models" else f"{found.kind}/"
    return f"hf://{kind}{found.repo_id}/{path}"


def ls(location: Location) -> list[str]:
    """The files and folders (ending in ``/``) directly under an ``hf`` prefix.

    Example:
        >>> ls(parse("hf://datasets/org/name/data/"))  # doctest: +SKIP
        ['hf://datasets/org/name/data/train.parquet', 'hf://datasets/org/name/data/val/']
    """
    found = resolve(location)
    children = []
    for entry in _entries(location, found, found.path(location.key.strip("/")), recursive=False):
        path = str(entry["path"])
        children.append(
            _child(location, found, path + "/" if entry["type"] == "directory" else path)
        )
    return sorted(children)


def keys(location: Location, prefix: str | None) -> list[str]:
    """Every file (not folder) under the folder ``prefix`` of ``location``, as keys of it.

    Example:
        >>> keys(parse("hf://org/model/**/*.safetensors"), None)  # doctest: +SKIP
        ['model-00001-of-00002.safetensors', 'sub/x.safetensors']
    """
    found = resolve(location)
    entries = _entries(location, found, found.path((prefix or "").strip("/")), recursive=True)
    start = len(found.subfolder) + 1 if found.subfolder else 0
    return [str(e["path"])[start:] for e in entries if e["type"] == "file"]


def _entries(
    location: Location, found: Repo, path: str, *, recursive: bool
) -> list[dict[str, Any]]:
    if offline():
        return _cached_tree(location, found, path, recursive=recursive)
    return _tree(location, path, recursive=recursive)


def _cached_tree(
    location: Location, found: Repo, path: str, *, recursive: bool
) -> list[dict[str, Any]]:
    snapshot = _snapshot(found)
    if snapshot is None:
        cache_store(location)  # raises, saying what is missing
        return []
    top = os.path.normpath(os.path.join(snapshot, path))
    if top != snapshot and not top.startswith(snapshot + os.sep):
        return []  # "..": nothing of this repository lies there
    entries: list[dict[str, Any]] = []
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, snapshot).replace(os.sep, "/")
        rel = "" if rel == "." else rel + "/"
        if not recursive:
            entries += [{"type": "directory", "path": rel + d} for d in dirs]
            dirs.clear()
        entries += [{"type": "file", "path": rel + f} for f in files]
    return entries


def _tree(location: Location, path: str, *, recursive: bool) -> list[dict[str, Any]]:
    from dataio.io.config import credentials_for, endpoint_for, transport_for

    found = resolve(location)
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
    roots = (os.environ.get("SSL_CERT_FILE", ""), os.environ.get("AWS_CA_BUNDLE", ""))
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}),
        urllib.request.HTTPSHandler(context=_tls(roots)),
        _SameOriginRedirects(),
    )


@functools.lru_cache(maxsize=4)
def _tls(roots: tuple[str, str]) -> ssl.SSLContext:
    """The TLS context for the bundle variables ``roots``: loading a CA bundle costs
    about 50 ms, once per listing or question to the Hub without this cache."""
    return tls_context()


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
            "may be private, gated or missing: set HF_TOKEN, run huggingface-cli login or "
            "call dataio.configure_credentials('hf', bearer_token=...)"
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
