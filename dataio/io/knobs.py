"""The reference's runtime knobs for remote IO, read from the environment.

Each maps onto obstore's transport where it can:

* ``DATAIO_IO_WORKERS``: the worker threads of obstore's async runtime (tokio), which
  drives every remote request. obstore builds that runtime once per process, at its
  first request, sized by ``TOKIO_WORKER_THREADS`` (else one per core); dataio sets that
  variable only while it starts the runtime, before it builds its first store, so
  DataFusion's own runtime keeps its default size.
* ``DATAIO_OBJECT_SHARDS``: how many ranged requests one large read fans out to (the
  default of ``configure_transport(readall_concurrency=...)``; the more specific
  ``DATAIO_READALL_CONCURRENCY`` wins when both are set).
* ``DATAIO_S3_HTTP_VERSION``: ``h1`` or ``h2`` for ``s3://`` and ``r2://`` stores
  (obstore's ``http1_only`` / ``http2_only``); unset, HTTP/1.1 unless TLS negotiates h2.
* ``DATAIO_TCP_QUICKACK``: accepted (``0`` or ``1``) but without effect: obstore's HTTP
  client (reqwest on hyper) owns its sockets and has no ``TCP_QUICKACK`` option, and
  Linux clears that flag after each ACK, so it would have to be set again after every
  read inside the client. dataio says so once, at debug level, on the ``dataio.io``
  logger.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Literal

from dataio.exceptions import DataioError

__all__ = [
    "IO_WORKERS",
    "OBJECT_SHARDS",
    "S3_HTTP_VERSION",
    "TCP_QUICKACK",
    "io_workers",
    "object_shards",
    "prepare_runtime",
    "s3_client_options",
    "tcp_quickack",
]

log = logging.getLogger("dataio.io")

IO_WORKERS = "DATAIO_IO_WORKERS"
OBJECT_SHARDS = "DATAIO_OBJECT_SHARDS"
S3_HTTP_VERSION = "DATAIO_S3_HTTP_VERSION"
TCP_QUICKACK = "DATAIO_TCP_QUICKACK"

_lock = threading.Lock()
_runtime_started = False
_quickack_noted = False


def _positive(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise DataioError(f"{name}={text!r} must be a positive integer; unset it for the default")
    return value


def io_workers() -> int | None:
    """``DATAIO_IO_WORKERS``: threads of obstore's async IO runtime (None: one per core).

    Example:
        >>> io_workers()  # doctest: +SKIP
        8
    """
    return _positive(IO_WORKERS)


def object_shards() -> int | None:
    """``DATAIO_OBJECT_SHARDS``: ranged requests one large read runs at a time (None:
    unset).

    Example:
        >>> object_shards()  # doctest: +SKIP
        16
    """
    return _positive(OBJECT_SHARDS)


def s3_client_options() -> dict[str, Any]:
    """obstore client options for ``DATAIO_S3_HTTP_VERSION`` (``h1`` or ``h2``).

    Example:
        >>> s3_client_options()  # with DATAIO_S3_HTTP_VERSION=h2  # doctest: +SKIP
        {'http2_only': True}
    """
    version = _http_version()
    if version == "h1":
        return {"http1_only": True}
    if version == "h2":
        return {"http2_only": True}
    return {}


def _http_version() -> Literal["h1", "h2"] | None:
    text = os.environ.get(S3_HTTP_VERSION, "").strip()
    value = text.lower().replace("http/", "h").replace("1.1", "1").replace("2.0", "2")
    if not value:
        return None
    if value in ("h1", "h2"):
        return "h1" if value == "h1" else "h2"
    raise DataioError(f"{S3_HTTP_VERSION}={text!r} must be 'h1' or 'h2'; unset it for the default")


def tcp_quickack() -> bool:
    """``DATAIO_TCP_QUICKACK`` as given (default ``True``, as the reference has it); it
    has no effect under obstore (see the module notes)."""
    text = os.environ.get(TCP_QUICKACK, "").strip()
    if text not in ("", "0", "1"):
        raise DataioError(f"{TCP_QUICKACK}={text!r} must be 0 or 1; unset it for the default")
    return text != "0"


def prepare_runtime() -> None:
    """Apply the process-wide knobs before dataio's first obstore store is built: start
    obstore's runtime with ``DATAIO_IO_WORKERS`` threads, and note once that
    ``DATAIO_TCP_QUICKACK`` cannot apply. Later calls do nothing."""
    global _runtime_started
    if _runtime_started:
        return
    workers = io_workers()
    tcp_quickack()  # a malformed value fails here, like the other knobs
    with _lock:
        if _runtime_started:
            return
        if workers is not None:
            _start_runtime(workers)
        _runtime_started = True
    _note_quickack()


def _start_runtime(workers: int) -> None:
    """Start obstore's tokio runtime with ``workers`` threads.

    tokio reads ``TOKIO_WORKER_THREADS`` when the runtime is built, which obstore does
    at its first blocking call: a HEAD on an in-memory store, answered at once. The
    variable is put back afterwards so other tokio runtimes (DataFusion's) keep theirs.
    """
    import obstore
    from obstore.store import MemoryStore

    previous = os.environ.get("TOKIO_WORKER_THREADS")
    os.environ["TOKIO_WORKER_THREADS"] = str(workers)
    try:
        obstore.head(MemoryStore(), "dataio-runtime-probe")
    except Exception:  # a NotFoundError is expected: any answer means the runtime ran
        pass
    finally:
        if previous is None:
            del os.environ["TOKIO_WORKER_THREADS"]
        else:
            os.environ["TOKIO_WORKER_THREADS"] = previous
    log.debug(
        "%s=%d: obstore's IO runtime starts with %d worker threads (if obstore had "
        "made a request before dataio's first, it kept its size)",
        IO_WORKERS,
        workers,
        workers,
    )


def _note_quickack() -> None:
    global _quickack_noted
    if _quickack_noted or not os.environ.get(TCP_QUICKACK, "").strip():
        return
    _quickack_noted = True
    log.debug(
        "%s=%s is accepted but has no effect: obstore's HTTP client (reqwest/hyper) owns "
        "its sockets and offers no TCP_QUICKACK option, so the kernel's delayed-ACK "
        "default applies",
        TCP_QUICKACK,
        os.environ[TCP_QUICKACK].strip(),
    )


def _forget() -> None:
    """Tests: let :func:`prepare_runtime` run again (the runtime itself stays)."""
    global _runtime_started, _quickack_noted
    with _lock:
        _runtime_started = _quickack_noted = False
