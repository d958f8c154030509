"""The one function every pipeline reads bytes through."""

from __future__ import annotations

import os
from pathlib import Path

from dataio.exceptions import DataioError, NotFoundError

__all__ = ["read_bytes"]


def read_bytes(uri: str | os.PathLike[str]) -> bytes:
    """Read a whole local file (a path or a ``file://`` URI) into bytes.

    Raises:
        NotFoundError: the file does not exist.
        DataioError: it cannot be read (a directory, no permission, ...).

    Example:
        >>> dataio.io.read_bytes("/data/cat.jpg")  # doctest: +SKIP
        b'\\xff\\xd8...'
    """
    text = os.fspath(uri)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise DataioError(
            f"cannot read {uri!r}: the {scheme}:// scheme is not supported yet; use a local path"
        )
    try:
        return Path(text).read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"no such file {text!r}; check the path in the record") from None
    except OSError as exc:
        raise DataioError(f"cannot read {text!r}: {exc.strerror or exc}") from exc
