"""A frame's plan cut into units another engine's tasks run apart: files, or runs of a
Parquet file's row groups.

A *partition-wise* plan (a scan followed by filters, projections and new columns) runs
over each of its files on its own and gives the frame's rows when the results are put
in file order (:mod:`dataio.engine.run` does the same for ``collect``). Each unit knows
the frame position of its first row (the rows of the files before it, counted by
DataFusion when the unit is planned: file statistics without a filter, the filter's
columns only with one), so a task reading any unit numbers its rows as a local loader
over the whole frame would. Plans that need all rows at once (joins, sorts, aggregates,
``unique``, limits, SQL) or Python code (Python filters, seeded op chains) are a
:class:`~dataio.exceptions.PlanError`.

A Parquet file of several row groups is cut into runs of row groups (at most
:data:`MAX_UNITS_PER_FILE` per file), so one large file is read by several tasks. A unit
reads its row groups through a pyarrow dataset of that subset, less those whose
statistics exclude the plan's filter, when the unit is counted (a unit left with no rows
is dropped) or read. The filter itself runs where the frame runs it: in DataFusion for a
local file (pyarrow's would drop NaN rows DataFusion keeps), pushed into the pyarrow
scan for a remote one (the frame reads those as pyarrow datasets).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dataio.engine.compile import SourceNode, compile_source, compile_steps, positioned, row_chain
from dataio.engine.errors import guard
from dataio.engine.plain import plain_batch
from dataio.engine.remote import is_remote
from dataio.engine.scan import check_data, read_file, reads_remote
from dataio.engine.schema import plan_schema
from dataio.engine.session import scan_session, session
from dataio.exceptions import NotFoundError, PlanError
from dataio.plan.frame import FileRecords, Filter, Node, PyFilter, Scan, Select, WithColumns

__all__ = ["MAX_UNITS_PER_FILE", "FrameUnit", "frame_units", "unit_batches"]

POSITION = "__position__"

#: a Parquet file's row groups are cut into at most this many runs: a filtered frame
#: counts each unit's rows with one query when the units are made
MAX_UNITS_PER_FILE = 64
#: files whose footers are read (and units counted) at once when the units are made
PLANNING_THREADS = 8


@dataclass(frozen=True)
class FrameUnit:
    """One file of a partition-wise plan (picklable: plan nodes are values).

    Attributes:
        source: the plan's scan (or in-memory table).
        steps: the row-local steps over it, bottom-up.
        path: the file (``None``: the in-memory table).
        start: the frame position of the unit's first row.
        rows: the unit's row count.
        schema: the plan's output schema (plain types).
        row_groups: the Parquet row groups of ``path`` the unit reads, in order
            (``None``: the whole file).
    """

    source: SourceNode
    steps: tuple[Node, ...]
    path: str | None
    start: int
    rows: int
    schema: Any
    row_groups: tuple[int, ...] | None = None


def _partition_wise(node: Node, where: str) -> tuple[SourceNode, list[Node]]:
    chain = row_chain(node)
    if chain is None:
        blocker = node
        while isinstance(blocker, Filter | PyFilter | Select | WithColumns):
            blocker = blocker.input  # the row-local steps above the step that blocks
        raise PlanError(
            f"{where} runs partition-wise plans (a scan, then filter, select, with_columns); "
            f"this frame has {blocker.label()}, which needs all rows at once (a shuffle): "
            "collect() it first, or run that step on the Ray dataset"
        )
    source, steps = chain
    if isinstance(source, FileRecords):
        raise PlanError(
            f"{where}: {source.label()} gives Python records, not Arrow rows; use "
            "scan_parquet/scan_feather, or dataio.ray.from_source for record sources"
        )
    for step in steps:
        if isinstance(step, PyFilter):
            raise PlanError(
                f"{where}: {step.label()} is Python code the frame runs on its own thread; "
                "filter with an expression (dataio.col(...)) instead"
            )
        if positioned(step):
            raise PlanError(
                f"{where}: {step.label()} numbers the frame's rows (a seeded op chain or "
                "unique); run random ops with dataio.ray.map_pipeline(..., seed=...)"
            )
    return source, steps


def frame_units(node: Node, *, where: str = "to_ray") -> list[FrameUnit]:
    """The plan's units in file order (and row-group order within a file), each with
    its first row's frame position; units a filter leaves without rows are left out.

    Raises:
        PlanError: the plan is not partition-wise (see the module notes).
    """
    source, steps = _partition_wise(node, where)
    schema = plan_schema(node)
    paths: list[str | None] = list(source.files) if isinstance(source, Scan) else [None]
    filtered = any(isinstance(step, Filter) for step in steps)

    def counted(path: str | None) -> list[tuple[tuple[int, ...] | None, int]]:
        """``path``'s units (row-group runs) with their row counts."""
        out = []
        for groups, stored in _row_group_runs(source, path, where):
            if groups is None or filtered:
                probe = FrameUnit(source, tuple(steps), path, 0, 0, schema, groups)
                with guard(where, path):
                    stored = int(_frame(probe).count())
            out.append((groups, stored))
        return out

    # footers (remote: a request each) and filtered counts, several files at a time
    with ThreadPoolExecutor(max(1, min(PLANNING_THREADS, len(paths)))) as pool:
        found = list(pool.map(counted, paths))
    units = []
    start = 0
    for path, runs in zip(paths, found, strict=True):
        for groups, rows in runs:
            if rows or groups is None:
                units.append(FrameUnit(source, tuple(steps), path, start, rows, schema, groups))
            start += rows
    return units


