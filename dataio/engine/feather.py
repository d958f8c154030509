"""The Feather fast path: Arrow IPC scans read by pyarrow from a memory map, or, for
remote files, by ranges (only the record batches a slice needs, only the columns
selected; :func:`dataio.formats._arrow.read_remote_ipc`)."""

from __future__ import annotations

from typing import Any

from dataio.engine.errors import guard
from dataio.engine.remote import is_remote
from dataio.plan.frame import Limit, Node, Scan, Select

__all__ = ["feather_table"]


def feather_table(node: Node) -> Any:
    """Scans of Arrow IPC files with plain projections and slices, read by pyarrow from a
    memory map (remote files: by ranges): Arrow types and buffers come out as stored.
    ``None`` for other plans."""
    import pyarrow as pa

    from dataio.formats._arrow import check_ipc_file, read_errors, read_remote_ipc

    columns: list[str] | None = None
    renames: dict[str, str] = {}
    offset, length = 0, None
    steps: list[Node] = []
    while isinstance(node, Select | Limit):
        steps.append(node)
        node = node.input
    if not isinstance(node, Scan) or node.format != "feather":
        return None
    for step in reversed(steps):  # bottom-up
        if isinstance(step, Limit):
            offset, length = _compose_slice(offset, length, step)
            continue
        assert isinstance(step, Select)
        names: list[str] = []
        for expr in step.exprs:
            inner = expr.args[0] if expr.op == "alias" else expr
            if inner.op != "col":
                return None
            names.append(inner.args[0])
            if expr.op == "alias":
                renames[inner.args[0]] = expr.args[1]
        if renames:
            return None
        columns = names
    tables = []
    wanted = None if length is None else offset + length  # rows, from the first file on
    for path in node.files:
        if is_remote(path):
            with guard(node.label(), path):
                table = read_remote_ipc(path, node.label(), columns=columns, rows=wanted)
            tables.append(table)
            wanted = None if wanted is None else max(0, wanted - table.num_rows)
            continue
        with guard(node.label(), path), read_errors(path, node.label()):
            # damaged offsets would crash whatever reads the table next; checked
            # once per path, size and mtime, so re-reading a file stays zero-copy
            check_ipc_file(path, node.label())
            with pa.memory_map(path) as source:
                table = pa.ipc.open_file(source).read_all()
        if columns is not None:
            table = table.select(columns)
        tables.append(table)
    if len({t.schema for t in tables}) > 1:
        return None
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return table.slice(offset, length)


def _compose_slice(offset: int, length: int | None, step: Limit) -> tuple[int, int | None]:
    start = offset + step.offset
    available = None if length is None else max(0, length - step.offset)
    if step.n is None:
        return start, available
    return start, step.n if available is None else min(step.n, available)
