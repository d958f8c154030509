"""Adapters from Python objects to sources: ``records``, ``from_iterable``, ``from_*``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from dataio.exceptions import DataioError, FieldError, PlanError
from dataio.sources.arrow import arrow_source
from dataio.sources.base import IndexedSource, Source, single_pass_error

_permute: Any
try:  # the shuffle's C gather (optional build); itemgetter without it
    from dataio.sources import _permute
except ImportError:  # pragma: no cover - built with the package
    _permute = None

__all__ = [
    "from_callable",
    "from_iterable",
    "from_iterator",
    "from_sampler",
    "records",
]


def _is_path_or_buffer(x: Any) -> bool:
    return isinstance(x, str | bytes | bytearray | memoryview | os.PathLike)


class SequenceSource(IndexedSource):
    """A list, tuple or other ``Sequence``, read by position."""

    def __init__(self, rows: Sequence[Any], mode: str = "sequence") -> None:
        self.rows = rows
        self.mode = mode
        self._bulk = _bulk_method(rows)

    def length(self) -> int:
        """The number of rows."""
        return len(self.rows)

    def get(self, index: int) -> Any:
        """Read one row."""
        return self.rows[index]

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Read rows through ``__getitems__`` when the object has one, else one by one.

        ``indices`` may be a NumPy array (a shuffle's positions): a list or tuple gathers
        them in C; anything else gets Python ints.
        """
        if isinstance(indices, np.ndarray):
            if self._bulk is None and type(self.rows) in (list, tuple) and _permute is not None:
                found = _permute.gather(self.rows, np.ascontiguousarray(indices, np.int64))
                if found is not None:
                    return found
            indices = indices.tolist()
        if self._bulk is None:
            rows = self.rows
            if type(rows) in (list, tuple):
                if type(indices) is range and indices.step == 1:
                    return list(rows[indices.start : indices.stop])  # a loader's batch: a slice
                if len(indices) > 1:  # itemgetter gathers in C (a shuffle's batch)
                    return list(itemgetter(*indices)(rows))
            return [rows[i] for i in indices]
        wanted = list(indices)
        result = self._bulk(wanted)
        if not isinstance(result, list | tuple) or len(result) != len(wanted):
            got = f"{len(result)} items" if isinstance(result, list | tuple) else repr(type(result))
            raise DataioError(
                f"{type(self.rows).__name__}.__getitems__ must return a list or tuple of "
                f"exactly {len(wanted)} records in the requested order, got {got}"
            )
        return list(result)  # snapshot the outer container, not the records

    def describe(self) -> dict[str, Any]:
        """Adapter mode and the object's type; the data itself is not hashed."""
        return {"source": "records", "mode": self.mode, "type": type(self.rows).__qualname__}


def _bulk_method(rows: Any) -> Callable[[list[int]], Any] | None:
    method = getattr(type(rows), "__getitems__", None)
    if method is None:
        return None
    if not callable(method):
        raise PlanError(
            f"{type(rows).__name__}.__getitems__ is {method!r}, not a method; "
            "define it as a method, set it to None, or remove it"
        )
    return rows.__getitems__


class IterableSource(Source):
    """A reusable iterable: every pass calls ``iter()`` on it again."""

    def __init__(self, iterable: Iterable[Any]) -> None:
        self.iterable = iterable

    def iterate(self) -> Iterator[Any]:
        """Start a pass with ``iter()``."""
        return iter(self.iterable)

    def length(self) -> int | None:
        """Known only when the object has ``__len__``."""
        try:
            return len(self.iterable)  # type: ignore[arg-type]
        except TypeError:
            return None

    def describe(self) -> dict[str, Any]:
        """Adapter mode and the object's type."""
        return {"source": "records", "mode": "iterable", "type": type(self.iterable).__qualname__}


