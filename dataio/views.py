"""HTML views for notebooks: ``Batch._repr_html_`` and ``LazyFrame._repr_html_``.

A view shows what an object already holds. A frame's preview runs only plans that read a
few rows from the start of local files or memory (scans, plain column selections,
limits); any other plan (filters, joins, sorts, computed columns, remote files) is not
run for a repr.
"""

from __future__ import annotations

import base64
import io
from html import escape
from typing import TYPE_CHECKING, Any

from dataio.exceptions import DataioError
from dataio.plan.frame import Limit, Memory, Node, Scan, Select, walk

if TYPE_CHECKING:
    from dataio.batch import Batch
    from dataio.frame import LazyFrame

__all__ = ["batch_html", "cheap_preview", "frame_html"]

PREVIEW_ROWS = 5
THUMBNAILS = 8
CELL = 40  # characters shown of one value
PREVIEW_FORMATS = ("parquet", "feather", "csv", "json")


def batch_html(batch: Batch) -> str:
    """A batch as HTML: rows, errors, slots (type, shape, first values), row keys and
    thumbnails of image slots."""
    errors = f", {len(batch.errors)} dropped row(s)" if batch.errors else ""
    mixed = f", rows mixed by {escape(batch.mixed_by)}" if batch.mixed_by else ""
    rows = "".join(_slot_row(name, batch._columns[name]) for name in batch.slots)
    parts = [
        f"<div><b>Batch</b>: {len(batch)} rows{errors}{mixed}",
        "<table><tr><th>slot</th><th>type</th><th>shape</th><th>first values</th></tr>",
        rows,
        "</table>",
    ]
    keys = _keys(batch)
    if keys:
        parts.append(f"<div>row keys: {escape(keys)}</div>")
    for error in batch.errors[:3]:
        parts.append(f"<div>dropped: {escape(_cut(str(error), 200))}</div>")
    for name in _image_slots(batch):
        png = _thumbnails(batch, name)
        if png:
            parts.append(f'<div>{escape(name)}:<br><img src="data:image/png;base64,{png}"></div>')
    parts.append("</div>")
    return "".join(parts)


def _slot_row(name: str, column: Any) -> str:
    shape = getattr(column, "shape", None)
    if shape is not None:
        kind = str(getattr(column, "dtype", "")).replace("torch.", "")
        shown = list(shape)
        first = _first_values(column) if len(shape) == 1 else ""
    elif isinstance(column, list):
        kind, shown = "list", [len(column)]
        first = ", ".join(_cut(repr(v)) for v in column[:PREVIEW_ROWS])
    else:  # an Arrow array
        kind, shown = f"arrow {getattr(column, 'type', '?')}", [len(column)]
        first = ", ".join(_cut(repr(v)) for v in column[:PREVIEW_ROWS].to_pylist())
    cells = (name, kind, str(shown), first)
    return "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def _first_values(column: Any) -> str:
    values = column[:PREVIEW_ROWS]
    values = values.tolist()
    return ", ".join(_cut(repr(v)) for v in values)


def _keys(batch: Batch) -> str:
    try:
        keys = batch.row_keys
    except DataioError:  # mixed rows have no single key
        return ""
    if not any(k is not None for k in keys):
        return ""
    shown = ", ".join(_cut(str(k)) for k in keys[:THUMBNAILS])
    return shown + (", ..." if len(keys) > THUMBNAILS else "")


def _image_slots(batch: Batch) -> list[str]:
    names = [n for n in batch.slots if n in batch.pixels]
    for name in batch.slots:  # stacked images of a batch without a recorded encoding
        shape = getattr(batch._columns[name], "shape", None)
        if name in names or shape is None or len(shape) != 4:
            continue
        if shape[1] in (1, 3, 4) or shape[3] in (1, 3, 4):
            names.append(name)
    return names


def _thumbnails(batch: Batch, name: str) -> str:
    from dataio.pictures import show

    try:
        grid = show(batch, name, size=64, limit=THUMBNAILS, columns=THUMBNAILS)
    except (DataioError, ImportError):
        return ""
    out = io.BytesIO()
    grid.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def cheap_preview(node: Node) -> bool:
    """True when the plan reads only the first rows of local files or memory: scans,
    plain column selections and limits."""
    for step in walk(node):
        if isinstance(step, Memory | Limit):
            continue
        if isinstance(step, Select):
            if all(e.op == "col" for e in step.exprs):
                continue
            return False
        if not (isinstance(step, Scan) and _cheap_scan(step)):
            return False
    return True


def _cheap_scan(scan: Scan) -> bool:
    return scan.format in PREVIEW_FORMATS and all(_local(f) for f in scan.files)


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def frame_html(frame: LazyFrame) -> str:
    """A frame as HTML: its schema, its first rows when that is cheap, and its plan."""
    fields = "".join(
        f"<tr><td>{escape(f.name)}</td><td>{escape(str(f.type))}</td></tr>" for f in frame.schema
    )
    parts = [
        "<div><b>LazyFrame</b>",
        f"<table><tr><th>column</th><th>type</th></tr>{fields}</table>",
        _preview(frame),
        f"<pre>{escape(chr(10).join(frame._plan_lines()))}</pre></div>",
    ]
    return "".join(parts)


def _preview(frame: LazyFrame) -> str:
    if not cheap_preview(frame.plan):
        return (
            "<div>(not executed: a preview would run the plan; "
            "<code>frame.head().collect()</code> shows rows)</div>"
        )
    try:
        table = _head(frame)
    except DataioError as exc:
        return f"<div>(no preview: {escape(_cut(str(exc), 200))})</div>"
    head = "".join(f"<th>{escape(name)}</th>" for name in table.column_names)
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(_cut(repr(v)))}</td>" for v in row.values()) + "</tr>"
        for row in table.to_pylist()
    )
    return f"<div>first {table.num_rows} rows:</div><table><tr>{head}</tr>{rows}</table>"


def _head(frame: LazyFrame) -> Any:
    """The first rows, streamed file after file and stopped once they are there (a
    collect would open every file of a large scan)."""
    import pyarrow as pa

    batches = frame.head(PREVIEW_ROWS).iterate_batches()
    got, rows = [], 0
    try:
        for batch in batches:
            got.append(batch)
            rows += batch.num_rows
            if rows >= PREVIEW_ROWS:
                break
    finally:
        batches.close()  # type: ignore[attr-defined]
    return pa.Table.from_batches(got, schema=frame.schema).slice(0, PREVIEW_ROWS)


def _cut(text: str, width: int = CELL) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
