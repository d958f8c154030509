"""DataFusion errors as :class:`~dataio.exceptions.DataioError` saying what and where."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from dataio.exceptions import DataioError, FormatError, NotFoundError, QueryError

__all__ = ["guard", "is_engine_error", "translate"]

_READ_ERRORS = ("parquet error", "arrow error: parser", "ipc", "json", "csv")

# Qualifiers the user never wrote: DataFusion's names for in-memory tables (``c`` and 32
# hex digits, also unquoted: ``c3969807df....width``) and unnamed inputs (``?table?``),
# and any qualifier of a quoted column. The user's own ``t.width`` in SQL stays.
_QUALIFIER = re.compile(
    r'(?:"\?table\?"|\?table\?|"c[0-9a-f]{32}"|\bc[0-9a-f]{32})\.|(?:[A-Za-z_][A-Za-z0-9_]*)\.(?=")'
)


def _clean(message: str) -> str:
    message = message.replace("DataFusion error: ", "").replace("datafusion.public.", "").strip()
    return _QUALIFIER.sub("", message)


def is_engine_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the engine (not an interrupt, exit or dataio's own)."""
    if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit | DataioError):
        return False
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def translate(exc: BaseException, where: str, path: str | None = None) -> DataioError:
    """A DataFusion error as a :class:`DataioError` saying what and where."""
    message = _clean(str(exc))
    from dataio.engine.udf_errors import (
        raised_error,
    )  # a batched kernel's row error keeps its class

    if (known := raised_error(str(exc), where)) is not None:
        return known
    from dataio.engine.remote_files import scan_error

    if (failed := scan_error(str(exc), where, path)) is not None:  # reading a remote file
        return failed
    lowered = message.lower()
    if path is not None and (
        "no such file" in lowered or ("not found" in lowered and "field" not in lowered)
    ):
        return NotFoundError(f"{where}: the file {path!r} is gone: {message}")
    if "object store error" in lowered:
        # the storage server failed (went away, timed out, refused), whatever the reader
        # was parsing at the time: not a format error (dataio.io's rules say which)
        from dataio.io.errors import translate as translate_io

        return translate_io(RuntimeError(message), path or where, where)
    if path is not None and (
        type(exc).__name__ == "PanicException"
        or (any(k in lowered for k in _READ_ERRORS) and "cast" not in lowered)
    ):
        return FormatError(f"{where}: cannot read {path!r}: {message}")
    if "no field named" in lowered:
        return QueryError(f"{where}: unknown column: {message}")
    if "sql error" in lowered or "parsererror" in lowered:
        return QueryError(f"{where}: malformed SQL: {message}")
    if "cast error" in lowered or "cannot infer common" in lowered or "coerce" in lowered:
        return QueryError(f"{where}: type mismatch: {message}")
    return QueryError(f"{where}: {message}")


@contextmanager
def guard(where: str, path: str | None = None) -> Iterator[None]:
    """Turn DataFusion errors raised in the block into dataio errors."""
    try:
        yield
    except BaseException as exc:
        if not is_engine_error(exc):
            raise
        raise translate(exc, where, path) from exc