class FactorySource(Source):
    """A zero-argument callable returning a fresh iterable for every pass."""

    def __init__(self, factory: Callable[[], Iterable[Any]], mode: str = "factory") -> None:
        self.factory = factory
        self.mode = mode

    def iterate(self) -> Iterator[Any]:
        """Call the factory and iterate its result."""
        produced = self.factory()
        try:
            return iter(produced)
        except TypeError:
            raise PlanError(
                f"the record factory returned {type(produced).__name__}, which is not iterable"
            ) from None

    def describe(self) -> dict[str, Any]:
        """Adapter mode and the factory's name."""
        from dataio.sources.base import callable_name

        return {"source": "records", "mode": self.mode, "factory": callable_name(self.factory)}


class SinglePassSource(Source):
    """An iterable read once; a second pass is an error."""

    single_pass = True

    def __init__(self, opener: Callable[[], Iterator[Any]], what: str, mode: str) -> None:
        self._opener: Callable[[], Iterator[Any]] | None = opener
        self.what = what
        self.mode = mode

    def iterate(self) -> Iterator[Any]:
        """Open the one pass."""
        if self._opener is None:
            raise single_pass_error(self.what)
        opener, self._opener = self._opener, None
        return opener()

    def describe(self) -> dict[str, Any]:
        """Adapter mode."""
        return {"source": "records", "mode": self.mode}


class DatasetSource(SequenceSource):
    """A third-party dataset declared indexed: integer ``__getitem__`` and finite ``__len__``."""


def records(x: Any, *, indexed: bool = False) -> Source:
    """Adapt a Python object to a record source.

    * ``Sequence`` objects (lists, tuples, ...) are read by position.
    * ``indexed=True`` declares that integer ``__getitem__`` returns one record and
      ``__len__`` is finite, bypassing the object's iterator.
    * Other objects are iterated with ``iter()`` on every pass (an explicit
      ``__iter__``, or the legacy ``__getitem__`` protocol); ``__iter__ = None`` turns
      iteration off, and a zero-argument callable is then used as a factory.
    * Iterators and generators are single-pass.
    * Arrow data is read as record batches: ``pa.Table`` and ``pa.RecordBatch`` (and a
      polars ``DataFrame``) by position; a polars ``LazyFrame``, a duckdb relation, a
      ``pyarrow.dataset.Dataset`` or any object with ``__arrow_c_stream__`` is exported
      again for every pass; a ``pa.RecordBatchReader`` is single-pass. A dataio
      ``LazyFrame`` is already a source.

    Example:
        >>> len(dataio.records([{"x": 1}, {"x": 2}]))
        2
    """
    if isinstance(x, Source):
        return x
    arrow = arrow_source(x)
    if arrow is not None:
        if indexed and not isinstance(arrow, IndexedSource):
            raise PlanError(
                f"indexed=True: {type(x).__name__} is an Arrow stream, read in order only; "
                "bind a pyarrow.Table (e.g. pyarrow.table(x)) to read it by position"
            )
        return arrow
    if _is_path_or_buffer(x):
        raise PlanError(
            f"records() got a single path or buffer {x!r:.60}; pass a list of records, "
            "or use dataio.files(pattern) for files"
        )
    if isinstance(x, Mapping):
        raise PlanError(
            "records() got a mapping; pass a list of record mappings, or wrap a "
            "column-oriented table in a row adapter first"
        )
    if indexed:
        if isinstance(x, Iterator):
            raise PlanError("indexed=True needs a reusable dataset, not a one-shot iterator")
        try:
            n = len(x)
        except TypeError:
            raise PlanError(
                f"indexed=True needs a finite __len__; {type(x).__name__} has none"
            ) from None
        if not hasattr(type(x), "__getitem__"):
            raise PlanError(f"indexed=True needs integer __getitem__; {type(x).__name__} has none")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlanError(f"indexed=True needs len() to be a non-negative integer, got {n!r}")
        return DatasetSource(x, mode="indexed")
    if isinstance(x, Sequence):
        return SequenceSource(x)
    iter_method = getattr(type(x), "__iter__", _MISSING)
    if iter_method is None:
        if callable(x):
            return FactorySource(x)
        raise PlanError(f"{type(x).__name__} sets __iter__ = None and is not a record factory")
    if isinstance(x, Iterator):
        return from_iterator(x)
    if iter_method is not _MISSING or hasattr(type(x), "__getitem__"):
        return IterableSource(x)
    if callable(x):
        return FactorySource(x)
    raise PlanError(
        f"cannot read records from {type(x).__name__}: pass a sequence, an iterable, "
        "an iterator or a zero-argument factory"
    )


