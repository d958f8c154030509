"""Resource limits that hostile input cannot talk dataio past.

A file's header says how large it is: a JPEG's frame size, a tar member's size field, an
HTTP ``Content-Length``, a TFRecord length, an audio sample rate. dataio checks those
numbers against the limits here *before* it allocates or loops on them, so a 600-byte
file cannot ask for 12 GiB or an hour of CPU. The defaults are far above what honest
datasets hold; exceeding one raises :class:`LimitError` naming the limit and how to
raise it.

Limits are process-wide (the engine's worker threads read them)::

    import dataio

    dataio.limits.get().max_image_pixels          # the value in force
    previous = dataio.limits.set(max_image_pixels=2**30)
    with dataio.limits.scoped(max_jpeg_scans=1000):
        ...                                       # restored on exit

The environment variable ``DATAIO_LIMITS`` sets them at first use, as
``"max_image_pixels=1073741824,max_jpeg_scans=500"``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dataio.exceptions import LimitError, PlanError

__all__ = ["Limits", "LimitError", "check", "get", "scoped", "set"]

_GIB = 1 << 30
_MIB = 1 << 20

ENV = "DATAIO_LIMITS"


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits in force; every field is a positive number.

    Attributes:
        max_image_pixels: Width x height of one decoded image (or frame). 2**28 is
            16384 x 16384; a 20000 x 20000 image is refused.
        max_jpeg_scans: Scans in one progressive JPEG. Encoders write about 10; each
            scan re-reads the whole coefficient buffer, so hundreds of tiny scans make a
            small file decode for minutes.
        max_decoded_bytes: Bytes one record, member, tensor or array may decode or
            inflate to (an image buffer, an NPY array, a TFRecord payload, a zip member).
        max_member_bytes: Declared size of one tar or zip member that is read into memory.
        max_inflation_ratio: Inflated / compressed size of one zip, npz or gzip member
            once it passes ``inflation_floor_bytes``. Deflate cannot exceed ~1032:1;
            higher ratios come from crafted streams.
        inflation_floor_bytes: Inflated size under which the ratio is not checked (a
            small all-zero array compresses >1000:1 honestly).
        max_header_bytes: Declared size of a header or metadata block (NPY header,
            safetensors JSON header, Feather/Parquet footer, handshake frames; a tar
            member's pax and long-name headers together, and the global pax headers).
        max_prealloc_bytes: Bytes allocated ahead of data on the strength of a declared
            size (an HTTP ``Content-Length``, a length prefix); past it, buffers grow as
            bytes arrive.
        max_audio_samples: Decoded samples of one audio record, all channels together,
            before and after resampling (2**29 float32 samples are 2 GiB).
        max_sample_rate: Sample rate, in Hz, of a decoded or requested audio stream.
        max_resample_ratio: Largest ratio between source and target sample rates.
        max_rejects: Entries a loader's rejects table keeps (the newest; older ones
            are dropped and counted), however many rows a dataset makes fail.
        max_lineage_batches: Batches whose positions and keys a loader's lineage keeps
            (the newest).
    """

    max_image_pixels: int = 1 << 28
    max_jpeg_scans: int = 100
    max_decoded_bytes: int = 2 * _GIB
    max_member_bytes: int = 2 * _GIB
    max_inflation_ratio: int = 1100
    inflation_floor_bytes: int = 64 * _MIB
    max_header_bytes: int = 100 * _MIB
    max_prealloc_bytes: int = 64 * _MIB
    max_audio_samples: int = 1 << 29
    max_sample_rate: int = 768_000
    max_resample_ratio: int = 64
    max_rejects: int = 100_000
    max_lineage_batches: int = 4096

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise PlanError(f"limit {field.name}={value!r} must be a positive integer")


_lock = threading.Lock()
_current: Limits | None = None


def _from_env() -> Limits:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return Limits()
    changes: dict[str, Any] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise PlanError(f"{ENV}={text!r}: expected name=integer pairs, got {item!r}")
        changes[name.strip()] = int(value)
    return _replace(Limits(), changes)


def _replace(base: Limits, changes: dict[str, Any]) -> Limits:
    names = {f.name for f in dataclasses.fields(Limits)}
    unknown = sorted(name for name in changes if name not in names)
    if unknown:
        raise PlanError(f"unknown limit(s) {unknown}; known: {sorted(names)}")
    return dataclasses.replace(base, **changes)


def get() -> Limits:
    """Return the limits in force.

    Example:
        >>> dataio.limits.get().max_jpeg_scans
        100
    """
    global _current
    current = _current
    if current is None:
        with _lock:
            if _current is None:
                _current = _from_env()
            current = _current
    return current


def set(**changes: int) -> Limits:
    """Change some limits for the whole process; return the limits in force before.

    Example:
        >>> previous = dataio.limits.set(max_image_pixels=2**30)
    """
    global _current
    with _lock:
        previous = _current if _current is not None else _from_env()
        _current = _replace(previous, changes)
    return previous


@contextmanager
def scoped(**changes: int) -> Iterator[Limits]:
    """Change some limits inside a ``with`` block, and restore the previous ones after.

    Example:
        >>> with dataio.limits.scoped(max_jpeg_scans=1000) as limits:
        ...     limits.max_jpeg_scans
        1000
    """
    global _current
    previous = set(**changes)
    try:
        yield get()
    finally:
        with _lock:
            _current = previous


def check(name: str, value: int, *, what: str) -> None:
    """Raise :class:`LimitError` when ``value`` exceeds the limit ``name``.

    Args:
        name: A field of :class:`Limits`, e.g. ``"max_image_pixels"``.
        value: The amount the input asks for.
        what: The input and what it asks for, e.g. ``"JPEG 'a.jpg' of 65500x65500"``.
    """
    limit = getattr(get(), name)
    if value > limit:
        raise LimitError(name, value, limit, what)
