"""The dataio error hierarchy: one root, subclasses that are also the built-ins users catch."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "BatchFailedError",
    "CheckpointError",
    "DataioError",
    "DecodeError",
    "DeviceError",
    "FieldError",
    "FormatError",
    "LimitError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "PlanError",
    "QueryError",
    "ShapeMismatchError",
    "TransformError",
    "TransportError",
    "TransportTimeoutError",
]


class DataioError(Exception):
    """Root of every error dataio raises on purpose.

    Row-level errors carry where they happened: ``index`` (the record's sequence
    number), ``key`` (the record's ``key`` field, when it has one) and ``slot``.
    """

    index: int | None = None
    key: Any = None
    slot: str | None = None

    def with_row(self, *, index: int | None, key: Any, slot: str | None) -> DataioError:
        """Attach the record position to this error and return it."""
        self.index, self.key, self.slot = index, key, slot
        return self

    def where(self) -> str:
        """Describe the record and slot this error belongs to, or ``""``."""
        parts = []
        if self.key is not None:
            parts.append(f"key={self.key!r}")
        if self.index is not None:
            parts.append(f"index={self.index}")
        if self.slot is not None:
            parts.append(f"slot={self.slot!r}")
        return f"record {' '.join(parts)}" if parts else ""

    def __str__(self) -> str:
        message = super().__str__()
        where = self.where()
        return f"{where}: {message}" if where else message


class PlanError(DataioError, ValueError):
    """A pipeline, slot chain or run option is malformed."""


class QueryError(DataioError, ValueError):
    """A frame or SQL query is malformed: an unknown column, mismatched types in a
    predicate, SQL that does not parse, or a query DataFusion cannot plan or run."""


class DecodeError(DataioError, ValueError):
    """Bytes could not be decoded: corrupt, truncated, empty or of an unknown format."""


class TransformError(DataioError, ValueError):
    """A transform cannot apply to this input (for example a crop larger than the image)."""


class FormatError(DataioError, ValueError):
    """A file does not follow its format (header, offsets, dtypes, sizes), or holds
    something dataio refuses to load, such as pickled Python objects."""


class DeviceError(DataioError, RuntimeError):
    """A requested device (for example ``"cuda:0"``) is not available on this host."""


class NotFoundError(DataioError, FileNotFoundError):
    """A path or object does not exist."""


class PermissionDeniedError(DataioError, PermissionError):
    """The credentials in use are valid but may not perform this operation on this object."""


class AuthenticationError(DataioError, PermissionError):
    """The server rejected the credentials (unknown key, bad signature, expired token)."""


class FieldError(DataioError, KeyError):
    """A record lacks a field a slot reads, or a field holds a value of the wrong kind."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return DataioError.__str__(self)


class ShapeMismatchError(DataioError, ValueError):
    """Rows of one batch have shapes that cannot be stacked into one tensor."""


class CheckpointError(DataioError, ValueError):
    """A loader checkpoint is malformed or does not belong to this pipeline and source."""


class BatchFailedError(DataioError, RuntimeError):
    """Too few rows of a batch survived under ``on_failure``; ``errors`` lists why."""

    def __init__(self, message: str, errors: list[DataioError]) -> None:
        super().__init__(message)
        self.errors = errors


class TransportError(DataioError, ConnectionError):
    """A transport peer cannot be reached, went away, or refused or failed an operation."""


class OutOfRangeError(DataioError, IndexError):
    """An offset or size falls outside the region a server exposes."""


class TransportTimeoutError(DataioError, TimeoutError):
    """A request to a storage server did not finish within the configured timeout."""


class LimitError(DataioError, ValueError):
    """An input asks for more than a limit in :mod:`dataio.limits` allows (pixels, scans,
    bytes, samples): refused before anything is allocated.

    ``name``, ``value`` and ``limit`` say which limit, what the input asked for and the
    limit in force.
    """

    def __init__(self, name: str, value: int, limit: int, what: str) -> None:
        super().__init__(
            f"{what}: {value:,} is over the limit {name}={limit:,}; if the input is trusted, "
            f"raise it with dataio.limits.set({name}=...) or DATAIO_LIMITS='{name}=...'"
        )
        self.name, self.value, self.limit = name, value, limit
