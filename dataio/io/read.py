"""The one function every pipeline reads bytes through."""

from __future__ import annotations

import os
from pathlib import Path

from dataio.io.errors import call
from dataio.io.uri import parse
from dataio.io.verbs import read

__all__ = ["read_bytes"]


def read_bytes(uri: str | os.PathLike[str]) -> bytes:
    """Read a whole object (a local path, ``file://``, ``s3://``, ``r2://``, ``http(s)://``).

    Raises:
        NotFoundError: the object does not exist.
        DataioError: it cannot be read (a directory, no permission, a dead server, ...).

    Example:
        >>> dataio.io.read_bytes("s3://bucket/cat.jpg")  # doctest: +SKIP
        b'\\xff\\xd8...'
    """
    loc = parse(uri)
    if loc.scheme == "file":
        return call(Path(loc.path).read_bytes, uri, "read")
    return read(uri)
