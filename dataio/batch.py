"""``Batch``: the decoded columns of one batch, with row keys, indices, sizes and errors."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any

from dataio.exceptions import DataioError, FieldError

__all__ = ["Batch"]


class Batch(Mapping[str, Any]):
    """One batch: a read-only mapping of slot name to column, plus per-row metadata.

    ``batch["image"]`` is a tensor slot's array (or torch tensor). A passthrough slot
    follows its source:

    * Python records: numbers or bools are an array (tensor) of their dtype (Python ints
      ``int64``, floats ``float64``); strings, ``None``, mixed kinds and ints beyond
      int64 stay a list.
    * Arrow rows (sources with an Arrow schema): integer and floating columns without
      nulls are NumPy arrays of their Arrow type (``int64`` labels, ``float32`` scores;
      a zero-copy, read-only view of the Arrow buffer; a tensor under ``run("torch")``),
      booleans without nulls a ``bool`` array; ``fixed_shape_tensor`` columns without
      nulls (a frame's op chain, ``with_columns(x=col("jpeg").image.decode()...)``) an
      array ``[n, *shape]`` of their value type (zero-copy over the storage's values;
      a tensor under ``run("torch")``); strings, binary, nested and temporal columns
      and any column with nulls stay a ``pyarrow.Array``.

    Tensor columns (NumPy arrays, torch tensors) are DLPack producers:
    ``torch.from_dlpack(batch["image"])`` shares the column's memory, as does any other
    ``from_dlpack`` (JAX, CuPy); see :func:`dataio.tensor_view` for Arrow columns.

    Rows that failed under ``on_failure="skip"`` are not in the columns; their errors
    are in :attr:`errors`.

    As a :class:`~collections.abc.Mapping`, ``batch.keys()`` are the slot names and
    ``dict(batch)`` the columns, so torch and Lightning collection helpers accept it;
    ``len(batch)`` stays the number of rows. :meth:`to` and :meth:`pin_memory` follow
    torch's protocols, so ``move_data_to_device`` and a ``DataLoader``'s pin-memory
    thread move the batch whole, metadata included.

    Attributes:
        row_keys: each surviving row's ``key`` field (``None`` when the record has none).
        indices: each surviving row's record index in the stream.
        errors: the :class:`~dataio.exceptions.DataioError` of each dropped row.
        sizes: per image slot, each row's source ``(height, width)`` before transforms.
        pixels: per image slot, how its pixels were encoded (``layout``, and the
            ``mean``/``std`` of ``normalize``), so :func:`dataio.show` can undo it.
    """

    __slots__ = (
        "_columns",
        "_indices",
        "_keys",
        "_sizes",
        "errors",
        "mixed_by",
        "pixels",
        "row_values",
    )

    def __init__(
        self,
        columns: dict[str, Any],
        *,
        keys: Any,
        indices: Sequence[int],
        errors: list[DataioError] | None = None,
        sizes: dict[str, list[tuple[int, int]]] | None = None,
        row_values: frozenset[str] = frozenset(),
        mixed_by: str | None = None,
        pixels: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._columns = columns
        # row keys and indices may arrive lazily (an Arrow key column, a function, a
        # range): most training loops never read them, so they become lists on access
        self._keys = keys
        self._indices = indices
        self.errors = errors or []
        self._sizes = sizes or {}
        #: columns holding one Python value per record (passthrough and object slots)
        self.row_values = row_values
        #: the batch transform that blended rows (``mixup``/``cutmix``), else ``None``
        self.mixed_by = mixed_by
        #: per image slot, the pixel encoding set by the loader (see :func:`dataio.show`)
        self.pixels = pixels or {}

    @classmethod
    def of_columns(
        cls,
        columns: dict[str, Any],
        keys: Any,
        indices: Sequence[int],
        row_values: frozenset[str],
        pixels: dict[str, dict[str, Any]],
    ) -> Batch:
        """A batch without errors, sizes or mixing, as the constructor makes it: the
        loader's passthrough path builds one every few microseconds, and keyword
        arguments cost a fifth of that."""
        batch = cls.__new__(cls)
        batch._columns, batch._keys, batch._indices = columns, keys, indices
        batch.errors, batch._sizes, batch.row_values = [], {}, row_values
        batch.mixed_by, batch.pixels = None, pixels
        return batch

    def _unmixed(self, what: str) -> None:
        if self.mixed_by is not None:
            raise DataioError(
                f"{what} is not available after {self.mixed_by}: its rows blend "
                f"several records; read it in a batch map placed before {self.mixed_by}, "
                "or carry it in a tensor slot"
            )

    @property
    def row_keys(self) -> list[Any]:
        """Each row's ``key`` field (``None`` when the record has none).

        ``batch.keys()`` is the mapping's: the slot names.
        """
        self._unmixed("batch.row_keys")
        return self._key_list()

    def _key_list(self) -> list[Any]:
        keys = self._keys
        if not isinstance(keys, list):
            if keys is None:
                keys = [None] * len(self._indices)
            elif callable(keys):
                keys = keys()
            else:  # an Arrow or NumPy column
                keys = keys.tolist() if hasattr(keys, "tolist") else keys.to_pylist()
            self._keys = keys
        return keys

    @property
    def indices(self) -> list[int]:
        """Each row's record index in the stream."""
        self._unmixed("batch.indices")
        return self._index_list()

    def _index_list(self) -> list[int]:
        indices = self._indices
        if not isinstance(indices, list):
            indices = self._indices = list(indices)
        return indices

    @property
    def sizes(self) -> dict[str, list[tuple[int, int]]]:
        """Per decoded slot, each row's source size (``(height, width)`` for images)."""
        self._unmixed("batch.sizes")
        return self._sizes

    @property
    def slots(self) -> list[str]:
        """Slot names, in pipeline order."""
        return list(self._columns)

    def __getitem__(self, slot: str) -> Any:
        if slot not in self._columns:
            raise FieldError(f"slot {slot!r} is not in this batch; slots: {self.slots}")
        if self.mixed_by is not None and slot in self.row_values:
            self._unmixed(f"batch[{slot!r}] (one Python value per record)")
        return self._columns[slot]

    def __contains__(self, slot: object) -> bool:
        return slot in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        """The number of rows (not of slots: use ``len(batch.slots)`` for those)."""
        return len(self._indices)

    def keys(self) -> KeysView[str]:
        """The slot names, in pipeline order (row keys are :attr:`row_keys`)."""
        return self._columns.keys()

    def items(self) -> ItemsView[str, Any]:
        """``(slot name, column)`` pairs (per-record values raise after mixing)."""
        return _Items(self)

    def values(self) -> ValuesView[Any]:
        """The columns, in slot order (per-record values raise after mixing)."""
        return _Values(self)

    def to_dict(self) -> dict[str, Any]:
        """Return the columns as a plain dict."""
        return {name: self[name] for name in self._columns}

    def to(self, *args: Any, **kwargs: Any) -> Batch:
        """Move tensor columns with ``Tensor.to(*args, **kwargs)``; others are kept.

        Follows torch's ``.to`` protocol, so Lightning's ``move_data_to_device`` and
        Accelerate's ``send_to_device`` move a batch whole, metadata included.

        Example:
            >>> batch = batch.to("cuda:0", non_blocking=True)  # doctest: +SKIP
        """
        return self._map_tensors(lambda tensor: tensor.to(*args, **kwargs))

    def pin_memory(self, device: Any = None) -> Batch:
        """Copy tensor columns into page-locked host memory (torch's pin-memory protocol).

        A torch ``DataLoader(pin_memory=True)`` calls this on its pin-memory thread.

        Example:
            >>> batch = batch.pin_memory()  # doctest: +SKIP
        """
        return self._map_tensors(lambda tensor: tensor.pin_memory())

    def _map_tensors(self, fn: Any) -> Batch:
        import sys

        torch = sys.modules.get("torch")  # no tensor columns unless torch is loaded
        if torch is None:
            return self
        columns = {
            name: fn(column) if isinstance(column, torch.Tensor) else column
            for name, column in self._columns.items()
        }
        return self.with_columns(columns)

    def __eq__(self, other: object) -> bool:
        return self is other  # columns are arrays: element-wise ``==`` has no truth value

    __hash__ = object.__hash__

    def with_columns(self, columns: dict[str, Any], **changes: Any) -> Batch:
        """Return a batch with new columns; metadata is kept unless given in ``changes``."""
        fields: dict[str, Any] = {
            "keys": self._keys,
            "indices": self._indices,
            "errors": self.errors,
            "sizes": self._sizes,
            "row_values": self.row_values,
            "mixed_by": self.mixed_by,
            "pixels": self.pixels,
        }
        fields.update(changes)
        return Batch(columns, **fields)

    def __repr__(self) -> str:
        parts = []
        for name, column in self._columns.items():
            shape = getattr(column, "shape", None)
            if shape is not None:
                dtype = str(getattr(column, "dtype", "")).replace("torch.", "")
                parts.append(f"{name}: {dtype}{list(shape)}")
            elif isinstance(column, list):
                parts.append(f"{name}: list[{len(column)}]")
            else:  # an Arrow array
                parts.append(f"{name}: arrow {getattr(column, 'type', '?')}[{len(column)}]")
        errors = f", errors={len(self.errors)}" if self.errors else ""
        mixed = f", mixed_by={self.mixed_by}" if self.mixed_by else ""
        return f"Batch(rows={len(self)}, {', '.join(parts)}{errors}{mixed})"

    def _repr_html_(self) -> str:
        """Notebook view: rows, errors, each slot's type and shape, the first row keys
        and a few thumbnails of image slots (nothing is decoded or read)."""
        from dataio.views import batch_html

        return batch_html(self)


class _Items(ItemsView[str, Any]):
    """Items of a batch; sized by its slots, not its rows."""

    _mapping: Batch

    def __len__(self) -> int:
        return len(self._mapping.slots)


class _Values(ValuesView[Any]):
    """Columns of a batch; sized by its slots, not its rows."""

    _mapping: Batch

    def __len__(self) -> int:
        return len(self._mapping.slots)
