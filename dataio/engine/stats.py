"""Where a loader's time goes: per-stage timings of each pass and the bottleneck line.

Timings are sums of ``time.perf_counter_ns`` differences. Worker threads add theirs
to a clock of their own: the task's time once per pool task, a read's time around each
read of a path, and a kernel's time around each call only when a plan has several
media slots; the consumer thread adds its own once per batch. No other Python work is
done per row.

Stages, and the thread they run on:

* ``source`` (consumer): producing the pass's chunks: enumerating records, reading
  record batches, slicing them into batches;
* ``read`` (workers): fetching a field's bytes when it holds a path or URI;
* ``decode`` (workers): a slot's kernel: its decoder and the per-sample transforms
  fused into it, one row per slot, named by the decoder op (``decode_image``);
* ``transform``: record maps (workers) and batch transforms and batch maps (consumer);
* ``assemble`` (consumer): building the batch: the failure policy, stacking, and
  gathering passthrough columns of plans that have no media slot;
* ``export`` (consumer): NumPy to torch tensors or Arrow record batches;
* ``consumer wait`` (consumer): ``next()`` blocked until a batch was ready;
* ``consumer`` (consumer): the caller's own code between two batches (a training step).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from threading import get_ident
from time import perf_counter_ns
from typing import Any

__all__ = [
    "MAPS",
    "PASSES_KEPT",
    "READ",
    "SLOTS",
    "TASKS",
    "PassStats",
    "StatsLog",
    "bottleneck_line",
]

#: passes whose timings a loader keeps (the oldest are dropped first)
PASSES_KEPT = 1024

#: consumer-side stages, in table order, and the PassStats field holding each
_CONSUMER: tuple[tuple[str, str | None, str], ...] = (
    ("source", None, "source_ns"),
    ("transform", "batch transforms", "batch_ops_ns"),
    ("assemble", None, "assemble_ns"),
    ("export", None, "export_ns"),
    ("consumer wait", None, "wait_ns"),
    ("consumer", None, "consumer_ns"),
)


#: a worker thread's clock: read, record maps, task time, then each media slot's kernel
READ, MAPS, TASKS, SLOTS = 0, 1, 2, 3


class PassStats:
    """The clocks of one pass.

    Each worker thread adds to its own clock (:meth:`clock`), so workers take no lock
    and build nothing per task; the consumer thread adds to its own fields directly.
    With one media slot, its kernel's time is the task time not spent reading or in
    record maps (no clock read per row when its values are in memory).
    """

    __slots__ = (
        "assemble_ns",
        "batch_ops_ns",
        "batches",
        "clocks",
        "consumer_ns",
        "ended_ns",
        "epoch",
        "export_ns",
        "last_return_ns",
        "number",
        "ops",
        "rows",
        "slots",
        "source_ns",
        "started_ns",
        "wait_ns",
        "workers",
    )

    def __init__(
        self, number: int, epoch: int, slots: Sequence[str], ops: Sequence[str], workers: int
    ) -> None:
        self.number, self.epoch = number, epoch
        #: the media slots (those with a kernel), and each one's decoder op
        self.slots, self.ops = tuple(slots), tuple(ops)
        self.workers = workers
        self.started_ns = perf_counter_ns()
        self.ended_ns: int | None = None
        self.last_return_ns: int | None = None  # when next() last returned a batch
        self.source_ns = self.batch_ops_ns = self.assemble_ns = self.export_ns = 0
        self.wait_ns = self.consumer_ns = 0
        self.batches = self.rows = 0
        #: thread id -> that worker thread's clock (see :data:`READ` ...)
        self.clocks: dict[int, list[int]] = {}

    def clock(self) -> list[int]:
        """The calling worker thread's clock, in ns: ``[read, record maps, task time,
        kernel time of each media slot...]`` (only that thread writes it)."""
        ident = get_ident()
        clock = self.clocks.get(ident)
        if clock is None:  # one per thread: a dict item set is atomic
            clock = self.clocks[ident] = [0] * (SLOTS + len(self.slots))
        return clock

    def _total(self, index: int) -> int:
        return sum(clock[index] for clock in list(self.clocks.values()))

    @property
    def read_ns(self) -> int:
        """Workers' time reading field bytes from paths."""
        return self._total(READ)

    @property
    def map_ns(self) -> int:
        """Workers' time in record maps."""
        return self._total(MAPS)

    @property
    def worker_ns(self) -> int:
        """Workers' time in this pass's tasks."""
        return self._total(TASKS)

    @property
    def decode_ns(self) -> list[int]:
        """Workers' time in each media slot's kernel."""
        if len(self.slots) == 1:
            return [max(self.worker_ns - self.read_ns - self.map_ns, 0)]
        return [self._total(SLOTS + i) for i in range(len(self.slots))]

    def end(self) -> None:
        """Stop the pass's wall clock (a finished or abandoned pass)."""
        if self.ended_ns is None:
            self.ended_ns = perf_counter_ns()

    @property
    def wall_ns(self) -> int:
        """The pass's wall time so far (until it ended)."""
        end = self.ended_ns if self.ended_ns is not None else perf_counter_ns()
        return max(end - self.started_ns, 0)

    def rows_of(self) -> list[tuple[str, str | None, str | None, str, int]]:
        """``(stage, slot, op, thread, ns)`` for every stage of this pass."""
        rows: list[tuple[str, str | None, str | None, str, int]] = [
            ("source", None, None, "consumer", self.source_ns),
            ("read", None, None, "workers", self.read_ns),
        ]
        for slot, op, ns in zip(self.slots, self.ops, self.decode_ns, strict=True):
            rows.append(("decode", slot, op, "workers", ns))
        if not self.slots:
            rows.append(("decode", None, None, "workers", 0))
        rows.append(("transform", None, "record maps", "workers", self.map_ns))
        for stage, what, name in _CONSUMER[1:]:
            rows.append((stage, None, what, "consumer", getattr(self, name)))
        return rows


