"""Row errors of batched kernels: the row named, the error's class kept through DataFusion.

DataFusion reports a Python function's exception as text; the last errors raised are
remembered so :func:`raised_error` can give the caller back the error's own class.
"""

from __future__ import annotations

import collections
from typing import Any

from dataio.exceptions import DataioError, DecodeError

__all__ = ["raised_error", "renamed", "row_error"]

_recent: collections.deque[DataioError] = collections.deque(maxlen=32)  # append is atomic


def row_error(where: str, exc: Exception, row: int, data: Any, paths: bool) -> Exception:
    if data is None:  # the value itself could not be read from the array
        what = "unreadable value"
    elif paths and isinstance(data, memoryview):
        what = f"path {bytes(data).decode('utf-8', 'replace')!r}"
    else:
        what = f"{len(data)} bytes"
    message = f"{where}: row {row} of the batch ({what}): {exc}"
    if isinstance(exc, DataioError):
        error = renamed(exc, message)
    else:  # a kernel library failed in a way it does not document
        error = DecodeError(f"{message} ({type(exc).__name__})")
    _recent.append(error)
    return error


def renamed(exc: DataioError, message: str) -> DataioError:
    """An error of ``exc``'s class (and fields) with another message."""
    try:
        return type(exc)(message)
    except TypeError:  # a subclass with its own constructor (LimitError)
        error = type(exc).__new__(type(exc))
        error.__dict__.update(exc.__dict__)
        error.args = (message,)
        return error


def raised_error(message: str, where: str) -> DataioError | None:
    """The row error a batched kernel raised, found in the engine's error ``message``.

    DataFusion reports a Python function's exception as text; this gives the caller back
    the error's own class (``DecodeError``, ``LimitError``, ...), prefixed with ``where``.
    """
    for error in reversed(_recent):
        if repr(error) in message:
            return renamed(error, f"{where}: {error}")
    return None