def _row_group_runs(
    source: SourceNode, path: str | None, where: str
) -> list[tuple[tuple[int, ...] | None, int]]:
    """``path``'s units: runs of its row groups with their stored row counts, or one
    ``(None, 0)`` for the whole file (not Parquet, one row group, in memory)."""
    if path is None or not isinstance(source, Scan) or source.format != "parquet":
        return [(None, 0)]
    from dataio.formats._arrow import read_errors

    with guard(where, path), read_errors(path, source.label()):
        fragment = _fragment(source, path)
        if fragment is None:
            return [(None, 0)]
        sizes = [group.num_rows for group in fragment.row_groups]
    if len(sizes) < 2:
        return [(None, 0)]
    runs = min(len(sizes), MAX_UNITS_PER_FILE)
    cuts = [round(i * len(sizes) / runs) for i in range(runs + 1)]
    return [(tuple(range(lo, hi)), sum(sizes[lo:hi])) for lo, hi in itertools.pairwise(cuts)]


def _dataset(scan: Scan, path: str) -> Any:
    """A pyarrow dataset of one Parquet file of ``scan`` (remote: read by ranges), or
    ``None`` where it cannot be one (a web server without ``Range``)."""
    import pyarrow.dataset as ds

    check_data(scan, path)
    if is_remote(path):
        from dataio.engine.remote_files import NoRanges, dataset

        try:
            return dataset(path, scan.schema)
        except NoRanges:
            return None
    if not os.path.isfile(path):
        raise NotFoundError(f"{scan.label()}: the file {path!r} is gone")
    return ds.dataset(path, format="parquet", schema=scan.schema)


def _fragment(scan: Scan, path: str) -> Any:
    """The one Parquet fragment of ``path``, its row groups known, or ``None``."""
    import pyarrow.dataset as ds

    found = _dataset(scan, path)
    if found is None:
        return None
    fragment = next(iter(ds.FileSystemDataset.get_fragments(found)))
    fragment.ensure_complete_metadata()
    return fragment


def _row_groups(
    scan: Scan,
    path: str,
    groups: tuple[int, ...],
    steps: tuple[Node, ...] = (),
    remote: bool = False,
) -> Any:
    """A one-fragment pyarrow dataset of row groups ``groups`` of ``path`` (with
    ``steps``: those whose statistics may hold rows they keep), of the same class as the
    whole file's (a remote one keeps fetching its chunks ahead)."""
    import pyarrow.dataset as ds

    whole = _dataset(scan, path)
    if whole is None:  # pragma: no cover - the units were made from a ranged read
        raise PlanError(f"{scan.label()}: {path!r} is no longer served by ranges")
    fragment = next(iter(ds.FileSystemDataset.get_fragments(whole)))
    subset = fragment.subset(row_group_ids=list(groups))
    pushed = _pushed_filter(subset, whole, steps, remote)
    if pushed is not None:
        # pruned by statistics only, as DataFusion's own Parquet scan prunes them
        subset = subset.subset(filter=pushed)
    kept = [group.id for group in subset.row_groups]
    if kept != sorted(kept) or not set(kept) <= set(groups):  # pragma: no cover
        raise PlanError(f"{scan.label()}: pyarrow reordered row groups {groups} of {path!r}")
    made = type(whole)([subset], whole.schema, whole.format, whole.filesystem)
    for name in ("handler", "path"):  # remote_files' fetch-ahead dataset
        if hasattr(whole, name):
            setattr(made, name, getattr(whole, name))
    return made


