"""Ray datasets of dataio data: frames read partition-wise, tables with positions."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from dataio.exceptions import PlanError
from dataio.plan import runtime

if TYPE_CHECKING:
    from dataio.frame import LazyFrame

__all__ = ["from_frame", "from_source", "from_table"]

POSITION = "__position__"


def _ray() -> Any:
    try:
        import ray.data
    except ImportError as exc:
        raise PlanError(
            "dataio.ray needs Ray Data: pip install 'dataio[ray]' (or 'ray[data]')"
        ) from exc
    return ray


def _read(units: list[Any]) -> Iterator[Any]:
    """A read task's body: its units' batches (Ray blocks are tables), in order, with
    their positions."""
    import pyarrow as pa

    unit_batches = runtime.engine().unit_batches
    for unit in units:
        for batch in unit_batches(unit, position=POSITION):
            yield pa.Table.from_batches([batch])


def _shares(units: list[Any], parallelism: int) -> list[list[Any]]:
    """``units`` cut into at most ``parallelism`` contiguous runs of about equal rows
    (a run holds one unit at least; runs keep the units' order)."""
    tasks = max(1, min(parallelism, len(units)))
    ends = list(itertools.accumulate(max(u.rows, 1) for u in units))
    total = ends[-1] if ends else 0
    shares: list[list[Any]] = []
    lo = 0
    for i in range(1, tasks + 1):
        # the first unit boundary at or past this share's part of the rows, leaving a
        # unit for each share after it
        hi = lo + 1
        while hi < len(units) - (tasks - i) and ends[hi - 1] < total * i / tasks:
            hi += 1
        if i == tasks:
            hi = len(units)
        if lo < hi:
            shares.append(units[lo:hi])
        lo = hi
    return shares


def _ordered_datasource(
    units: list[Any], schema: Any, name: str, task: Callable[[list[Any]], Callable[[], Any]]
) -> Any:
    """A Ray datasource whose read tasks cover contiguous runs of ``units`` (each with
    ``rows`` and ``path``), in order; ``task(run)`` is a run's read function."""
    ray = _ray()
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class OrderedDatasource(Datasource):
        """Read tasks over contiguous runs of units, in order."""

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(
            self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
        ) -> list[Any]:
            out = []
            for share in _shares(units, parallelism):
                files = tuple(dict.fromkeys(u.path for u in share if u.path is not None))
                meta = BlockMetadata(
                    num_rows=sum(u.rows for u in share),
                    size_bytes=None,
                    exec_stats=None,
                    input_files=files,
                )
                out.append(
                    ReadTask(
                        task(share), meta, schema=schema, per_task_row_limit=per_task_row_limit
                    )
                )
            return out

        def get_name(self) -> str:
            return name

    del ray
    return OrderedDatasource()


def _datasource(units: list[Any], schema: Any) -> Any:
    """The datasource of a frame's units (files, runs of a Parquet file's row groups)."""
    return _ordered_datasource(
        units, schema, "dataio_frame", lambda run: functools.partial(_read, run)
    )


def from_frame(frame: LazyFrame, *, parallelism: int = -1) -> Any:
    """A Ray dataset of a frame's rows, read partition-wise; ``frame.to_ray()`` calls it.

    The frame's plan (a scan, then ``filter``, ``select``, ``with_columns``) runs in
    Ray read tasks, each on a contiguous run of the frame's units: files, and for
    Parquet files of several row groups, runs of their row groups (up to 64 per file),
    so one large file is read by several tasks. Row groups the filter excludes by their
    statistics are pruned as in a local scan, and the rows keep the frame's order with
    ``preserve_order``. Each row carries ``__position__``, its position in the frame:
    :func:`map_pipeline` seeds its random ops with it, as a local loader over the frame
    does. Row counts per unit are found when the dataset is made (Parquet footers; for
    a filtered frame, a count reading the filter's columns only).

    Args:
        frame: the lazy frame.
        parallelism: read tasks (at most one per unit), each given about equal rows;
            ``-1``: Ray chooses.

    Raises:
        PlanError: the plan needs all rows at once (joins, sorts, aggregates, ``unique``,
            limits) or Python code (Python filters, seeded op chains).

    Example:
        >>> frame = dataio.scan_parquet("s3://b/*.parquet").filter(dataio.col("y") > 0)
        >>> ds = frame.to_ray()  # doctest: +SKIP
    """
    ray = _ray()
    engine = runtime.engine()
    units = engine.frame_units(frame.plan, where="to_ray")
    import pyarrow as pa

    base = units[0].schema if units else frame.schema
    schema = base.append(pa.field(POSITION, pa.int64()))
    if not units:
        return ray.data.from_arrow(engine.plain_table(schema.empty_table()))
    blocks = None if parallelism == -1 else parallelism
    ds = ray.data.read_datasource(_datasource(units, schema), override_num_blocks=blocks)
    ds.context.execution_options.preserve_order = True
    return ds


def from_table(table: Any, *, start: int = 0, blocks: int | None = None) -> Any:
    """A Ray dataset of an Arrow table's rows with ``__position__`` ``start, start+1, ...``.

    Example:
        >>> ds = dataio.ray.from_table(pa.table({"jpeg": [...]}), blocks=4)  # doctest: +SKIP
    """
    import numpy as np
    import pyarrow as pa

    ray = _ray()
    if not isinstance(table, pa.Table):
        raise PlanError(f"from_table takes a pyarrow Table, got {type(table).__name__}")
    positions = pa.array(np.arange(start, start + table.num_rows, dtype=np.int64))
    table = table.append_column(POSITION, positions)
    n = max(1, min(blocks or 1, table.num_rows or 1))
    cuts = [round(i * table.num_rows / n) for i in range(n + 1)]
    parts = [table.slice(lo, hi - lo) for lo, hi in itertools.pairwise(cuts)]
    ds = ray.data.from_arrow(parts)
    ds.context.execution_options.preserve_order = True
    return ds


def from_source(source: Any, *, epoch: int = 0, blocks: int | None = None) -> Any:
    """A Ray dataset of a record source's records at ``epoch``, with ``__position__``.

    ``source`` is anything ``pipe.bind`` takes (``dataio.files``, ``manifest``,
    ``webdataset``, a shuffled source, a list of dicts, an Arrow table); a lazy frame
    goes to :func:`from_frame`. ``__position__`` is each record's stream position, as a
    local loader numbers it, so :func:`map_pipeline` gives that loader's values.

    WebDataset shards (``dataio.webdataset``, ``dataio.archive``) are read by Ray read
    tasks, each on a contiguous run of shards (``blocks`` tasks; one per shard by
    default): the driver reads only each shard's sample count, from the shard index
    (``shardindex.json`` beside the first shard, or the source's ``index=``) when there
    is one, else counted by one Ray task per shard (a walk of a local tar's headers; a
    remote shard streamed once), and the first sample's field names (the columns: each
    field as ``binary``, ``__key__`` and ``__url__`` as strings). A shard that differs
    from its count, or is corrupt, fails its read task naming it. Other sources are
    enumerated in the driver, in the order (and shuffle of ``epoch``) a local loader
    reads them; bytes their records only name (paths, URIs) are read later by
    :func:`map_pipeline`'s actors.

    Example:
        >>> ds = dataio.ray.from_source(dataio.files("/data/*.jpg"), blocks=16)  # doctest: +SKIP
    """
    import pyarrow as pa

    from dataio.sources import records
    from dataio.sources.archives import ArchiveSource

    _ray()
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise PlanError(f"epoch must be a non-negative integer, got {epoch!r}")
    if blocks is not None and (
        isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1
    ):
        raise PlanError(f"blocks must be a positive integer or None, got {blocks!r}")
    if hasattr(source, "to_ray"):  # a LazyFrame (dataio.frame imports this module)
        return from_frame(source)
    src = records(source).at_epoch(epoch)
    if type(src) is ArchiveSource and src.paths:
        return _from_shards(src, blocks)
    schema = src.arrow_schema()
    try:
        if schema is not None:
            table = pa.Table.from_batches(list(src.iterate_batches()), schema=schema)
        else:
            table = pa.Table.from_pylist(list(src.iterate()))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise PlanError(
            f"from_source: the records of {src!r} are not Arrow values ({exc}); map them to "
            "plain types (numbers, strings, bytes) first"
        ) from exc
    return from_table(table, blocks=blocks)


# -- WebDataset shards: one read task per run of shards ----------------------------------------

#: samples per block a shard read task yields (Ray moves blocks, not rows)
SHARD_BLOCK_ROWS = 256


def _shard_counts(src: Any) -> tuple[list[int] | None, str | None]:
    """Each shard's sample count from the source's shard index, and the index's URI;
    ``(None, None)`` without one (as a sharded local pass finds it)."""
    from dataio.exceptions import NotFoundError, PermissionDeniedError
    from dataio.sources import shardindex

    option = getattr(src, "_index_option", None)
    if option is False:
        return None, None
    if isinstance(option, str):
        loaded = shardindex.load(option)
        counts = loaded.counts(src.paths)
        if counts is None:
            missing = loaded.missing(src.paths)
            raise PlanError(
                f"webdataset index {option!r} does not list {len(missing)} of the "
                f"{len(src.paths)} shards (first {missing[0]!r}); write it again with "
                "dataio.write_webdataset_index(pattern, uri)"
            )
        return counts, option
    uri = shardindex.default_index(src.paths[0])
    try:
        loaded = shardindex.load(uri)
    except (NotFoundError, PermissionDeniedError):
        return None, None
    counts = loaded.counts(src.paths, by_name=False)  # an index lists the shards beside it
    return (counts, uri) if counts is not None else (None, None)


def _count_shard(path: str) -> int:
    """A shard's sample count: a plain tar's header walk (remote: streamed once), else
    its samples read."""
    from dataio.exceptions import FormatError
    from dataio.sources.archives import ArchiveSource, _shard_entry

    if path.lower().endswith(".tar"):
        try:
            return _shard_entry(path)[0]
        except FormatError:
            pass  # a compressed tar named .tar: read its samples below (or fail there)
    return sum(1 for _ in ArchiveSource([path], {}))


def _sample_columns(path: str) -> list[str]:
    """The fields of a shard's first sample, in order (the dataset's columns)."""
    from dataio.sources.archives import ArchiveSource

    for sample in ArchiveSource([path], {}):
        return list(sample)
    return ["__key__", "__url__"]


def _shard_table(samples: list[Any], columns: list[str], first: int, path: str) -> Any:
    import numpy as np
    import pyarrow as pa

    from dataio.exceptions import FormatError

    arrays = {}
    for name in columns:
        kind = pa.string() if name.startswith("__") else pa.binary()
        arrays[name] = pa.array([s.get(name) for s in samples], kind)
    for sample in samples:
        extra = set(sample) - set(columns)
        if extra:
            raise FormatError(
                f"webdataset shard {path!r}: sample {sample['__key__']!r} has fields "
                f"{sorted(extra)} the first shard's first sample lacks (columns: {columns}); "
                "Ray datasets need one set of fields: map the records to one first"
            )
    arrays[POSITION] = pa.array(np.arange(first, first + len(samples), dtype=np.int64))
    return pa.table(arrays)


def _read_shards(
    share: list[tuple[str, int, int]], columns: list[str], index: str | None
) -> Iterator[Any]:
    """A shard read task: each shard's samples as tables of ``SHARD_BLOCK_ROWS``, with
    their positions, checked against the shard's count."""
    from dataio.exceptions import FormatError
    from dataio.sources.archives import ArchiveSource

    for path, first, count in share:
        at, samples = first, []
        for sample in ArchiveSource([path], {}):  # a corrupt shard raises its error
            samples.append(sample)
            if len(samples) == SHARD_BLOCK_ROWS:
                yield _shard_table(samples, columns, at, path)
                at, samples = at + len(samples), []
        if samples:
            yield _shard_table(samples, columns, at, path)
            at += len(samples)
        if at - first != count:
            where = f"the index {index!r}" if index else "its count when the dataset was made"
            raise FormatError(
                f"webdataset shard {path!r} holds {at - first} samples, but {where} says "
                f"{count}; the shard changed: write the index again with "
                "dataio.write_webdataset_index(pattern), or make the dataset again"
            )


def _from_shards(src: Any, blocks: int | None) -> Any:
    """:func:`from_source` of WebDataset shards: read tasks per run of shards."""
    import pyarrow as pa

    ray = _ray()
    paths: list[str] = list(src.paths)
    counts, index = _shard_counts(src)
    if counts is None:  # counted where the shards are read: on the cluster, in parallel
        count = ray.remote(num_cpus=0.25)(_count_shard)
        counts = ray.get([count.remote(p) for p in paths])
    columns = _sample_columns(next((p for p, n in zip(paths, counts, strict=True) if n), paths[0]))
    schema = pa.schema(
        [pa.field(c, pa.string() if c.startswith("__") else pa.binary()) for c in columns]
        + [pa.field(POSITION, pa.int64())]
    )
    firsts = list(itertools.accumulate([0, *counts]))
    units = [_Shard(p, f, n) for p, f, n in zip(paths, firsts[:-1], counts, strict=True)]

    def task(run: list[_Shard]) -> Callable[[], Any]:
        plan = [(u.path, u.first, u.rows) for u in run]
        return functools.partial(_read_shards, plan, columns, index)

    source = _ordered_datasource(units, schema, "dataio_webdataset", task)
    ds = ray.data.read_datasource(source, override_num_blocks=blocks or len(units))
    ds.context.execution_options.preserve_order = True
    return ds


class _Shard:
    """One shard of a WebDataset dataset: its path, first position and sample count."""

    def __init__(self, path: str, first: int, rows: int) -> None:
        self.path, self.first, self.rows = path, first, rows
