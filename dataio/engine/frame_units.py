"""A frame's plan cut into units another engine's tasks run apart: one file each.

A *partition-wise* plan (a scan followed by filters, projections and new columns) runs
over each of its files on its own and gives the frame's rows when the results are put
in file order (:mod:`dataio.engine.run` does the same for ``collect``). Each unit knows
the frame position of its first row (the rows of the files before it, counted by
DataFusion when the unit is planned: file statistics without a filter, the filter's
columns only with one), so a task reading any unit numbers its rows as a local loader
over the whole frame would. Plans that need all rows at once (joins, sorts, aggregates,
``unique``, limits, SQL) or Python code (Python filters, seeded op chains) are a
:class:`~dataio.exceptions.PlanError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dataio.engine.compile import SourceNode, compile_source, compile_steps, positioned, row_chain
from dataio.engine.errors import guard
from dataio.engine.plain import plain_batch
from dataio.engine.scan import read_file, reads_remote
from dataio.engine.schema import plan_schema
from dataio.engine.session import scan_session
from dataio.exceptions import PlanError
from dataio.plan.frame import FileRecords, Filter, Node, PyFilter, Scan, Select, WithColumns

__all__ = ["FrameUnit", "frame_units", "unit_batches"]

POSITION = "__position__"


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
    """

    source: SourceNode
    steps: tuple[Node, ...]
    path: str | None
    start: int
    rows: int
    schema: Any


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
    """The plan's units in file order, each with its first row's frame position.

    Raises:
        PlanError: the plan is not partition-wise (see the module notes).
    """
    source, steps = _partition_wise(node, where)
    schema = plan_schema(node)
    paths: list[str | None] = list(source.files) if isinstance(source, Scan) else [None]
    units = []
    start = 0
    for path in paths:
        probe = FrameUnit(source, tuple(steps), path, start, 0, schema)
        with guard(where, path):
            rows = int(_frame(probe).count())
        units.append(FrameUnit(source, tuple(steps), path, start, rows, schema))
        start += rows
    return units


def _frame(unit: FrameUnit) -> Any:
    ctx = scan_session(1, remote=reads_remote(unit.source))
    if unit.path is None or not isinstance(unit.source, Scan):
        base = compile_source(unit.source, ctx, "collect")
    else:
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