def _pushed_filter(fragment: Any, whole: Any, steps: tuple[Node, ...], remote: bool) -> Any:
    """The pyarrow expression DataFusion pushes into a scan of ``fragment`` under
    ``steps`` (``None``: no filter to push), found by planning that scan."""
    if not any(isinstance(step, Filter) for step in steps):
        return None
    ctx = scan_session(1, remote=remote)
    probe = _capture_class()([fragment], whole.schema, whole.format, whole.filesystem)
    compile_steps(ctx.read_table(probe), list(steps), ctx, "collect").execution_plan()
    return probe.pushed


@functools.cache
def _capture_class() -> type:
    import pyarrow.dataset as ds

    class Capture(ds.FileSystemDataset):
        """A dataset noting the filter DataFusion pushes into it (when planning)."""

        pushed: Any = None

        def get_fragments(self, filter: Any = None) -> Any:
            self.pushed = filter
            return super().get_fragments(filter=filter)

    return Capture


_unit_sessions = threading.local()


def _row_group_session(remote: bool) -> Any:
    """This thread's context for units of a local file's row groups: DataFusion pushes
    no filter into their pyarrow scan.

    pyarrow's scan filters rows by IEEE rules (``NaN > 0.5`` is false) while DataFusion
    orders NaN above every number, as the frame's own scan does: the filter runs in
    DataFusion over the rows read (the row groups were pruned by statistics first, see
    :func:`_row_groups`).
    """
    cache: dict[bool, Any] | None = getattr(_unit_sessions, "contexts", None)
    if cache is None:
        cache = _unit_sessions.contexts = {}
    ctx = cache.get(remote)
    if ctx is None:
        ctx = session(1, remote=remote)
        if not ctx.remove_optimizer_rule("push_down_filter"):  # pragma: no cover
            raise PlanError("DataFusion has no push_down_filter rule to leave out")
        cache[remote] = ctx
    return ctx


def _frame(unit: FrameUnit) -> Any:
    remote = reads_remote(unit.source)
    if unit.path is None or not isinstance(unit.source, Scan):
        ctx = scan_session(1, remote=remote)
        base = compile_source(unit.source, ctx, "collect")
    elif unit.row_groups is not None and is_remote(unit.path):
        # the frame reads a remote file as a pyarrow dataset, its filter pushed into
        # pyarrow's scan: so does the unit
        ctx = scan_session(1, remote=remote)
        base = ctx.read_table(_row_groups(unit.source, unit.path, unit.row_groups))
    elif unit.row_groups is not None:
        # the frame reads a local file with DataFusion's Parquet scan: row groups pruned
        # by statistics, then the filter in DataFusion
        ctx = _row_group_session(remote)
        groups = _row_groups(unit.source, unit.path, unit.row_groups, unit.steps, remote)
        base = ctx.read_table(groups)
    else:
        ctx = scan_session(1, remote=remote)
        base = read_file(ctx, unit.source, unit.path)
    return compile_steps(base, list(unit.steps), ctx, "collect")


def unit_batches(unit: FrameUnit, *, position: str | None = POSITION) -> Iterator[Any]:
    """The unit's rows as record batches, in order; with ``position``, a column of
    each row's frame position (int64) appended under that name."""
    import numpy as np
    import pyarrow as pa

    at = unit.start
    with guard("to_ray", unit.path):
        for batch in _frame(unit).execute_stream():
            rows = plain_batch(batch.to_pyarrow(), unit.schema)
            if position is not None:
                positions = pa.array(np.arange(at, at + rows.num_rows, dtype=np.int64))
                rows = rows.append_column(position, positions)
            at += rows.num_rows
            yield rows
