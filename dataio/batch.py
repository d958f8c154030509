"""``Batch``: the decoded columns of one batch, with row keys, indices, sizes and errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataio.exceptions import DataioError, FieldError

__all__ = ["Batch"]


class Batch:
    """One batch: slot columns plus per-row metadata.

    ``batch["image"]`` is a tensor slot's array (or torch tensor), or a passthrough
    slot's list of Python values. Rows that failed under ``on_failure="skip"`` are not
    in the columns; their errors are in :attr:`errors`.

    Attributes:
        keys: each surviving row's ``key`` field (``None`` when the record has none).
        indices: each surviving row's record index in the stream.
        errors: the :class:`~dataio.exceptions.DataioError` of each dropped row.
        sizes: per image slot, each row's source ``(height, width)`` before transforms.
    """

    __slots__ = ("_columns", "errors", "indices", "keys", "sizes")

    def __init__(
        self,
        columns: dict[str, Any],
        *,
        keys: list[Any],
        indices: list[int],
        errors: list[DataioError] | None = None,
        sizes: dict[str, list[tuple[int, int]]] | None = None,
    ) -> None:
        self._columns = columns
        self.keys = keys
        self.indices = indices
        self.errors = errors or []
        self.sizes = sizes or {}

    @property
    def slots(self) -> list[str]:
        """Slot names, in pipeline order."""
        return list(self._columns)

    def __getitem__(self, slot: str) -> Any:
        try:
            return self._columns[slot]
        except KeyError:
            raise FieldError(f"slot {slot!r} is not in this batch; slots: {self.slots}") from None

    def __contains__(self, slot: object) -> bool:
        return slot in self._columns

    def __len__(self) -> int:
        return len(self.indices)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Iterate over ``(slot name, column)`` pairs."""
        return iter(self._columns.items())

    def to_dict(self) -> dict[str, Any]:
        """Return the columns as a plain dict."""
        return dict(self._columns)

    def with_columns(self, columns: dict[str, Any]) -> Batch:
        """Return a batch with the same metadata and new columns."""
        return Batch(
            columns, keys=self.keys, indices=self.indices, errors=self.errors, sizes=self.sizes
        )

    def __repr__(self) -> str:
        parts = []
        for name, column in self._columns.items():
            shape = getattr(column, "shape", None)
            if shape is not None:
                dtype = str(getattr(column, "dtype", "")).replace("torch.", "")
                parts.append(f"{name}: {dtype}{list(shape)}")
            else:
                parts.append(f"{name}: list[{len(column)}]")
        errors = f", errors={len(self.errors)}" if self.errors else ""
        return f"Batch(rows={len(self)}, {', '.join(parts)}{errors})"