_MISSING = object()


def from_iterable(x: Any) -> Source:
    """A single-pass source over ``iter(x)`` (a factory is called once).

    Example:
        >>> source = dataio.from_iterable(({"v": i} for i in range(3)))
    """
    if isinstance(x, Source):
        raise PlanError("from_iterable() got a dataio source; bind it directly")
    iter_method = getattr(type(x), "__iter__", _MISSING)
    if iter_method is None:
        raise PlanError(f"{type(x).__name__} sets __iter__ = None; it is not iterable")
    if iter_method is _MISSING and not hasattr(type(x), "__getitem__"):
        if callable(x):
            return SinglePassSource(lambda: iter(x()), "from_iterable(factory)", "iterable-once")
        raise PlanError(f"from_iterable() needs an iterable, got {type(x).__name__}")
    return SinglePassSource(lambda: iter(x), "from_iterable()", "iterable-once")


def from_iterator(iterator: Iterator[Any]) -> Source:
    """A single-pass source over an iterator or generator.

    Example:
        >>> source = dataio.from_iterator(iter([{"v": 1}]))
    """
    if not isinstance(iterator, Iterator):
        raise PlanError(f"from_iterator() needs an iterator, got {type(iterator).__name__}")
    return SinglePassSource(lambda: iterator, "from_iterator()", "iterator")


def from_callable(factory: Callable[[], Iterable[Any]]) -> Source:
    """A reusable source: ``factory()`` returns a fresh iterable of records for each pass.

    Example:
        >>> source = dataio.from_callable(lambda: ({"v": i} for i in range(3)))
    """
    if not callable(factory):
        raise PlanError(f"from_callable() needs a zero-argument callable, got {factory!r}")
    return FactorySource(factory, mode="callable")


class SamplerSource(Source):
    """Rows of a batch sampler, one record each, tagged with the ``batch_id`` of their list."""

    def __init__(self, sampler: Iterable[Any], record_fn: Callable[[Any], Any] | None) -> None:
        self.sampler = sampler
        self.record_fn = record_fn

    def iterate(self) -> Iterator[Any]:
        """Iterate the sampler; shallow-copy each record and add ``batch_id``."""
        for batch_id, rows in enumerate(self.sampler):
            for row in rows:
                record = row if self.record_fn is None else self.record_fn(row)
                if not isinstance(record, Mapping):
                    raise FieldError(
                        f"from_sampler: batch {batch_id} gave a {type(record).__name__} record; "
                        "records must be mappings (pass record_fn= to build them)"
                    )
                yield {**record, "batch_id": batch_id}

    def describe(self) -> dict[str, Any]:
        """Adapter mode and the record function's name."""
        from dataio.sources.base import callable_name

        fn = None if self.record_fn is None else callable_name(self.record_fn)
        return {"source": "sampler", "record_fn": fn}

    @property
    def configured(self) -> bool:
        """A record function is tracked configuration."""
        return self.record_fn is not None


def from_sampler(
    batch_sampler: Iterable[Any], record_fn: Callable[[Any], Any] | None = None
) -> Source:
    """Records from a batch sampler (an iterable of row lists) with ``batch_id`` injected.

    Pair it with ``dataio.group_by("batch_id")`` to keep the sampler's batches.

    Example:
        >>> source = dataio.from_sampler([[{"x": 1}, {"x": 2}], [{"x": 3}]])
    """
    if isinstance(batch_sampler, Iterator):
        raise PlanError("from_sampler() needs a reusable batch sampler, not an iterator")
    if getattr(type(batch_sampler), "__iter__", None) is None:
        raise PlanError(
            f"from_sampler() needs an iterable sampler, got {type(batch_sampler).__name__}"
        )
    if record_fn is not None and not callable(record_fn):
        raise PlanError(f"from_sampler() record_fn must be callable, got {record_fn!r}")
    return SamplerSource(batch_sampler, record_fn)
