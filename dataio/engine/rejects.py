"""The rejects table: every row a pass skipped or failed on, and why.

Rows are recorded only on the error path (nothing is done for rows that succeed). The
table keeps the newest ``limits.max_rejects`` entries and counts the ones it dropped;
per-pass tallies are exact whatever the cap, and each pass ends with one summary line
on the ``dataio.rows`` logger.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dataio import limits
from dataio.exceptions import DataioError, FieldError, ShapeMismatchError

if TYPE_CHECKING:
    from dataio.engine.executor import BatchJob

__all__ = ["REJECT_COLUMNS", "RejectLog"]

row_logger = logging.getLogger("dataio.rows")

#: the table's columns, in order
REJECT_COLUMNS = (
    "epoch",
    "batch",
    "position",
    "key",
    "slot",
    "stage",
    "op",
    "error_type",
    "message",
    "source",
    "outcome",
)

#: one row of the table, in :data:`REJECT_COLUMNS` order
Entry = tuple[Any, ...]


class RejectLog:
    """A loader's rejected rows, over all its passes (the newest ``max_rejects``)."""

    def __init__(self, ops: Mapping[str, str]) -> None:
        #: slot name -> the op its kernel starts with (``decode_image``)
        self.ops = dict(ops)
        self.entries: deque[Entry] = deque()
        self.dropped = 0
        #: the running pass: its epoch, the number of the batch being assembled, and
        #: exact counts for its summary line (the loader counts each batch it assembles)
        self.epoch = self.batch = self.rows = self.batches = 0
        self.types: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self._open = False

    # -- a pass ---------------------------------------------------------------------

    def begin(self, epoch: int) -> None:
        """Start counting a pass of ``epoch``."""
        self.epoch, self.batch, self.rows, self.batches = epoch, 0, 0, 0
        self.types, self.outcomes = Counter(), Counter()
        self._open = True

    def end(self, *, finished: bool) -> None:
        """Log the pass's summary line; once per pass (a pass that saw no batch: none)."""
        if not self._open:
            return
        self._open = False
        if self.batches == 0:
            return
        rejected = sum(self.types.values())
        plural = "es" if self.batches != 1 else ""
        how = "" if finished else f" (abandoned after {self.batches} batch{plural})"
        if not rejected:
            row_logger.info("epoch %d%s: no rows rejected of %d", self.epoch, how, self.rows)
            return
        outcomes = ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes.items()))
        types = ", ".join(f"{name} x{n}" for name, n in self.types.most_common())
        dropped = ""
        if self.dropped:
            dropped = (
                f"; {self.dropped} older entries dropped from the table "
                f"(limits.max_rejects={limits.get().max_rejects})"
            )
        # rows skipped are data silently lost: a warning; failed ones raised already
        level = logging.WARNING if self.outcomes["skipped"] else logging.INFO
        row_logger.log(
            level,
            "epoch %d%s: %d of %d rows rejected (%s): %s%s; see loader.rejects()",
            self.epoch, how, rejected, self.rows, outcomes, types, dropped,
        )  # fmt: skip

    # -- rows -----------------------------------------------------------------------

    def record(
        self,
        job: BatchJob,
        failures: Sequence[tuple[int, BaseException]],
        *,
        failed: bool,
        stage: str | None = None,
    ) -> None:
        """Record ``(row, error)`` failures of ``job``; ``failed``: the batch raised
        (otherwise its bad rows were skipped). ``stage`` overrides the stage found from
        the error (record maps)."""
        outcome = "failed" if failed else "skipped"
        limit = limits.get().max_rejects
        for row, error in failures:
            entry = self._entry(job, row, error, self.epoch, self.batch, outcome, stage)
            self.entries.append(entry)
            self.types[entry[7]] += 1
            self.outcomes[outcome] += 1
        while len(self.entries) > limit:
            self.entries.popleft()
            self.dropped += 1

    def _entry(
        self,
        job: BatchJob,
        row: int,
        error: BaseException,
        epoch: int,
        batch: int,
        outcome: str,
        stage: str | None,
    ) -> Entry:
        row_error = error if isinstance(error, DataioError) else None
        slot = None if row_error is None else row_error.slot
        if stage is None:
            stage = _stage(job, row, error)
        op = self.ops.get(slot) if slot is not None and stage == "decode" else None
        key = row_error.key if row_error is not None else None
        if key is None:
            key = _record_key(job, row)
        position = job.positions[row]
        return (
            epoch, batch, int(position), None if key is None else str(key), slot, stage, op,
            type(error).__name__, _message(error), _source(job, row, slot), outcome,
        )  # fmt: skip

    def table(self) -> Any:
        """The entries as a ``pyarrow.Table`` (schema metadata: ``dropped``)."""
        import pyarrow as pa

        columns = list(zip(*self.entries, strict=True)) if self.entries else [()] * 11
        arrays = [
            pa.array(list(values), type=kind)
            for values, kind in zip(columns, _types(), strict=True)
        ]
        schema = pa.schema(list(zip(REJECT_COLUMNS, _types(), strict=True)))
        schema = schema.with_metadata({"dropped": str(self.dropped)})
        return pa.Table.from_arrays(arrays, schema=schema)


def _types() -> list[Any]:
    import pyarrow as pa

    ints, text = pa.int64(), pa.string()
    return [ints, ints, ints, text, text, text, text, text, text, text, text]


def _stage(job: BatchJob, row: int, error: BaseException) -> str:
    marked = job.stages.get(row) if job.stages else None
    if marked is not None:
        return marked
    if isinstance(error, ShapeMismatchError):
        return "assemble"
    if isinstance(error, FieldError):
        return "field"
    return "decode"


def _message(error: BaseException) -> str:
    """The error's own message, without the record prefix ``DataioError`` adds."""
    message = str(error)
    if isinstance(error, DataioError):
        where = error.where()
        if where and message.startswith(f"{where}: "):
            message = message[len(where) + 2 :]
    return message or type(error).__name__


def _record(job: BatchJob, row: int) -> Any:
    records = job.records
    if records is None:
        return None
    record = records[row]
    return record if isinstance(record, Mapping) else None


def _record_key(job: BatchJob, row: int) -> Any:
    record = _record(job, row)
    if record is not None:
        return record.get("key", record.get("__key__"))
    try:
        return job.key_at(row)
    except Exception:  # a key that cannot be read is no reason to lose the entry
        return None


def _source(job: BatchJob, row: int, slot: str | None) -> str | None:
    """The URI the row's value came from: the slot's field when it holds a path or
    URI, else the record's ``__url__`` (WebDataset shards)."""
    value: Any = None
    record = _record(job, row)
    kernel = next((k for k in job.kernels if k.name == slot), None)
    try:
        if record is not None:
            if kernel is not None:
                value = record.get(kernel.field)
            if not isinstance(value, str | os.PathLike):
                value = record.get("__url__")
        elif kernel is not None and slot in job.readers:
            value = job.readers[slot](row)
    except Exception:  # the value that failed may fail again: the entry stays
        return None
    if isinstance(value, str | os.PathLike):
        return os.fspath(value) if isinstance(value, str) else str(os.fspath(value))
    return None
