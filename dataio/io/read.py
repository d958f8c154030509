"""The one function every pipeline reads bytes through, and the formats ``read`` decodes.

Decoding reuses dataio's own decoders (:mod:`dataio.udfs`, :mod:`dataio.formats`);
pyarrow reads the Arrow formats. Each decoder's imports load on first use.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from stat import S_ISREG
from typing import Any, get_args

from dataio import limits
from dataio.exceptions import DataioError, DecodeError, FormatError
from dataio.io.config import redact
from dataio.io.errors import call
from dataio.io.local import FLAGS, check_regular, read_bounded
from dataio.io.uri import parse
from dataio.io.verbs import ReadFormat, read

__all__ = ["FORMATS", "check_format", "decode", "read_bytes"]

FORMATS: tuple[str, ...] = get_args(ReadFormat)


def read_bytes(uri: str | os.PathLike[str]) -> bytes:
    """Read a whole object: a local path or any URI of :mod:`dataio.io` (s3, gs, az, hf...).

    Remote objects go through the local cache when ``DATAIO_CACHE_DIR`` is set.

    Raises:
        NotFoundError: the object does not exist.
        DataioError: it cannot be read (a directory, no permission, a dead server, ...).

    Example:
        >>> dataio.io.read_bytes("s3://bucket/cat.jpg")  # doctest: +SKIP
        b'\\xff\\xd8...'
    """
    if type(uri) is str and ":" not in uri and not uri.startswith("~"):
        return call(lambda: _read_file(uri), uri, "read")  # a plain path: the hot path
    loc = parse(uri)
    if loc.scheme == "file":
        return call(lambda: _read_file(loc.path), uri, "read")
    return read(uri)


def _read_file(path: str) -> bytes:
    """A local file's bytes in as few system calls (each a GIL round trip) as possible.

    Only regular files: a FIFO would block, ``/dev/zero`` never ends (see
    :mod:`dataio.io.local`)."""
    fd = os.open(path, FLAGS)
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode):
            check_regular(path, st.st_mode, "read")
        size = st.st_size
        if size > limits.get().max_decoded_bytes:
            limits.check("max_decoded_bytes", size, what=f"reading {path!r}")
        data = os.read(fd, size) if size else b""
        if len(data) == size and size:
            return data
        # a short read, or a file whose size stat does not know (/proc): drain it
        return read_bounded(fd, path, data)
    finally:
        os.close(fd)


def check_format(format: str, mode: str | None, *, ranged: bool) -> None:
    """Refuse an unknown format, a format with a byte range, or a misplaced ``mode``."""
    from dataio.decoders import IMAGE_MODES

    if format not in FORMATS:
        choices = ", ".join(repr(f) for f in FORMATS)
        raise DataioError(f"unknown read format {format!r}; choose one of {choices}")
    if ranged and format != "bytes":
        raise DataioError(
            f"format={format!r} decodes a whole object, so it cannot take offset= or size=; "
            "read the range as bytes, or drop the range"
        )
    if mode is not None and format != "image":
        raise DataioError(f"mode={mode!r} applies to format='image' only, not {format!r}")
    if mode is not None and mode not in IMAGE_MODES:
        raise DataioError(f"image mode must be one of {list(IMAGE_MODES)}, got {mode!r}")


def decode(data: Any, format: str, mode: str | None, uri: Any) -> Any:
    """``data``, the whole object at ``uri``, decoded as ``format``."""
    source = redact(os.fspath(uri))
    try:
        return _DECODERS[format](data, mode, source)
    except (DecodeError, FormatError) as exc:
        text = str(exc)
        if source not in text:
            text = f"{source!r} is not valid {format}: {text}"
        raise DecodeError(text) from None


def _bytes(data: Any, mode: str | None, source: str) -> bytes:
    return bytes(data)


def _text(data: Any, mode: str | None, source: str) -> str:
    from dataio.udfs.text import decode_text

    return decode_text(data, "utf-8")


def _json(data: Any, mode: str | None, source: str) -> Any:
    from dataio.udfs.text import decode_json

    return decode_json(data)


def _jsonl(data: Any, mode: str | None, source: str) -> list[Any]:
    from dataio.udfs.text import decode_json

    rows = []
    for number, line in enumerate(bytes(data).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(decode_json(line))
        except DecodeError as exc:
            raise DecodeError(f"{source!r} line {number} is not valid JSON: {exc}") from None
    return rows


def _npy(data: Any, mode: str | None, source: str) -> Any:
    from dataio.udfs.tensor import decode_npy

    return decode_npy(data, source=source)


def _npz(data: Any, mode: str | None, source: str) -> dict[str, Any]:
    from dataio.formats.numpy import decode_npz

    return decode_npz(data, source=source)


def _parquet(data: Any, mode: str | None, source: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dataio.formats._arrow import validated

    try:
        table = pq.read_table(pa.BufferReader(pa.py_buffer(data)))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DecodeError(f"{source!r} is not a readable Parquet file: {exc}") from None
    return validated(table, source)


def _arrow(data: Any, mode: str | None, source: str) -> Any:
    """An Arrow IPC file (Feather v2), an IPC stream, or a Feather v1 file, validated."""
    import pyarrow as pa

    from dataio.formats._arrow import check_feather_v1, validated

    buffer = pa.py_buffer(data)
    head = bytes(memoryview(data)[:6])
    try:
        if head == b"ARROW1":
            table = pa.ipc.open_file(buffer).read_all()
        elif head.startswith(b"FEA1"):
            import pyarrow.feather as feather

            # pyarrow slices V1 buffers at the footer's offsets unchecked: check first
            check_feather_v1(memoryview(data), source)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # V1 still reads
                table = feather.read_table(pa.BufferReader(buffer))
        else:
            table = pa.ipc.open_stream(buffer).read_all()
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise DecodeError(
            f"{source!r} is not a readable Arrow IPC file or stream, nor Feather: {exc}"
        ) from None
    return validated(table, source)


def _image(data: Any, mode: str | None, source: str) -> Any:
    from dataio.udfs.image import decode_image

    return decode_image(data, mode or "rgb")


def _safetensors(data: Any, mode: str | None, source: str) -> dict[str, Any]:
    from dataio.udfs.tensor import entry_array, read_safetensors_header

    header = read_safetensors_header(data, source=source)
    return {name: entry_array(data, entry, source=source) for name, entry in header.tensors.items()}


_DECODERS: dict[str, Callable[[Any, str | None, str], Any]] = {
    "bytes": _bytes,
    "text": _text,
    "json": _json,
    "jsonl": _jsonl,
    "npy": _npy,
    "npz": _npz,
    "parquet": _parquet,
    "feather": _arrow,
    "arrow": _arrow,
    "ipc": _arrow,
    "image": _image,
    "safetensors": _safetensors,
}
