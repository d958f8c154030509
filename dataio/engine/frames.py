"""The frame engine's API: what :mod:`dataio.frame` calls, through :mod:`dataio.plan.runtime`.

``dataio.frame`` builds plans and never imports the engine; every terminal and every
schema check reaches it here, so the engine's modules can change behind one surface.
"""

from __future__ import annotations

from dataio.engine.device_normalize import DeviceNormalize, apply_on_device, split_normalize
from dataio.engine.explain import explain
from dataio.engine.frame_address import unaddressable_reason
from dataio.engine.frame_rows import frame_rows
from dataio.engine.frame_units import frame_units, unit_batches
from dataio.engine.plain import plain_table
from dataio.engine.records import iter_records
from dataio.engine.run import collect_table, stream_batches
from dataio.engine.scan import row_count, scan_options, scan_schema
from dataio.engine.schema import plan_schema

__all__ = [
    "DeviceNormalize",
    "apply_on_device",
    "collect_table",
    "explain",
    "frame_rows",
    "frame_units",
    "iter_records",
    "plain_table",
    "plan_schema",
    "row_count",
    "scan_options",
    "scan_schema",
    "split_normalize",
    "stream_batches",
    "unit_batches",
    "unaddressable_reason",
]
