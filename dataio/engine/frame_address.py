"""Which frames have positions: a plan seen as positions over one Parquet or Feather scan.

A plan of projections, new columns and limits over a local Parquet or Feather scan maps
rows one to one, so its rows are numbered: :func:`addressable` reads such a plan as an
:class:`Addressed` (the scan, the columns read, the limits' window and the computed steps
left to run); any other plan gives the node that prevents it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataio.plan.frame import Limit, Node, Scan, Select, WithColumns

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = ["Addressed", "addressable", "base_schema", "unaddressable_reason"]

_FORMATS = ("parquet", "feather")


@dataclass(frozen=True)
class Addressed:
    """A frame's plan seen as positions over one scan.

    Attributes:
        scan: The scan node.
        columns: ``(file column, output name)`` pairs in output order; ``None`` for all.
        offset: Scan position of the frame's row 0 (from limits).
        length: Rows the limits keep; ``None`` for all after ``offset``.
        steps: Projections and new columns that compute values (``col("x") * 2``, an op
            chain), bottom-up: run by DataFusion on each batch read. They map rows one
            to one, so positions (and limits anywhere in the chain) are unchanged.
    """

    scan: Scan
    columns: tuple[tuple[str, str], ...] | None
    offset: int
    length: int | None
    steps: tuple[Select | WithColumns, ...] = ()
    #: per step, the scan position of its input's row 0 (the limits below it): a seeded
    #: chain numbers the rows of its step's input
    step_offsets: tuple[int, ...] = ()


def addressable(node: Node) -> Addressed | Node:
    """The plan as positions over a scan, or the first node that prevents it."""
    chain: list[Select | WithColumns | Limit] = []
    while isinstance(node, Select | WithColumns | Limit):
        chain.append(node)
        node = node.input
    if not isinstance(node, Scan) or node.format not in _FORMATS:
        return node
    from dataio.engine.remote import is_remote

    if any(is_remote(path) for path in node.files):
        return node
    columns: tuple[tuple[str, str], ...] | None = None
    offset, length = 0, None
    steps: list[Select | WithColumns] = []
    step_offsets: list[int] = []
    for step in reversed(chain):  # bottom-up
        if isinstance(step, Limit):
            offset, length = _compose(offset, length, step)
        elif steps or isinstance(step, WithColumns) or (plain := _plain(step)) is None:
            steps.append(step)  # computes values: from here on DataFusion runs the steps
            step_offsets.append(offset)
        else:
            picked = []
            for source, name in plain:
                if columns is not None:  # over an earlier projection: map its outputs back
                    source = {out: src for src, out in columns}.get(source, source)
                picked.append((source, name))
            columns = tuple(picked)
    if steps and isinstance(steps[0], Select):
        columns = _referenced(steps[0], columns or tuple((n, n) for n in node.schema.names))
    return Addressed(node, columns, offset, length, tuple(steps), tuple(step_offsets))


def _referenced(step: Select, columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The columns a computing projection reads: the only ones worth decoding."""
    names = {e.args[0] for expr in step.exprs for e in expr.walk() if e.op == "col"}
    kept = tuple((src, out) for src, out in columns if out in names)
    return kept or columns[:1]  # a projection of literals still needs the row count


def _plain(step: Select) -> list[tuple[str, str]] | None:
    """``(input column, output name)`` for a projection of columns (renamed or not)."""
    out = []
    for expr in step.exprs:
        inner, name = (expr.args[0], expr.args[1]) if expr.op == "alias" else (expr, None)
        if inner.op != "col":
            return None
        out.append((inner.args[0], name or inner.args[0]))
    return out


def _compose(offset: int, length: int | None, step: Limit) -> tuple[int, int | None]:
    start = offset + step.offset
    available = None if length is None else max(0, length - step.offset)
    if step.n is None:
        return start, available
    return start, step.n if available is None else min(step.n, available)


def unaddressable_reason(frame: LazyFrame) -> str:
    """Why ``frame`` cannot be read by position (for error messages)."""
    found = addressable(frame.plan)
    if isinstance(found, Addressed):
        return "it can"
    if isinstance(found, Scan):
        if found.format not in _FORMATS:
            return f"it scans {found.format} files, which have no row index"
        return "it reads remote files (object stores stream; they are not read by position)"
    if not found.children():
        return f"it reads {found.label()}, whose rows have no index"
    return f"its plan has {found.label()}, which decides which rows exist or their order"


def base_schema(addressed: Addressed) -> pa.Schema:
    """The schema of the columns read from the files, before computed steps."""
    import pyarrow as pa

    schema = addressed.scan.schema
    if addressed.columns is None:
        return schema
    return pa.schema([schema.field(src).with_name(out) for src, out in addressed.columns])
