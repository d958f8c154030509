"""Compile frame plans (:mod:`dataio.plan.frame`) to DataFusion DataFrames.

A plan compiles in one of four modes: ``schema`` (over empty tables with the scans'
schemas, reading no file), ``collect`` and ``stream`` (to run), ``explain`` (to print).
Where a running plan needs DataFusion above rows that passed a Python filter, the caller
passes ``materialize``, which runs that part and returns its table; this module never
runs a plan itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from dataio.engine.errors import guard
from dataio.engine.expressions import POSITION, check_expr, column, compile_expr, named, seeded
from dataio.engine.plain import empty_table
from dataio.engine.records import records_table
from dataio.engine.relational import join, sql_plan, unqualified
from dataio.engine.scan import read_file
from dataio.exceptions import QueryError
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
    source_schema,
)

__all__ = [
    "Materialize",
    "Mode",
    "apply_step",
    "compile_plan",
    "compile_source",
    "compile_steps",
    "positioned",
    "row_chain",
    "units",
]

SourceNode = Scan | Memory | FileRecords
Mode = Literal["schema", "collect", "stream", "explain"]
Materialize = Callable[[Node], Any]
"""Runs a plan and returns its ``pyarrow.Table`` (:func:`dataio.engine.run.collect_table`)."""

_ROW_OPS = (Filter, PyFilter, Select, WithColumns)


def row_chain(node: Node) -> tuple[SourceNode, list[Node]] | None:
    """A scan (or table) followed by row-local steps only, as (source, steps)."""
    steps: list[Node] = []
    while isinstance(node, _ROW_OPS):
        steps.append(node)
        node = node.input
    if isinstance(node, SOURCES):
        return node, steps[::-1]
    return None


def positioned(node: Node) -> bool:
    """True when ``node`` reads row positions: a projection holding seeded chains, or a
    ``unique`` (it keeps the first or last row of each value, in the input's order)."""
    if isinstance(node, Unique):
        return True
    return isinstance(node, Select | WithColumns) and any(seeded(e) for e in node.exprs)


def _numbered(table: Any, ctx: Any) -> Any:
    """The materialized input of a seeded step, its rows numbered ``0..n-1`` in order.

    DataFusion may split and reorder batches, and a file-by-file plan would restart any
    row number, so only a position column added to the rows in the frame's order seeds
    each row as a pipeline over the frame seeds its record (row ``i`` is record ``i``).
    """
    import numpy as np
    import pyarrow as pa

    if POSITION in table.schema.names:  # rows read by position come numbered already
        return ctx.from_arrow(table)
    positions = pa.array(np.arange(table.num_rows, dtype=np.int64))
    return ctx.from_arrow(table.append_column(POSITION, positions))


def _positioned_step(step: Select | WithColumns | Unique, df: Any, ctx: Any, mode: Mode) -> Any:
    """A seeded step or a ``unique`` over ``df`` (which has the position column, or gets a stand-in
    when only planned), the position column dropped after."""
    import pyarrow as pa
    from datafusion import lit

    if POSITION not in df.schema().names:  # schema/explain: no rows to number
        df = df.with_column(POSITION, lit(pa.scalar(0, pa.int64())))
    df = _apply(step, df, ctx, mode)
    return df.drop(POSITION) if POSITION in df.schema().names else df


def units(source: SourceNode) -> list[str | None]:
    """The files a source runs as, one plan each (``[None]``: an in-memory table)."""
    return list(source.files) if isinstance(source, Scan) else [None]


def compile_steps(df: Any, steps: list[Node], ctx: Any, mode: Mode) -> Any:
    """``steps`` applied in order over an already compiled input."""
    for step in steps:
        df = apply_step(step, df, ctx, mode)
    return df


def apply_step(step: Node, df: Any, ctx: Any, mode: Mode) -> Any:
    """One row-local or relational step over an already compiled input."""
    if positioned(step):
        assert isinstance(step, Select | WithColumns | Unique)
        return _positioned_step(step, df, ctx, mode)
    return _apply(step, df, ctx, mode)


def _apply(step: Node, df: Any, ctx: Any, mode: Mode) -> Any:
    where = step.label()
    if isinstance(step, PyFilter):
        return df  # schema/explain only: the Python part runs on batches
    if isinstance(step, Filter):
        if isinstance(step.predicate, str):
            with guard(where):
                return df.filter(df.parse_sql_expr(step.predicate))
        if mode == "schema":
            check_expr(step.predicate, df, ctx, where)
        with guard(where):
            return df.filter(compile_expr(step.predicate, ctx, df))
    if isinstance(step, Select | WithColumns):
        if mode == "schema":
            for expr in step.exprs:
                check_expr(expr, df, ctx, where)
        with guard(where):
            exprs = [named(e, ctx, df) for e in step.exprs]
            return df.select(*exprs) if isinstance(step, Select) else df.with_columns(*exprs)
    if isinstance(step, Sort):
        if mode == "schema":
            for key in step.keys:
                check_expr(key, df, ctx, where)
        with guard(where):
            keys = [
                compile_expr(k, ctx, df).sort(ascending=not d, nulls_first=step.nulls_first)
                for k, d in zip(step.keys, step.descending, strict=True)
            ]
            return df.sort(*keys)
    if isinstance(step, Limit):
        with guard(where):
            return df.limit(step.n if step.n is not None else 2**62, step.offset)
    if isinstance(step, Aggregate):
        if mode == "schema":
            for expr in (*step.keys, *step.aggs):
                check_expr(expr, df, ctx, where)
        with guard(where):
            return df.aggregate(
                [named(k, ctx, df) for k in step.keys], [named(a, ctx, df) for a in step.aggs]
            )
    if isinstance(step, Unique):
        return _unique(step, df, where)
    raise QueryError(f"cannot apply {where} here")  # pragma: no cover


def _unique(step: Unique, df: Any, where: str) -> Any:
    """The rows :class:`Unique` keeps, in their input order (``df`` has positions).

    One hash aggregate finds each value's first or last position (and its count, for
    ``keep="none"``); a semi join on those positions keeps the rows. Window functions
    (``row_number`` per value) sorted every partition and took ~40x longer on 2M rows.
    """
    from datafusion import functions as f
    from datafusion import lit

    names = [n for n in df.schema().names if n != POSITION]
    missing = [n for n in step.subset if n not in names]
    if missing:
        raise QueryError(f"{where}: subset columns {missing} not found; available: {names}")
    keys = [column(n) for n in step.subset or names]
    kept, seen = "__dataio_kept", "__dataio_seen"
    pick = f.max if step.keep == "last" else f.min
    with guard(where):
        groups = df.aggregate(keys, [pick(column(POSITION)).alias(kept), f.count().alias(seen)])
        if step.keep == "none":
            groups = groups.filter(column(seen) == lit(1))
        if set(step.subset or names) == set(names):  # the groups are the rows: no join
            rows = groups.sort(column(kept).sort())
            return rows.select(*(column(n) for n in names), column(kept).alias(POSITION))
        groups = groups.select(column(kept))
        rows = df.join(groups, how="semi", left_on=[POSITION], right_on=[kept])
        return rows.sort(column(POSITION).sort()).select(*(column(n) for n in [*names, POSITION]))


def compile_plan(
    node: Node, ctx: Any, mode: Mode, *, materialize: Materialize | None = None
) -> Any:
    """A DataFusion DataFrame for ``node`` (materializing Python-filtered parts).

    ``materialize`` is needed in the ``collect`` and ``stream`` modes only.
    """

    def table(part: Node) -> Any:
        if materialize is None:  # pragma: no cover - a caller bug
            raise QueryError(f"compiling {part.label()} to run needs materialize=")
        return ctx.from_arrow(materialize(part))

    if positioned(node) and mode in ("collect", "stream"):
        assert isinstance(node, Select | WithColumns | Unique)
        if materialize is None:  # pragma: no cover - a caller bug
            raise QueryError(f"compiling {node.label()} to run needs materialize=")
        return apply_step(node, _numbered(materialize(node.input), ctx), ctx, mode)
    chain = row_chain(node)
    if chain is not None and any(positioned(step) for step in chain[1]):
        chain = None  # compiled step by step below, positions added under the seeded step
    if chain is not None:
        source, steps = chain
        if mode in ("collect", "stream"):
            python = [i for i, step in enumerate(steps) if isinstance(step, PyFilter)]
            if python:
                # Rows that passed a Python filter go back to DataFusion as one in-memory
                # partition; the steps after it keep their order on it.
                base = table(steps[python[-1]])
                return compile_steps(base, steps[python[-1] + 1 :], ctx, mode)
            if mode == "stream" and len(units(source)) > 1:
                return table(node)  # several files, kept in order
        return compile_steps(compile_source(source, ctx, mode), steps, ctx, mode)
    if isinstance(node, PyFilter):
        if mode in ("schema", "explain"):
            return compile_plan(node.input, ctx, mode)
        return table(node)
    if isinstance(node, Limit) and mode in ("collect", "stream") and row_chain(node.input):
        return table(node)  # "the first n rows" in file order
    if isinstance(node, Join):
        where = node.label()
        left = unqualified(compile_plan(node.left, ctx, mode, materialize=materialize), where)
        right = unqualified(compile_plan(node.right, ctx, mode, materialize=materialize), where)
        return join(node, left, right)
    if isinstance(node, Sql):
        inputs = [
            (name, compile_plan(child, ctx, mode, materialize=materialize))
            for name, child in node.tables
        ]
        return sql_plan(node, inputs, ctx)
    inner = node.children()
    if len(inner) != 1:  # pragma: no cover
        raise QueryError(f"cannot compile {node.label()}")
    return apply_step(node, compile_plan(inner[0], ctx, mode, materialize=materialize), ctx, mode)


def compile_source(source: SourceNode, ctx: Any, mode: Mode) -> Any:
    """A scan (its files in order) or an in-memory table as a DataFusion frame."""
    if mode == "schema":
        return ctx.from_arrow(empty_table(source_schema(source)))
    if isinstance(source, Memory):
        return ctx.from_arrow(source.table)
    if isinstance(source, FileRecords):
        return ctx.from_arrow(records_table(source))
    frames = [read_file(ctx, source, path) for path in source.files]
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return df
