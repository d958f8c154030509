"""Computed columns of a positional frame: its steps run by DataFusion on the rows read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dataio.engine.frame_blocks import empty_batch, one_batch
from dataio.plan.frame import Memory, Node

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.engine.frame_address import Addressed

__all__ = ["computed"]


def computed(
    addressed: Addressed,
    schema: pa.Schema,
    batch: pa.RecordBatch,
    positions: Sequence[int],
    *,
    frame: bool = False,
) -> pa.RecordBatch:
    """``batch`` after the frame's computed steps (DataFusion, one small plan).

    ``positions`` are the rows' scan positions (frame positions when ``frame``): a
    step with seeded chains gets its input's position of each row (see
    :func:`dataio.engine.compile.positioned`), not the row's place in this batch.
    """
    import dataclasses

    import pyarrow as pa

    from dataio.engine.compile import positioned

    if not addressed.steps:
        return batch
    if not batch.num_rows:
        return empty_batch(schema)
    from dataio.engine.run import collect_table

    node: Node = Memory(pa.Table.from_batches([batch]), "rows read by position")
    if not any(positioned(step) for step in addressed.steps):
        for step in addressed.steps:
            node = dataclasses.replace(step, input=node)
        return one_batch(collect_table(node), schema)
    import numpy as np

    from dataio.engine.expressions import POSITION

    scan = np.asarray(positions, np.int64) + (addressed.offset if frame else 0)
    table = pa.Table.from_batches([batch])
    offsets = addressed.step_offsets
    for step, below in zip(addressed.steps, offsets, strict=True):
        if positioned(step):  # one step at a time: each numbers its own input
            table = table.append_column(POSITION, pa.array(scan - below))
        node = dataclasses.replace(step, input=Memory(table, "rows read by position"))
        table = collect_table(node)
    return one_batch(table, schema)