class StatsLog:
    """The timings of a loader's last :data:`PASSES_KEPT` passes."""

    def __init__(self) -> None:
        self.passes: deque[PassStats] = deque(maxlen=PASSES_KEPT)
        self.count = 0

    def begin(
        self, epoch: int, slots: Sequence[str], ops: Sequence[str], workers: int
    ) -> PassStats:
        """Start timing a new pass."""
        stats = PassStats(self.count, epoch, slots, ops, workers)
        self.count += 1
        self.passes.append(stats)
        return stats

    def forget(self, stats: PassStats) -> None:
        """Drop a pass that delivered nothing (an ``iter()`` probe)."""
        if self.passes and self.passes[-1] is stats:
            self.passes.pop()
            self.count -= 1  # its number goes to the next pass

    def table(self) -> Any:
        """One row per pass and stage (see :meth:`dataio.loader.Loader.stats`)."""
        import pyarrow as pa

        schema = _schema()
        columns: dict[str, list[Any]] = {name: [] for name in schema.names}
        for stats in self.passes:
            wall = stats.wall_ns
            for stage, slot, op, thread, ns in stats.rows_of():
                whole = stats.worker_ns if thread == "workers" else wall
                values = (
                    stats.number, stats.epoch, stage, slot, op, thread, ns / 1e9,
                    ns / whole if whole else 0.0, wall / 1e9, stats.worker_ns / 1e9,
                    stats.workers, stats.batches, stats.rows,
                )  # fmt: skip
                for name, value in zip(schema.names, values, strict=True):
                    columns[name].append(value)
        summary = bottleneck_line(self.passes[-1]) if self.passes else "no pass ran yet"
        return pa.table(columns, schema=schema.with_metadata({"summary": summary}))


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("pass", pa.int64()),
            ("epoch", pa.int64()),
            ("stage", pa.string()),
            ("slot", pa.string()),
            ("op", pa.string()),
            ("thread", pa.string()),
            ("seconds", pa.float64()),
            ("share", pa.float64()),
            ("wall_seconds", pa.float64()),
            ("worker_seconds", pa.float64()),
            ("workers", pa.int64()),
            ("batches", pa.int64()),
            ("rows", pa.int64()),
        ]
    )


#: the consumer waited less than this share of the pass: the loader kept up
_KEPT_UP = 0.1
#: workers busy at least this share of their capacity: the pass was bound by them
_BUSY = 0.5
#: a consumer-thread stage taking this share of the pass binds it
_THREAD_STAGE = 0.25


def _seconds(ns: int) -> str:
    return f"{ns / 1e6:.0f} ms" if ns < 1e9 else f"{ns / 1e9:.1f} s"


def bottleneck_line(stats: PassStats) -> str:
    """One line naming what bound the pass, e.g. ``"decode-bound: 81% of worker time in
    decode_image (workers busy 97%); the consumer waited 0.2 s of 3.4 s"``.

    * The consumer waited less than a tenth of the pass and its own code took longer
      than any loader stage on its thread: ``consumer-bound``.
    * The workers were busy at least half of their capacity: the largest worker stage,
      as a share of worker time.
    * A loader stage on the consumer thread took at least a quarter of the pass: that
      stage (``source``, ``assemble``, ``export``, ``transform``).
    * Otherwise the time went to no stage (workers idle, the consumer waiting: task
      handoffs between threads): ``scheduling-bound``.
    """
    wall = stats.wall_ns
    if stats.batches == 0 or wall == 0:
        return f"epoch {stats.epoch}: no batch delivered yet"
    waited = f"the consumer waited {_seconds(stats.wait_ns)} of {_seconds(wall)}"
    loader_side = [
        (stage, getattr(stats, name))
        for stage, _, name in _CONSUMER
        if stage not in ("consumer", "consumer wait")
    ]
    stage, ns = max(loader_side, key=lambda item: item[1])
    if stats.wait_ns < _KEPT_UP * wall and stats.consumer_ns >= ns:
        return (
            f"consumer-bound: {stats.consumer_ns / wall:.0%} of the pass in the consumer's "
            f"own code between batches; the loader kept up ({waited})"
        )
    capacity = stats.workers * wall
    busy = stats.worker_ns / capacity if capacity else 0.0
    if busy >= _BUSY:
        return f"{_worker_bound(stats, busy)}; {waited}"
    if ns >= _THREAD_STAGE * wall:
        return (
            f"{stage}-bound: {ns / wall:.0%} of the pass in {stage} on the consumer thread "
            f"(workers busy {busy:.0%}); {waited}"
        )
    return (
        f"scheduling-bound: workers busy {busy:.0%} and no stage on the consumer thread "
        f"above {ns / wall:.0%} of the pass: the time went to handing tasks between "
        f"threads (fewer, larger tasks help); {waited}"
    )


def _worker_bound(stats: PassStats, busy: float) -> str:
    named = [("read", "reading field bytes", stats.read_ns)]
    named += [
        ("decode", f"{op} (slot {slot!r})" if len(stats.slots) > 1 else op, ns)
        for slot, op, ns in zip(stats.slots, stats.ops, stats.decode_ns, strict=True)
    ]
    named.append(("transform", "record maps", stats.map_ns))
    stage, what, ns = max(named, key=lambda item: item[2])
    share = ns / stats.worker_ns if stats.worker_ns else 0.0
    return f"{stage}-bound: {share:.0%} of worker time in {what} (workers busy {busy:.0%})"
