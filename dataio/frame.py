"""Lazy frames: ``scan_*`` results and ``sql()``, run by DataFusion, usable as record sources.

A :class:`LazyFrame` is a value: every method returns a new frame and nothing reads data
until a terminal runs (``collect``, ``collect_arrow_reader``, ``to_polars``,
``to_torch``/``to_numpy``, iteration, ``__arrow_c_stream__``, ``explain``,
``describe``, ``len()``). Building a
frame reads each scan's schema from its first file's metadata and checks the plan
against it, so an unknown column fails where it is written.

Example:
    >>> rows = (dataio.scan_parquet("/data/shards/*.parquet")  # doctest: +SKIP
    ...         .filter(dataio.col("height") > 512)
    ...         .select("key", "height")
    ...         .collect()           # a pyarrow.Table
    ...         .to_pylist())
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from dataio.exceptions import PlanError
from dataio.io.resolve import remote_prefix, resolve, spec_items
from dataio.plan import runtime
from dataio.plan.expr import AGGREGATES, Expr, col, count
from dataio.plan.frame import (
    SOURCES,
    Aggregate,
    FileRecords,
    Filter,
    Join,
    Limit,
    Memory,
    Node,
    PyFilter,
    Scan,
    Select,
    Sort,
    Sql,
    Unique,
    WithColumns,
    tree,
    walk,
)
from dataio.plan.sql_paths import path_tables
from dataio.sources.base import IndexedSource, Source

if TYPE_CHECKING:
    import polars
    import pyarrow as pa

    from dataio.loader import Loader

__all__ = [
    "ArrowStream",
    "GroupBy",
    "LazyFrame",
    "read_feather",
    "read_parquet",
    "scan",
    "scan_csv",
    "scan_feather",
    "scan_json",
    "scan_parquet",
    "scan_tfrecord",
    "sql",
]

Format = Literal["parquet", "feather", "csv", "json", "tfrecord"]
PathSpec = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

EXTENSIONS: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".pq", ".parq"),
    "feather": (".arrow", ".feather", ".ipc", ".arrows"),
    "csv": (".csv", ".tsv"),
    "json": (".jsonl", ".ndjson", ".json"),
    "tfrecord": (".tfrecord", ".tfrecords", ".tfr", ".tfrecord.gz", ".tfrecords.gz", ".tfr.gz"),
}
JOINS = ("inner", "left", "right", "full", "semi", "anti")
_UNSET = object()


class LazyFrame(Source):
    """A query plan over files or Arrow data; run by DataFusion when a terminal is called.

    A frame is also a record source: ``pipe.bind(frame)`` streams its record batches in
    a fixed order, with sharding and exact resume; frames over local Parquet/Feather
    scans are also read by position (:meth:`by_position`) for shuffles and shards.
    """

    def __init__(self, node: Node, schema: pa.Schema) -> None:
        self._node = node
        self._schema = schema
        self._rows: IndexedSource | object | None = _UNSET

    # -- introspection -----------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The output schema (known without reading data)."""
        return self._schema

    @property
    def columns(self) -> list[str]:
        """The output column names."""
        return list(self._schema.names)

    @property
    def plan(self) -> Node:
        """The root node of the plan."""
        return self._node

    def _derive(self, node: Node) -> LazyFrame:
        return LazyFrame(node, runtime.engine().plan_schema(node))

    # -- relational methods ------------------------------------------------------------

    def filter(self, *predicates: Expr | str | Callable[[dict[str, Any]], Any]) -> LazyFrame:
        """Keep rows where every predicate holds.

        A predicate is an expression (``dataio.col("x") > 3``), a SQL predicate string
        (``"x > 3 AND label IN (1, 2)"``) — both pushed down to the scan — or a Python
        callable on each row dict, applied to the rows that pass the pushed-down part.

        Example:
            >>> frame.filter(dataio.col("h") > 512, lambda r: r["key"][-1] == "a")  # doctest: +SKIP
        """
        if not predicates:
            raise PlanError("filter() needs at least one predicate")
        node = self._node
        for predicate in predicates:
            if isinstance(predicate, Expr | str):
                if isinstance(predicate, Expr) and predicate.is_aggregate():
                    raise PlanError(f"filter({predicate!r}): aggregates belong in .agg()")
                node = Filter(node, predicate)
            elif callable(predicate):
                node = PyFilter(node, predicate)
            else:
                raise PlanError(
                    "filter() takes expressions (dataio.col(...) > 1), SQL predicate strings "
                    f"or callables on row dicts, got {predicate!r}"
                )
        return self._derive(node)

    def select(self, *columns: str | Expr | Sequence[str | Expr]) -> LazyFrame:
        """Exactly these columns (names or expressions), in this order.

        Example:
            >>> frame.select("key", (dataio.col("w") * 2).alias("w2"))  # doctest: +SKIP
        """
        exprs = _exprs(columns, "select")
        if not exprs:
            raise PlanError("select() needs at least one column")
        _no_aggregates(exprs, "select")
        _unique_names(exprs, "select")
        return self._derive(Select(self._node, tuple(exprs)))

    def with_columns(self, *exprs: Expr, **named: Expr | Any) -> LazyFrame:
        """Add or replace columns: aliased expressions, or ``name=expression``.

        Example:
            >>> frame.with_columns(area=dataio.col("h") * dataio.col("w"))  # doctest: +SKIP
        """
        items: list[Expr] = []
        for expr in exprs:
            if not isinstance(expr, Expr):
                raise PlanError(f"with_columns() takes expressions, got {expr!r}")
            items.append(expr)
        for name, value in named.items():
            items.append((value if isinstance(value, Expr) else _lit(value)).alias(name))
        if not items:
            raise PlanError("with_columns() needs at least one expression")
        _no_aggregates(items, "with_columns")
        _unique_names(items, "with_columns")
        return self._derive(WithColumns(self._node, tuple(items)))

    def drop(self, *columns: str | Sequence[str], strict: bool = True) -> LazyFrame:
        """All columns but these; with ``strict=False`` names not in the frame are ignored.

        Example:
            >>> frame.drop("jpeg", "label")  # doctest: +SKIP
        """
        names = _names(_flat(columns, "drop"), "drop columns") if columns else []
        unknown = [n for n in names if n not in self._schema.names]
        if unknown and strict:
            raise PlanError(
                f"drop(): columns {unknown} not found; available columns: {self.columns}"
            )
        kept = [n for n in self.columns if n not in names]
        if not kept:
            raise PlanError(f"drop({names}) would leave no columns")
        return self.select(*kept)

    def rename(
        self, mapping: Mapping[str, str] | Callable[[str], str], *, strict: bool = True
    ) -> LazyFrame:
        """Columns renamed by a mapping ``{old: new}`` or a function of the name; the order
        stays. With ``strict=False`` old names not in the frame are ignored.

        Example:
            >>> frame.rename({"h": "height"})  # doctest: +SKIP
        """
        if callable(mapping) and not isinstance(mapping, Mapping):
            renames = {name: mapping(name) for name in self.columns}
        elif isinstance(mapping, Mapping):
            renames = dict(mapping)
        else:
            raise PlanError(f"rename() takes a mapping or a function, got {mapping!r}")
        for old, new in renames.items():
            if not isinstance(old, str) or not isinstance(new, str) or not new:
                raise PlanError(f"rename() maps column names to names, got {old!r}: {new!r}")
        unknown = [n for n in renames if n not in self._schema.names]
        if unknown and strict:
            raise PlanError(
                f"rename(): columns {unknown} not found; available columns: {self.columns}"
            )
        names = [renames.get(n, n) for n in self.columns]
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise PlanError(f"rename() would make duplicate columns {clashes}")
        return self.select(*(col(n).alias(renames[n]) if n in renames else n for n in self.columns))

    def unique(
        self,
        subset: str | Sequence[str] | None = None,
        *,
        keep: Literal["first", "last", "any", "none"] = "any",
        maintain_order: bool = False,
    ) -> LazyFrame:
        """One row per distinct value of ``subset`` (all columns by default), as polars.

        ``keep``: which row of each value stays, ``"first"``, ``"last"``, ``"any"`` (here
        the first) or ``"none"`` (drop values seen more than once). The kept rows are
        always in the frame's order, so ``maintain_order`` changes nothing. Nulls equal
        nulls. It reads the whole input before the first row comes out.

        Example:
            >>> frame.unique(subset="key", keep="last")  # doctest: +SKIP
        """
        if keep not in ("first", "last", "any", "none"):
            raise PlanError(f"unique keep must be 'first', 'last', 'any' or 'none', got {keep!r}")
        names = () if subset is None else tuple(_names(subset, "unique subset"))
        unknown = [n for n in names if n not in self._schema.names]
        if unknown:
            raise PlanError(
                f"unique(): subset columns {unknown} not found; available columns: {self.columns}"
            )
        return self._derive(Unique(self._node, names, keep, bool(maintain_order)))

    def limit(self, n: int, *, offset: int = 0) -> LazyFrame:
        """At most ``n`` rows after skipping ``offset``, in the frame's order."""
        for name, value in (("n", n), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(f"limit {name} must be a non-negative integer, got {value!r}")
        return self._derive(Limit(self._node, n, offset))

    def head(self, n: int = 5) -> LazyFrame:
        """The first ``n`` rows (``limit(n)``)."""
        return self.limit(n)

    def sort(
        self,
        by: str | Expr | Sequence[str | Expr],
        *,
        descending: bool | Sequence[bool] = False,
        nulls_first: bool = False,
    ) -> LazyFrame:
        """Rows ordered by one or more keys.

        Example:
            >>> frame.sort(["label", "key"], descending=[True, False])  # doctest: +SKIP
        """
        keys = _exprs([by], "sort")
        if not keys:
            raise PlanError("sort() needs at least one key")
        flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(keys) or not all(isinstance(d, bool) for d in flags):
            raise PlanError(
                f"sort descending must be a bool or one bool per key ({len(keys)}), "
                f"got {descending!r}"
            )
        return self._derive(Sort(self._node, tuple(keys), tuple(flags), bool(nulls_first)))

    def join(
        self,
        other: LazyFrame,
        on: str | Sequence[str] | None = None,
        *,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        how: Literal["inner", "left", "right", "full", "semi", "anti"] = "inner",
        suffix: str = "_right",
    ) -> LazyFrame:
        """Join with another frame on key columns.

        Keys named alike appear once; other columns of ``other`` whose names clash get
        ``suffix``. The row order of a join is not specified: sort afterwards.

        Example:
            >>> images.join(labels, on="key", how="left")  # doctest: +SKIP
        """
        if not isinstance(other, LazyFrame):
            raise PlanError(f"join() needs another LazyFrame, got {type(other).__name__}")
        if how not in JOINS:
            raise PlanError(f"join how must be one of {list(JOINS)}, got {how!r}")
        if on is not None:
            if left_on is not None or right_on is not None:
                raise PlanError("join() takes on= or left_on=/right_on=, not both")
            left_keys = right_keys = _names(on, "join on")
        elif left_on is not None and right_on is not None:
            left_keys, right_keys = _names(left_on, "left_on"), _names(right_on, "right_on")
        else:
            raise PlanError("join() needs on= or both left_on= and right_on=")
        if len(left_keys) != len(right_keys) or not left_keys:
            raise PlanError(
                f"join needs as many left keys as right keys, got {left_keys} and {right_keys}"
            )
        return self._derive(
            Join(self._node, other._node, tuple(left_keys), tuple(right_keys), how, suffix)
        )

    def group_by(self, *keys: str | Expr | Sequence[str | Expr]) -> GroupBy:
        """Group rows by key columns; finish with :meth:`GroupBy.agg`.

        Example:
            >>> frame.group_by("label").agg(dataio.col("w").mean())  # doctest: +SKIP
        """
        exprs = _exprs(keys, "group_by")
        if not exprs:
            raise PlanError("group_by() needs at least one key; use .agg() for whole-frame totals")
        _no_aggregates(exprs, "group_by")
        return GroupBy(self, tuple(exprs))

    def agg(self, *aggs: Expr, **named: Expr) -> LazyFrame:
        """Aggregates over the whole frame: one row."""
        return GroupBy(self, ()).agg(*aggs, **named)

    def count(self) -> LazyFrame:
        """The number of non-null values of each column: a one-row frame, as polars.

        For the number of rows use ``len(frame)``.

        Example:
            >>> frame.filter(dataio.col("h") > 512).count().collect()  # doctest: +SKIP
        """
        return self.agg(*(col(name).count().alias(name) for name in self.columns))

    def __len__(self) -> int:
        """The number of rows: from file metadata for an addressable frame
        (:meth:`by_position`), the records a bare ``scan_numpy``/``scan_npz``/``scan_hdf5``
        iterates, else by a ``COUNT(*)`` query that reads no column it need not (a
        filter's columns only)."""
        known = self.length()
        if known is not None:
            return known
        if isinstance(self._node, FileRecords):
            # as many rows as iterating gives (a damaged file is one failed record), so
            # ``list(scan)``, which asks ``len`` first, does not fail on a damaged file
            return sum(1 for _ in self.iterate())
        return int(self.agg(count().alias("len")).collect().column(0)[0].as_py())

    def null_count(self) -> LazyFrame:
        """The number of nulls in each column: a one-row frame, as polars' ``null_count()``."""
        return self.agg(*(col(name).null_count().alias(name) for name in self.columns))

    def __bool__(self) -> bool:
        """Always true: a frame is a plan, and its truth never runs it (``len(frame)`` does)."""
        return True

    def describe(  # polars' describe(): statistics; the plan's description is description()
        self, percentiles: Sequence[float] | float | None = (0.25, 0.5, 0.75)
    ) -> pa.Table:
        """Summary statistics of each column, as polars' ``describe()``: a table with a
        ``statistic`` column (count, null_count, mean, std, min, the percentiles, max) and
        one column per frame column.

        Numeric and boolean columns give ``float64`` values (percentiles: the nearest
        value, as polars); string columns count, null_count, min and max as strings;
        other columns count and null_count. Runs one aggregate query, plus one sort per
        numeric column for its percentiles. The plan is :meth:`explain`.

        Example:
            >>> dataio.scan_parquet("/data/t.parquet").describe()  # doctest: +SKIP
        """
        from dataio.summary import describe_frame

        return describe_frame(self, percentiles)

    def description(self) -> dict[str, Any]:
        """The plan as a JSON-ready description (scans with paths as given, options, steps
        and expressions): what the frame's :meth:`signature` digests."""
        return {"source": "frame", "plan": self._node.describe()}

    # -- terminals ---------------------------------------------------------------------

    def collect(self) -> pa.Table:
        """Run the plan in parallel; a ``pyarrow.Table`` in the frame's order.

        Rows as dicts only when asked: ``frame.collect().to_pylist()``. Feather scans
        with plain projections and slices are read straight from a memory map: Arrow
        types and buffers come out as stored, with no copy.

        Example:
            >>> dataio.scan_parquet("/data/shard.parquet").collect().num_rows  # doctest: +SKIP
        """
        return runtime.engine().collect_table(self._node)

    def collect_arrow(self) -> pa.Table:
        """The reference's name for :meth:`collect`: the same ``pyarrow.Table``."""
        return self.collect()

    def collect_arrow_reader(self) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` that runs the plan batch by batch as it is read."""
        import pyarrow as pa

        batches = runtime.engine().stream_batches(self._node)
        return pa.RecordBatchReader.from_batches(self._schema, batches)

    def collect_arrow_stream(self) -> ArrowStream:
        """The reference's one-shot Arrow C stream object; the frame itself also has
        ``__arrow_c_stream__``."""
        return ArrowStream(self.collect_arrow_reader())

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """Export the results as an Arrow C stream (polars, duckdb, pyarrow read it)."""
        return self.collect_arrow_reader().__arrow_c_stream__(requested_schema)

    def to_ray(self, *, parallelism: int = -1) -> Any:
        """A Ray dataset of the frame's rows, read partition-wise by Ray read tasks.

        Each read task runs the plan (scan, ``filter``, ``select``, ``with_columns``) on
        its share of the files, in file order, adding ``__position__`` (the row's
        position in the frame); see :func:`dataio.ray.from_frame`. Needs ``dataio[ray]``.

        Raises:
            PlanError: a plan needing all rows at once (join, sort, aggregate, unique,
                limit) or Python code (Python filters, seeded op chains).

        Example:
            >>> ds = dataio.scan_parquet("/data/*.parquet").to_ray()  # doctest: +SKIP
        """
        from dataio.ray.datasets import from_frame  # imports Ray: only when asked for

        return from_frame(self, parallelism=parallelism)

    def to_polars(self) -> polars.DataFrame:
        """Run the plan; a ``polars.DataFrame``."""
        import polars as pl

        return pl.from_arrow(self.collect())  # type: ignore[return-value]

    def to_torch(
        self,
        *,
        batch_size: int = 256,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        shard: dict[str, Any] | Literal["auto"] | None = None,
        device: str | None = None,
        prefetch: int = 2,
        max_prefetch_bytes: int | None = None,
    ) -> Loader:
        """A loader of the frame's rows as batches of torch tensors, with no Python rows.

        The loader runs a pipeline of one passthrough slot per column
        (``slot(name).passthrough()``) and ``batch(batch_size)`` over the frame, so its
        record batches are sliced straight into columns and resume, shards, seeds and
        epochs work as for any :class:`~dataio.loader.Loader`. Each batch is a
        :class:`~dataio.batch.Batch` (a mapping of column name to column): numeric and
        ``bool`` columns and ``fixed_shape_tensor`` columns (op chains) without nulls are
        tensors (``[n, *shape]`` for tensors), others stay ``pyarrow`` arrays.

        Args:
            batch_size: rows per batch (256 by default, as the benchmarks' label batches;
                choose it for image tensors, e.g. 64).
            drop_last: drop the last, short batch.
            columns: the columns to deliver (all by default), in this order; the frame
                is narrowed to them first (``select``), so the others are never read.
            shuffle: read the rows in a permutation seeded by ``seed`` and the epoch
                (:meth:`shuffle`; a frame not addressable by position raises
                :class:`PlanError`).
            seed: seeds the shuffle (and nothing else here).
            epoch: the first pass's epoch.
            shard: ``{"id": rank, "of": world, "pad": True}`` or ``"auto"``, as in
                ``run(shard=...)``: an addressable frame deals each rank a contiguous run
                of rows, so it reads about ``1/world`` of the row groups.
            device: where the tensors are delivered (``"cpu"``, ``"cuda:0"``, ...).
            prefetch: batches in flight.
            max_prefetch_bytes: bound on bytes of finished or pending batches.

        Example:
            >>> prep = dataio.col("jpeg").image.decode().resize(256).center_crop(224)
            >>> frame = dataio.scan_parquet("/data/images/")  # doctest: +SKIP
            >>> with frame.with_columns(x=prep.normalize("imagenet")).to_torch(
            ...     columns=["x", "label"], batch_size=64, shuffle=True
            ... ) as loader:  # doctest: +SKIP
            ...     for batch in loader:
            ...         batch["x"].shape, batch["label"].dtype  # [64, 3, 224, 224], int64
        """
        return self._loader(
            "torch",
            batch_size=batch_size,
            drop_last=drop_last,
            columns=columns,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            shard=shard,
            device=device,
            prefetch=prefetch,
            max_prefetch_bytes=max_prefetch_bytes,
        )

    def to_numpy(
        self,
        *,
        batch_size: int = 256,
        drop_last: bool = False,
        columns: Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        shard: dict[str, Any] | Literal["auto"] | None = None,
        prefetch: int = 2,
        max_prefetch_bytes: int | None = None,
    ) -> Loader:
        """:meth:`to_torch` delivering NumPy arrays (read-only, zero-copy views of the
        Arrow columns where they have no nulls) instead of tensors.

        Example:
            >>> frame = dataio.scan_parquet("/d/t.parquet")  # doctest: +SKIP
            >>> for batch in frame.to_numpy(batch_size=512):  # doctest: +SKIP
            ...     batch["label"]  # an int64 array
        """
        return self._loader(
            "numpy",
            batch_size=batch_size,
            drop_last=drop_last,
            columns=columns,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            shard=shard,
            device=None,
            prefetch=prefetch,
            max_prefetch_bytes=max_prefetch_bytes,
        )

    def _loader(
        self,
        output: Literal["numpy", "torch"],
        *,
        batch_size: int,
        drop_last: bool,
        columns: Sequence[str] | None,
        shuffle: bool,
        seed: int,
        epoch: int,
        shard: dict[str, Any] | Literal["auto"] | None,
        device: str | None,
        prefetch: int,
        max_prefetch_bytes: int | None,
    ) -> Loader:
        from dataio.plan.pipeline import batch, pipeline, slot

        names = self.columns if columns is None else _names(columns, "to_torch columns")
        unknown = [name for name in names if name not in self._schema.names]
        if unknown:
            raise PlanError(
                f"to_torch/to_numpy columns {unknown} are not in the frame; it has {self.columns}"
            )
        plan = pipeline(
            *(slot(name).passthrough() for name in names),
            batch(batch_size, drop_last=drop_last, prefetch=prefetch),
        )
        frame = self if columns is None else self.select(*names)  # the rest is never read
        source: Source = frame.shuffle(seed=seed) if shuffle else frame
        return plan.bind(source).run(
            output,
            seed=seed,
            epoch=epoch,
            shard=shard,
            device=device,
            max_prefetch_bytes=max_prefetch_bytes,
        )

    def explain(self, *, analyze: bool = False) -> str:
        """The plan as text: dataio's steps and DataFusion's plans; ``analyze=True`` runs it
        and adds the metrics (rows, row groups pruned, bytes scanned)."""
        return runtime.engine().explain(self._node, analyze=analyze)

    # -- record source -----------------------------------------------------------------

    def arrow_schema(self) -> pa.Schema | None:
        """The frame's schema: a pass can be read as record batches.

        ``None`` for a bare ``scan_numpy``/``scan_npz``/``scan_hdf5``, whose records come
        from Python readers (see :meth:`iterate`).
        """
        return None if isinstance(self._node, FileRecords) else self._schema

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """The results as DataFusion streams them, in the same order on every pass; no rows."""
        batches = runtime.engine().stream_batches(self._node)
        try:
            yield from batches
        finally:
            batches.close()

    def by_position(self) -> IndexedSource | None:
        """The frame's rows read by position, when its plan fixes them; else ``None``.

        Scans of local Parquet or Feather files under projections, new columns and
        limits are addressable: shuffles and shards then read only the row groups /
        record batches holding their rows (computed columns run on the rows read).
        Filters, joins, SQL, sorts, aggregates, remote files and other formats are not.

        Example:
            >>> dataio.scan_parquet("/d/t.parquet").select("jpeg").by_position()  # doctest: +SKIP
        """
        if self._rows is _UNSET:
            self._rows = runtime.engine().frame_rows(self)  # a view: the frame stays a value
        return self._rows  # type: ignore[return-value]

    def iterate(self) -> Iterator[Mapping[str, Any]]:
        """The rows as dicts, batch by batch, in the same order on every pass.

        A bare ``scan_numpy``/``scan_npz``/``scan_hdf5`` yields its reader's records
        (NumPy arrays; a damaged file is one failed record) without Arrow.
        """
        if isinstance(self._node, FileRecords):
            yield from runtime.engine().iter_records(self._node)
            return
        for batch in self.iterate_batches():
            yield from batch.to_pylist()

    def shuffle(
        self, *, seed: int, buffer_size: int | None = None, reshuffle_each_epoch: bool = True
    ) -> Source:
        """Shuffle the frame's rows, seeded by ``seed`` and the loader's epoch.

        Without ``buffer_size`` an addressable frame (see :meth:`by_position`) is read in
        a seeded permutation of its positions: each batch reads only the row groups
        holding its rows, never the whole frame. Other frames raise :class:`PlanError`:
        pass ``buffer_size`` to mix a bounded window of the stream instead. A bare
        ``scan_numpy``/``scan_npz``/``scan_hdf5`` (Python records) shuffles as any
        reusable source: its records are read into a list.

        Example:
            >>> dataio.scan_parquet("/data/*.parquet").shuffle(seed=0)  # doctest: +SKIP
        """
        if buffer_size is not None or isinstance(self._node, FileRecords):
            # Python records of scan_numpy/npz/hdf5 shuffle as any reusable source does
            return super().shuffle(
                seed=seed, buffer_size=buffer_size, reshuffle_each_epoch=reshuffle_each_epoch
            )
        # the same argument checks as every shuffle (a buffered one is only built, not read)
        super().shuffle(seed=seed, buffer_size=1, reshuffle_each_epoch=reshuffle_each_epoch)
        rows = self.by_position()
        if rows is None:
            raise PlanError(
                f"a full shuffle needs rows addressable by position, and this frame's are "
                f"not: {runtime.engine().unaddressable_reason(self)}; pass buffer_size= for "
                "a bounded shuffle of the stream (e.g. shuffle(seed=0, buffer_size=4096)), "
                "or shuffle a frame that scans local Parquet/Feather files with only select, "
                "with_columns and limit steps"
            )
        return rows.shuffle(seed=seed, reshuffle_each_epoch=reshuffle_each_epoch)

    @property
    def configured(self) -> bool:
        """True when the plan has steps beyond its scans (filters, projections, ...)."""
        return any(not isinstance(n, SOURCES) for n in walk(self._node))

    def length(self) -> int | None:
        """The row count of an addressable frame (:meth:`by_position`), from file
        metadata; ``None`` for others (known only by running them)."""
        rows = self.by_position()
        return None if rows is None else rows.length()

    # -- display -----------------------------------------------------------------------

    def _plan_lines(self) -> list[str]:
        return tree(self._node)

    def __repr__(self) -> str:
        schema = ", ".join(f"{f.name}: {f.type}" for f in self._schema)
        plan = "\n".join("  " + line for line in self._plan_lines())
        return f"LazyFrame[{schema}]\n{plan}"

    def _repr_html_(self) -> str:
        # schema, plan, and the first rows only where reading them is cheap
        from dataio.views import frame_html

        return frame_html(self)


class GroupBy:
    """A frame grouped by keys; :meth:`agg` makes a frame with one row per group."""

    def __init__(self, frame: LazyFrame, keys: tuple[Expr, ...]) -> None:
        self._frame = frame
        self._keys = keys

    def agg(self, *aggs: Expr, **named: Expr) -> LazyFrame:
        """Aggregate columns: ``col("x").sum()``, ``.mean()``, ``.min()``, ``.max()``,
        ``.count()``, ``.n_unique()``, ``.first()``, ``dataio.count()``; ``name=expr``
        names one.

        Example:
            >>> frame.group_by("label").agg(n=dataio.count())  # doctest: +SKIP
        """
        items = list(aggs) + [expr.alias(name) for name, expr in named.items()]
        if not items:
            raise PlanError("agg() needs at least one aggregate expression")
        for expr in items:
            if not isinstance(expr, Expr) or not expr.is_aggregate():
                raise PlanError(
                    f"agg() takes aggregate expressions ({', '.join(AGGREGATES)} of a column, "
                    f"or dataio.count()), got {expr!r}"
                )
        return self._frame._derive(Aggregate(self._frame._node, self._keys, tuple(items)))


class ArrowStream:
    """A one-shot Arrow C stream (``__arrow_c_stream__``) of a frame's results."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader = reader

    @property
    def schema(self) -> pa.Schema:
        """The stream's schema."""
        return self._reader.schema

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """Hand the stream to a consumer (once)."""
        return self._reader.__arrow_c_stream__(requested_schema)


# -- scans -------------------------------------------------------------------------------------


def scan(path: PathSpec, *, format: Format | None = None, **options: Any) -> LazyFrame:
    """A lazy scan of files in ``format`` (by default, from the first path's extension).

    ``path`` is a file, a glob (``**`` recurses), a directory (its files of the format,
    recursively, sorted) or a list of those; files are read in that order.

    Example:
        >>> dataio.scan("/data/part-*.parquet").filter("label = 3")  # doctest: +SKIP
    """
    items = spec_items(path, f"scan_{format}" if format else "scan")
    listings: dict[str, list[str]] = {}  # remote prefixes listed once per scan
    fmt = format or _format_of(items[0], listings)
    if fmt not in EXTENSIONS:
        raise PlanError(f"scan format must be one of {list(EXTENSIONS)}, got {fmt!r}")
    engine = runtime.engine()
    options = engine.scan_options(fmt, options)
    files = resolve(
        items, what=f"scan_{fmt}", extensions=EXTENSIONS[fmt], kind=fmt, listings=listings
    )
    schema = engine.scan_schema(fmt, files[0], options)
    node = Scan(fmt, items, tuple(files), tuple(sorted(options.items())), schema)
    return LazyFrame(node, schema)


def scan_parquet(path: PathSpec) -> LazyFrame:
    """A lazy scan of Parquet files, with row-group pruning and column projection.

    Example:
        >>> dataio.scan_parquet("/data/shard.parquet").filter("height > 512")  # doctest: +SKIP
    """
    return scan(path, format="parquet")


def scan_feather(path: PathSpec) -> LazyFrame:
    """A lazy scan of Feather v2 / Arrow IPC files.

    Example:
        >>> dataio.scan_feather("/data/table.arrow").select("key").collect()  # doctest: +SKIP
    """
    return scan(path, format="feather")


def scan_csv(path: PathSpec, *, has_header: bool = True, separator: str = ",") -> LazyFrame:
    """A lazy scan of CSV files (types inferred from the first file).

    Example:
        >>> dataio.scan_csv("/data/labels.csv").filter(dataio.col("label") == 3)  # doctest: +SKIP
    """
    return scan(path, format="csv", has_header=has_header, separator=separator)


def scan_json(path: PathSpec) -> LazyFrame:
    """A lazy scan of JSON-lines files (one object per line).

    Example:
        >>> dataio.scan_json("/data/rows.jsonl").select("key")  # doctest: +SKIP
    """
    return scan(path, format="json")


def scan_tfrecord(
    path: PathSpec, *, schema: pa.Schema | None = None, compression: str | None = None
) -> LazyFrame:
    """A lazy scan of TFRecord files of ``tf.train.Example`` (checksums verified).

    Without ``schema``, features with one value in each of the first records become
    scalar columns (``binary``, ``float32``, ``int64``) and others list columns.
    ``compression``: ``"gzip"``/``"zlib"`` (TensorFlow's ``GZIP``/``ZLIB`` files),
    ``"none"``, or ``None`` to tell each file's from its first bytes.

    Example:
        >>> dataio.scan_tfrecord("/data/train.tfrecord.gz").filter("label < 10")  # doctest: +SKIP
    """
    options: dict[str, Any] = {} if schema is None else {"schema": schema}
    if compression is not None:
        options["compression"] = compression
    return scan(path, format="tfrecord", **options)


def read_parquet(path: PathSpec, *, columns: Sequence[str] | None = None) -> pa.Table:
    """Read Parquet files now, optionally only some columns, as a ``pyarrow.Table``.

    Example:
        >>> dataio.read_parquet("/data/shard.parquet", columns=["key", "height"])  # doctest: +SKIP
    """
    frame = scan_parquet(path)
    return (frame.select(*columns) if columns is not None else frame).collect()


def read_feather(path: PathSpec, *, columns: Sequence[str] | None = None) -> pa.Table:
    """Read Feather / Arrow IPC files now from a memory map: types and buffers as stored.

    Example:
        >>> dataio.read_feather("/data/table.arrow", columns=["key", "value"])  # doctest: +SKIP
    """
    frame = scan_feather(path)
    return (frame.select(*columns) if columns is not None else frame).collect()


def sql(query: str, *, functions: Mapping[str, Any] | None = None, **tables: Any) -> LazyFrame:
    """A SQL query over named inputs: frames, file paths and in-memory Arrow data.

    A table can also be a path or glob in single quotes, as in DuckDB and DataFusion:
    ``SELECT key FROM 'data/*.parquet'`` scans it as :func:`scan` does (format from the
    extension), and errors name it as written.

    Inputs can be a :class:`LazyFrame`, a path (scanned by extension), a
    ``pyarrow.Table`` / ``RecordBatch`` / ``RecordBatchReader``, or anything with
    ``__arrow_c_stream__`` (polars, pandas through pyarrow). dataio's kernels
    (``decode_image(bytes, mode)``, ``image_size(bytes)``) are SQL functions, and
    ``functions`` names slot chains (chain expressions, slots, ``dataio.chain()`` or
    sequences of ops) to call as ``name(bytes)``: the same fused kernel a pipeline runs,
    once per record batch, giving ``fixed_shape_tensor`` values when the shape is static.
    A chain with random ops needs a seed (``chain.seed(s)``) and is then called as
    ``name(bytes, position)``: row position ``i`` draws what record ``i`` of a pipeline
    ``run(seed=s)`` draws.

    Example:
        >>> dataio.sql("SELECT key FROM t WHERE height > 512", t=frame).collect()  # doctest: +SKIP
    """
    if not isinstance(query, str) or not query.strip():
        raise PlanError(f"sql() needs a query string, got {query!r}")
    _, paths = path_tables(query)  # the engine plans the rewritten text; errors show this
    nodes = tuple((name, _table_node(name, value)) for name, value in tables.items())
    nodes += tuple((path, scan(path).plan) for path in paths if path not in tables)
    node = Sql(query, nodes, _functions(functions))
    return LazyFrame(node, runtime.engine().plan_schema(node))


# -- helpers -----------------------------------------------------------------------------------


def _functions(
    functions: Mapping[str, Any] | None,
) -> tuple[tuple[str, tuple[Any, ...], int | None], ...]:
    if functions is None:
        return ()
    if not isinstance(functions, Mapping):
        raise PlanError(f"sql() functions must map names to chains, got {functions!r}")
    for name in functions:
        if not isinstance(name, str) or not name.isidentifier():
            raise PlanError(f"sql() function names must be identifiers, got {name!r}")
    return tuple((name, *_chain_ops(value)) for name, value in functions.items())


def _chain_ops(value: Any) -> tuple[tuple[Any, ...], int | None]:
    """The ops (and seed) of a chain given as an ``Expr("chain", ...)``, a slot, a chain
    or ops; only a chain expression carries a seed (``.seed(s)``)."""
    from dataio.plan.ops import Op

    if isinstance(value, Expr):
        node = value.args[0] if value.op == "alias" else value
        if node.op == "chain":
            return tuple(node.args[1]), (node.args[2] if len(node.args) > 2 else None)
    elif isinstance(value, Op):
        return (value,), None
    elif hasattr(value, "ops") and isinstance(value.ops, tuple):
        return tuple(value.ops), None
    elif isinstance(value, Sequence) and value and all(isinstance(v, Op) for v in value):
        return tuple(value), None
    raise PlanError(
        "a SQL function needs a chain: an expression built from col(...) with a decoder "
        f"and transforms, a slot, dataio.chain() or a sequence of ops; got {value!r}"
    )


def _table_node(name: str, value: Any) -> Node:
    if not name.isidentifier():
        raise PlanError(f"sql() table names must be identifiers, got {name!r}")
    if isinstance(value, LazyFrame):
        return value.plan
    if isinstance(value, str | os.PathLike):
        return scan(value).plan
    import pyarrow as pa

    if isinstance(value, pa.RecordBatch):
        table = pa.Table.from_batches([value])
    elif isinstance(value, pa.Table):
        table = value
    elif hasattr(value, "__arrow_c_stream__") or isinstance(value, pa.RecordBatchReader):
        table = pa.table(value) if not isinstance(value, pa.RecordBatchReader) else value.read_all()
    else:
        raise PlanError(
            f"sql() table {name!r} must be a LazyFrame, a path, a pyarrow Table/RecordBatch, "
            f"or have __arrow_c_stream__; got {type(value).__name__}"
        )
    return Memory(
        runtime.engine().plain_table(table),
        f"{name}: {type(value).__module__}.{type(value).__name__}",
    )


def _lit(value: Any) -> Expr:
    from dataio.plan.expr import lit

    return lit(value)


def _exprs(columns: Sequence[Any], what: str) -> list[Expr]:
    out: list[Expr] = []
    for item in columns:
        if isinstance(item, str):
            out.append(col(item))
        elif isinstance(item, Expr):
            out.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, bytes):
            out.extend(_exprs(item, what))
        else:
            raise PlanError(f"{what}() takes column names or expressions, got {item!r}")
    return out


def _no_aggregates(exprs: Sequence[Expr], what: str) -> None:
    for expr in exprs:
        if any(e.op == "agg" for e in expr.walk()):
            raise PlanError(
                f"{what}({expr!r}): aggregates belong in .group_by(...).agg(...) or .agg(...)"
            )


def _flat(items: Sequence[Any], what: str) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, bytes):
            out.extend(_flat(item, what))
        else:
            raise PlanError(f"{what}() takes column names, got {item!r}")
    return out


def _unique_names(exprs: Sequence[Expr], what: str) -> None:
    names = [e.output_name() for e in exprs]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        shown = ", ".join(e.describe() for e in exprs if e.output_name() == name)
        raise PlanError(
            f"{what}(): {shown} all make a column named {name!r}; a derived column keeps "
            "its leftmost column's name, as in polars: name them with .alias(...)"
        )


def _names(value: str | Sequence[str], what: str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(n, str) and n for n in names):
        raise PlanError(f"{what} must be column names, got {value!r}")
    return names


def _format_of(path: str, listings: dict[str, list[str]]) -> str:
    lowered = path.lower().rstrip("/")
    for fmt, extensions in EXTENSIONS.items():
        if lowered.endswith(extensions):
            return fmt
    if "://" in path:
        names = remote_prefix(path, listings)
    else:
        names = [f for _, _, fs in os.walk(path) for f in fs] if os.path.isdir(path) else []
    for fmt, extensions in EXTENSIONS.items():
        if any(name.lower().endswith(extensions) for name in names):
            return fmt
    raise PlanError(
        f"cannot tell the format of {path!r} from its extension; pass format= "
        f"(one of {list(EXTENSIONS)})"
    )
