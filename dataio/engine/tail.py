"""The steps dataio runs on DataFusion's batches: Python filters and limits on top."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataio.exceptions import DataioError
from dataio.plan.frame import Limit, Node, PyFilter

__all__ = ["limit_batches", "python_filter", "split_tail"]


def split_tail(node: Node) -> tuple[Node, list[Node]]:
    """Split Python filters and limits off the top: (core, steps applied after it)."""
    steps: list[Node] = []
    while isinstance(node, PyFilter | Limit):
        steps.append(node)
        node = node.input
    return node, steps[::-1]


def python_filter(batches: Iterator[Any], step: PyFilter) -> Iterator[Any]:
    """The rows of ``batches`` that ``step``'s callable keeps (it sees row dicts)."""
    import pyarrow as pa

    for batch in batches:
        rows = batch.to_pylist()
        try:
            mask = [bool(step.fn(row)) for row in rows]
        except DataioError:
            raise
        except Exception as exc:
            raise DataioError(f"{step.label()} raised {type(exc).__name__}: {exc}") from exc
        kept = batch.filter(pa.array(mask, pa.bool_()))
        if kept.num_rows:
            yield kept


def limit_batches(batches: Iterator[Any], step: Limit) -> Iterator[Any]:
    """``batches`` sliced to ``step``'s offset and row count."""
    skip, left = step.offset, step.n
    if left == 0:
        return
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch = batch.slice(skip)
        skip = 0
        if left is not None:
            batch = batch.slice(0, left)
            left -= batch.num_rows
        if batch.num_rows:
            yield batch
        if left == 0:
            return
