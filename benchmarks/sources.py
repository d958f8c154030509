"""Record sources side by side: dataio vs a plain loop, torch's DataLoader and webdataset.

Two parts, each a table of median items/s over interleaved rounds (contenders alternate
round by round, so load that comes and goes slows all of them alike). Run from the
repository root::

    .venv/bin/python benchmarks/sources.py [--records N] [--rounds R] [--quick]
        [--shard-samples N] [--records-only]

Part 1, small in-memory records ``{"key": f"{i:08d}", "label": i % 1000, "text":
f"sample {i}"}`` delivered as batches of 256 (the int labels and the string keys), no
decoding: the cost is the source and the engine, nothing else.

* ``plain loop``: slices of the record list, two list comprehensions per batch;
* ``DataLoader``: ``torch.utils.data.DataLoader(dataset, batch_size=256, collate_fn=...)``
  over a map-style Dataset (``__getitem__``), with 0 and 2 worker processes (default,
  non-persistent workers: worker start-up is part of every pass), over a Dataset with
  ``__getitems__`` and shuffled;
* ``dataio``: ``pipeline(slot("label").passthrough(), slot("key").passthrough(),
  batch(256)).run("numpy")`` over a list, an indexed Dataset with ``__getitems__``
  (``records(ds, indexed=True)``), that source shuffled, rank 0 of 4, and a
  single-pass ``from_iterable`` stream (whole and rank 0 of 4); and over the same
  records as Arrow: ``records(pa.table(...))`` (int64 label, string key and text) and
  ``scan_parquet(path)`` of them written by pyarrow in row groups of 64K rows. A
  contender this dataio refuses is reported as ``unsupported: <error>`` and left out.

Targets (issue #14), judged against ``DataLoader nw=0`` over the list of dicts: Arrow and
frame sources >= 10x, the list of dicts >= 1.5x. Shuffled passes (the list, the Arrow
table and the frame, each ``.shuffle(seed=0)``) against ``DataLoader nw=0 shuffle``: the
list >= 1.5x, the Arrow table >= 5x. Part 1 ends with the parquet frame's ceiling on
this machine and the CPU per pass of the Arrow sources' loaders (process and consumer
thread: steadier than rates on a shared machine). ``--records-only`` stops there.

Part 2, WebDataset tar shards of small ``.jpg``-like payloads and ``.cls`` labels, read
and batched by 256 without decoding: ``dataio.webdataset`` vs the ``webdataset`` package
(plain loop and ``.batched(256)``) and a stdlib ``tarfile`` loop.

Then a cProfile of one dataio pass of each part (the caller's thread and dataio's pool
threads merged; for part 1 also per batch), naming where dataio spends its time, and the
Arrow floors under the loader (slicing the table, reading the parquet's label and key
columns with pyarrow and through a projected frame). Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import gc
import io
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from _common import (
    BENCH_DATA,
    Contender,
    compact,
    format_table,
    interleave,
    load_average,
    machine_lines,
    median,
    mib,
    probe,
    profile_pass,
    target_line,
    usable_cores,
)

import dataio

BATCH = 256
SHARD = {"id": 0, "of": 4}
LOADER_WORKERS = 2
# WebDataset shards: count, samples per shard, payload sizes, seed.
SHARDS = 8
PER_SHARD = 2000
QUICK_PER_SHARD = 200
PAYLOAD = (4 * 1024, 16 * 1024)
CLASSES = 1000
SEED = 7
PROFILE_RECORDS = 200_000
PROFILE_TOP = 14
ROW_GROUP = 64 * 1024
FLOOR_PASSES = 3  # the floors report the fastest pass (a first pass opens files, plans)
CPU_PASSES = 7  # passes of each Arrow source timed in CPU seconds
# issue #14's targets, as multiples of DataLoader(num_workers=0) over the list of dicts
TARGET_ARROW = 10.0
TARGET_LIST = 1.5
# shuffled passes, as multiples of DataLoader(num_workers=0, shuffle=True) over the list
TARGET_SHUFFLED_LIST = 1.5
TARGET_SHUFFLED_ARROW = 5.0
SHUFFLED = "shuffle(seed=0)"
ARROW_TABLE = "dataio arrow table"
PARQUET_FRAME = "dataio parquet frame"
PACKAGES = ("numpy", "pyarrow", "datafusion", "torch", "psutil", "webdataset")
RSS_NOTE = (
    "peak RSS: sampled every 20 ms during a pass, max over rounds, including the records "
    "held in memory; DataLoader num_workers=2 sums its worker processes (shared pages count "
    "once per process). RSS growth: peak minus RSS at the pass start."
)

Batches = Iterator[tuple[list[Any], list[Any]]]


# -- part 1: in-memory records ----------------------------------------------------------


def make_records(count: int) -> list[dict[str, Any]]:
    """The benchmark's small records."""
    return [{"key": f"{i:08d}", "label": i % CLASSES, "text": f"sample {i}"} for i in range(count)]


def arrow_records(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """The same records as an Arrow table: string key, int64 label, string text."""
    return pa.table(
        {
            "key": pa.array([r["key"] for r in rows], pa.string()),
            "label": pa.array([r["label"] for r in rows], pa.int64()),
            "text": pa.array([r["text"] for r in rows], pa.string()),
        }
    )


def parquet_records(table: pa.Table) -> Path:
    """``table`` written by pyarrow in row groups of :data:`ROW_GROUP` rows, once."""
    path = BENCH_DATA / f"records-{table.num_rows}-rg{ROW_GROUP}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        pq.write_table(table, partial, row_group_size=ROW_GROUP)
        partial.replace(path)
    return path


def as_list(column: Any) -> list[Any]:
    """A batch column (list, NumPy array, tensor or Arrow array) as a Python list."""
    if hasattr(column, "to_pylist"):
        return list(column.to_pylist())
    if hasattr(column, "tolist"):
        return list(column.tolist())
    return list(column)


class RecordDataset(torch.utils.data.Dataset):
    """A map-style Dataset over the record list: ``__getitem__`` and ``__len__``."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]


class BulkRecordDataset(RecordDataset):
    """The same Dataset with ``__getitems__``: one call reads a whole batch."""

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        rows = self.rows
        return [rows[i] for i in indices]


def collate_lists(rows: Sequence[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """The DataLoader's collate_fn: the batch as (labels, keys) lists, like the others."""
    return [r["label"] for r in rows], [r["key"] for r in rows]


def plain_batches(rows: Sequence[dict[str, Any]]) -> Batches:
    """The hand-written reference: slice the list, build the two lists."""
    for start in range(0, len(rows), BATCH):
        yield collate_lists(rows[start : start + BATCH])


def passthrough_pipeline(*fields: str) -> dataio.Pipeline:
    """``pipeline(slot(f).passthrough() for each field, batch(256))``."""
    return dataio.pipeline(*(dataio.slot(f).passthrough() for f in fields), dataio.batch(BATCH))


def dataio_batches(
    source: Any, fields: Sequence[str], **options: Any
) -> Iterator[tuple[list[Any], ...]]:
    """One pass of the passthrough pipeline with numpy output; each batch as field lists."""
    with passthrough_pipeline(*fields).bind(source).run("numpy", **options) as loader:
        for batch in loader:
            yield tuple(batch[f] for f in fields)


def count_pass(batches: Iterator[tuple[list[Any], ...]]) -> tuple[int, str]:
    """Drain one pass; returns (items, output description)."""
    items, first = 0, None
    for batch in batches:
        items += len(batch[0])
        first = first or batch
    if first is None:
        return 0, "no batches"
    kinds = "/".join(f"{type(c).__name__}[{type(c[0]).__name__}]" for c in first)
    return items, f"{kinds} x {len(first[0])}"


def arrow_sources(table: pa.Table, path: Path) -> dict[str, Callable[[], Any]]:
    """The Arrow contenders' sources by name, each made afresh for a pass."""
    return {
        ARROW_TABLE: lambda: dataio.records(table),
        PARQUET_FRAME: lambda: dataio.scan_parquet(path),
    }


def first_batch(source: Any, fields: Sequence[str]) -> tuple[list[Any], ...]:
    """The first batch of a passthrough pass over ``source``, as lists (the pass closed)."""
    batches = dataio_batches(source, fields)
    try:
        return tuple(as_list(c) for c in next(batches))
    finally:
        batches.close()


def record_contenders(
    rows: list[dict[str, Any]], arrow: dict[str, Callable[[], Any]]
) -> list[Contender]:
    """Part 1's contenders, the plain loop first (the baseline); ``arrow``: the supported
    Arrow sources."""
    n = len(rows)
    plain_ds, bulk_ds = RecordDataset(rows), BulkRecordDataset(rows)
    indexed = dataio.records(bulk_ds, indexed=True)
    shuffled = indexed.shuffle(seed=0)
    fields = ("label", "key")
    world = SHARD["of"]
    mine = -(-n // world)  # pad=True (the default): every rank gets ceil(n / world)
    shuffler = torch.Generator().manual_seed(0)

    def loader(dataset: RecordDataset, **options: Any) -> Callable[[], tuple[int, str]]:
        data = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, collate_fn=collate_lists, **options
        )
        return lambda: count_pass(iter(data))

    def ours(source: Callable[[], Any], **options: Any) -> Callable[[], tuple[int, str]]:
        return lambda: count_pass(dataio_batches(source(), fields, **options))

    shard_name = f"shard {SHARD['id']}/{world}"
    return [
        Contender("plain loop", lambda: count_pass(plain_batches(rows)), n),
        Contender("DataLoader nw=0", loader(plain_ds), n),
        Contender("DataLoader nw=0 __getitems__", loader(bulk_ds), n),
        Contender("DataLoader nw=0 shuffle", loader(plain_ds, shuffle=True, generator=shuffler), n),
        Contender(
            f"DataLoader nw={LOADER_WORKERS}",
            loader(plain_ds, num_workers=LOADER_WORKERS),
            n,
            children=True,
        ),
        Contender("dataio list", ours(lambda: rows), n),
        Contender("dataio indexed __getitems__", ours(lambda: indexed), n),
        Contender("dataio indexed shuffle(seed=0)", ours(lambda: shuffled), n),
        Contender(f"dataio indexed {shard_name}", ours(lambda: indexed, shard=SHARD), mine),
        Contender("dataio from_iterable", ours(lambda: dataio.from_iterable(rows)), n),
        Contender(
            f"dataio from_iterable {shard_name}",
            ours(lambda: dataio.from_iterable(rows), shard=SHARD),
            mine,
        ),
        *(Contender(name, ours(make), n) for name, make in arrow.items()),
        Contender(f"dataio list {SHUFFLED}", ours(lambda: dataio.records(rows).shuffle(seed=0)), n),
        *(
            Contender(f"{name} {SHUFFLED}", ours(lambda make=make: make().shuffle(seed=0)), n)
            for name, make in arrow.items()
        ),
    ]


def verify_records(rows: list[dict[str, Any]]) -> str:
    """Check that the contenders deliver the same first batches."""
    head = rows[: 4 * BATCH]
    want = next(plain_batches(head))
    fields = ("label", "key")
    got = next(dataio_batches(head, fields))
    loader = torch.utils.data.DataLoader(
        BulkRecordDataset(head), batch_size=BATCH, collate_fn=collate_lists
    )
    if tuple(as_list(c) for c in got) != want or next(iter(loader)) != want:
        raise RuntimeError("dataio or the DataLoader delivered another first batch")
    ranked = next(dataio_batches(dataio.records(head), fields, shard=SHARD))
    if as_list(ranked[1]) != [r["key"] for r in head[SHARD["id"] :: SHARD["of"]]][:BATCH]:
        raise RuntimeError("dataio's rank 0 of 4 did not get every 4th record")
    shuffled = [
        k
        for _, keys in dataio_batches(dataio.records(head).shuffle(seed=0), fields)
        for k in as_list(keys)
    ]
    if sorted(shuffled) != [r["key"] for r in head] or shuffled == sorted(shuffled):
        raise RuntimeError("dataio's shuffle is not a permutation of the records")
    return (
        "checked: first batches equal (plain loop, DataLoader, dataio); rank 0/4 gets every "
        "4th record; shuffle(seed=0) is a permutation"
    )


def check_arrow(
    rows: list[dict[str, Any]], sources: dict[str, Callable[[], Any]]
) -> dict[str, Callable[[], Any]]:
    """The Arrow sources that run here and deliver the list's first batch.

    One this dataio refuses is printed as ``unsupported: <error>`` and left out; one that
    runs but delivers other values is an error.
    """
    want = next(plain_batches(rows))
    fields = ("label", "key")
    supported = {}
    for name, make in sources.items():
        got: list[tuple[list[Any], ...]] = []
        if probe(name, lambda make=make, got=got: got.append(first_batch(make(), fields))):
            continue
        if got[0] != want:
            raise RuntimeError(f"{name} delivered another first batch than the plain loop")
        supported[name] = make
    names = ", ".join(supported) or "none"
    print(f"checked: first batches of the Arrow sources equal the plain loop's ({names})")
    return supported


def arrow_targets(contenders: Sequence[Contender]) -> list[str]:
    """Issue #14's targets against ``DataLoader nw=0``, met or not."""
    by_name = {c.name: c for c in contenders}
    base = by_name["DataLoader nw=0"]
    shuffled = by_name["DataLoader nw=0 shuffle"]
    return [
        target_line(by_name.get(name), base, goal, f"{name} vs DataLoader nw=0")
        for name, goal in (
            (ARROW_TABLE, TARGET_ARROW),
            (PARQUET_FRAME, TARGET_ARROW),
            ("dataio list", TARGET_LIST),
        )
    ] + [
        target_line(by_name.get(name), shuffled, goal, f"{name} vs DataLoader nw=0 shuffle")
        for name, goal in (
            (f"dataio list {SHUFFLED}", TARGET_SHUFFLED_LIST),
            (f"{ARROW_TABLE} {SHUFFLED}", TARGET_SHUFFLED_ARROW),
        )
    ]


def parquet_ceiling(path: Path, contenders: Sequence[Contender]) -> str:
    """The most a parquet frame source can reach against ``DataLoader nw=0`` here.

    pyarrow's own decode of the pipeline's columns (label, key) costs CPU that no loader
    can skip, and the loader's per-batch work over an in-memory Arrow table is the least
    it can do per record: with every core busy and perfect overlap, a pass cannot take
    less than their sum over the cores.
    """
    by_name = {c.name: c for c in contenders}
    base, table = by_name.get("DataLoader nw=0"), by_name.get(ARROW_TABLE)
    if base is None or table is None:
        return "  parquet frame ceiling: not measured (a contender is unsupported)"
    reader = pq.ParquetFile(path)
    spent = []
    for _ in range(FLOOR_PASSES):
        start = time.process_time()
        for index in range(reader.num_row_groups):
            reader.read_row_groups([index], columns=["label", "key"], use_threads=False)
        spent.append(time.process_time() - start)
    decode = min(spent)
    loader = min(table.seconds)  # one thread: its wall time is its CPU time
    cores = usable_cores()
    floor = (decode + loader) / cores
    return (
        f"  parquet frame ceiling: pyarrow decodes label+key in {decode * 1e3:.0f} ms CPU "
        f"per pass, the loader over the Arrow table spends {loader * 1e3:.0f} ms; on "
        f"{cores} cores a pass takes >= {floor * 1e3:.0f} ms, at most "
        f"{median(base.seconds) / floor:.1f}x DataLoader nw=0"
    )


def cpu_lines(sources: dict[str, Callable[[], Any]], passes: int = CPU_PASSES) -> list[str]:
    """CPU per pass of each Arrow source's loader: the process's (all threads) and the
    consumer thread's, min and median over ``passes`` passes. Less noisy than rates on a
    shared machine: other processes' load barely changes the CPU a pass needs."""
    lines = []
    fields = ("label", "key")
    for name, make in sources.items():
        process, consumer = [], []
        for _ in range(passes):
            gc.collect()
            start, mine = time.process_time(), time.thread_time()
            count_pass(dataio_batches(make(), fields))
            process.append(time.process_time() - start)
            consumer.append(time.thread_time() - mine)
        lines.append(
            f"  {name:<22} process {min(process) * 1e3:5.1f} ms (median "
            f"{median(process) * 1e3:5.1f}), consumer thread {min(consumer) * 1e3:5.1f} ms "
            f"(median {median(consumer) * 1e3:5.1f})"
        )
    return lines


# -- part 2: WebDataset shards ----------------------------------------------------------


def make_shards(per_shard: int) -> tuple[list[Path], int]:
    """``SHARDS`` tar shards of ``per_shard`` samples, generated once into ``.bench-data/``.

    Each sample is ``KEY.jpg`` (random bytes behind a JPEG marker, 4-16 KB) and ``KEY.cls``
    (a class number as text). Returns the shard paths and their total size in bytes.
    """
    low, high = PAYLOAD
    directory = BENCH_DATA / f"wds-{SHARDS}x{per_shard}-{low // 1024}k{high // 1024}k-s{SEED}"
    paths = [directory / f"shard-{s:04d}.tar" for s in range(SHARDS)]
    done = directory / "complete"
    if not done.exists():
        directory.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(SEED)
        for number, path in enumerate(paths):
            partial = path.with_suffix(".partial")
            with tarfile.open(partial, "w") as tar:
                for i in range(per_shard):
                    key = f"{number:04d}_{i:06d}"
                    size = int(rng.integers(low, high + 1))
                    jpg = b"\xff\xd8\xff\xe0" + rng.bytes(size - 4)
                    label = str(int(rng.integers(CLASSES))).encode()
                    for name, data in ((f"{key}.jpg", jpg), (f"{key}.cls", label)):
                        info = tarfile.TarInfo(name)
                        info.size, info.mtime, info.mode = len(data), 0, 0o644
                        tar.addfile(info, io.BytesIO(data))
            partial.replace(path)
        done.write_text(f"{SHARDS} shards x {per_shard} samples\n")
    return paths, sum(p.stat().st_size for p in paths)


def shard_pattern(paths: Sequence[Path]) -> str:
    """The brace pattern naming all shards: ``.../shard-{0000..0007}.tar``."""
    last = len(paths) - 1
    return str(paths[0].parent / f"shard-{{0000..{last:04d}}}.tar")


def import_webdataset() -> tuple[Any, str]:
    """The ``webdataset`` module, or ``None`` and why it could not be imported."""
    try:
        import webdataset
    except Exception as exc:  # an install broken in any way counts as missing
        return None, f"{type(exc).__name__}: {exc}"
    return webdataset, ""


def wds_loop(wds: Any, pattern: str) -> Batches:
    """``webdataset.WebDataset(urls, shardshuffle=False)`` iterated, batched by hand."""
    jpgs: list[bytes] = []
    labels: list[bytes] = []
    for sample in wds.WebDataset(pattern, shardshuffle=False):
        jpgs.append(sample["jpg"])
        labels.append(sample["cls"])
        if len(jpgs) == BATCH:
            yield jpgs, labels
            jpgs, labels = [], []
    if jpgs:
        yield jpgs, labels


def wds_batched(wds: Any, pattern: str) -> Batches:
    """``WebDataset(urls, shardshuffle=False).batched(256)`` with its default collation."""
    for batch in wds.WebDataset(pattern, shardshuffle=False).batched(BATCH):
        yield batch["jpg"], batch["cls"]


def tarfile_loop(paths: Sequence[Path]) -> Batches:
    """The stdlib reference: stream each tar, group adjacent members by key, batch."""
    jpgs: list[bytes] = []
    labels: list[bytes] = []
    for path in paths:
        with tarfile.open(path, "r|") as tar:
            sample: dict[str, bytes] = {}
            current = None
            for member in tar:
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                key, _, field = member.name.partition(".")
                if key != current and sample:
                    jpgs.append(sample["jpg"])
                    labels.append(sample["cls"])
                    sample = {}
                current = key
                sample[field] = handle.read()
                if len(jpgs) == BATCH:
                    yield jpgs, labels
                    jpgs, labels = [], []
            if sample:
                jpgs.append(sample["jpg"])
                labels.append(sample["cls"])
    if jpgs:
        yield jpgs, labels


def shard_contenders(wds: Any, paths: Sequence[Path], total: int) -> list[Contender]:
    """Part 2's contenders, the webdataset package first (the baseline) when it imports."""
    pattern = shard_pattern(paths)
    ours = Contender(
        "dataio webdataset",
        lambda: count_pass(dataio_batches(dataio.webdataset(pattern), ("jpg", "cls"))),
        total,
    )
    stdlib = Contender("tarfile loop", lambda: count_pass(tarfile_loop(paths)), total)
    if wds is None:
        return [stdlib, ours]
    return [
        Contender("webdataset loop", lambda: count_pass(wds_loop(wds, pattern)), total),
        Contender("webdataset .batched(256)", lambda: count_pass(wds_batched(wds, pattern)), total),
        stdlib,
        ours,
    ]


def verify_shards(wds: Any, paths: Sequence[Path]) -> str:
    """Check that dataio and the references deliver the same first batch."""
    pattern = shard_pattern(paths)
    want = next(tarfile_loop(paths))
    got = next(dataio_batches(dataio.webdataset(pattern), ("jpg", "cls")))
    if tuple(got) != want:
        raise RuntimeError("dataio.webdataset delivered another first batch than tarfile")
    others = "tarfile loop"
    if wds is not None:
        if next(wds_loop(wds, pattern)) != want or next(wds_batched(wds, pattern)) != want:
            raise RuntimeError("the webdataset package delivered another first batch")
        others += ", webdataset loop and .batched(256)"
    return f"checked: dataio.webdataset's first batch equals the {others}"


# -- where dataio's time goes ------------------------------------------------------------


def stage_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Time dataio's layers one at a time over the same records, in the main thread."""
    from dataio.engine.stream import ShardSpec, plan_chunks

    source = dataio.records(rows)
    shape = passthrough_pipeline("label", "key").shape
    lines = []
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("source.get_many per batch", lambda: _drain_get_many(source, len(rows))),
        (
            "plan_chunks (source + chunks)",
            lambda: sum(1 for _ in plan_chunks(source, shape, ShardSpec())),
        ),
        ("whole loader", lambda: count_pass(dataio_batches(rows, ("label", "key")))),
    ]
    for label, step in steps:
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        lines.append(f"  {label:<32} {compact(len(rows) / elapsed):>8} records/s")
    return lines


def _drain_get_many(source: Any, n: int) -> None:
    for start in range(0, n, BATCH):
        source.get_many(range(start, min(start + BATCH, n)))


def _drain_arrow(batches: Iterator[pa.RecordBatch]) -> int:
    """What a loader must at least do per batch: labels to NumPy, keys kept as Arrow."""
    count = 0
    for batch in batches:
        batch.column("label").to_numpy()
        count += len(batch.column("key"))
    return count


def _sliced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Record batches cut into batches of :data:`BATCH` rows (zero-copy slices)."""
    for batch in batches:
        for start in range(0, batch.num_rows, BATCH):
            yield batch.slice(start, BATCH)


def arrow_stage_lines(table: pa.Table, path: Path) -> list[str]:
    """The Arrow floors under the loader: slicing the table, reading the parquet (the
    slots' columns only, as pyarrow and as a projected frame, and every column as the
    bare frame) and the frame's own streams, each without the loader, in the main thread.

    A parquet frame source cannot beat the projected read: it bounds the frame's row.
    """
    frame = dataio.scan_parquet(path)
    wanted = ["label", "key"]  # what the pipeline's slots read
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("table.to_batches(256), no loader", lambda: _drain_arrow(iter(table.to_batches(BATCH)))),
        (
            "pq iter_batches(label, key) sliced",
            lambda: _drain_arrow(
                _sliced(pq.ParquetFile(path).iter_batches(ROW_GROUP, columns=wanted))
            ),
        ),
        (
            "frame.collect_arrow_reader() sliced",
            lambda: _drain_arrow(_sliced(frame.collect_arrow_reader())),
        ),
        (
            "frame.select(label, key) reader",
            lambda: _drain_arrow(_sliced(frame.select(*wanted).collect_arrow_reader())),
        ),
        ("frame.iterate_batches()", lambda: _drain_arrow(frame.iterate_batches())),
        ("frame.iterate() (row dicts)", lambda: sum(1 for _ in frame.iterate())),
    ]
    lines = []
    for label, step in steps:
        times = []
        failed = None
        for _ in range(FLOOR_PASSES):
            start = time.perf_counter()
            failed = probe(label, step, announce=False)
            times.append(time.perf_counter() - start)
            if failed:
                break
        rate = "" if failed else f"{compact(table.num_rows / min(times)):>8} records/s"
        lines.append(f"  {label:<36} {rate or failed}")
    return lines


def profile_arrow(rows: list[dict[str, Any]], supported: dict[str, Any]) -> None:
    """Stage floors and a cProfile pass of each Arrow source that runs here, over ``rows``."""
    table = arrow_records(rows)
    path = parquet_records(table)
    print(
        f"\nArrow floors over the same {table.num_rows:,} records, main thread, fastest of "
        f"{FLOOR_PASSES} passes:"
    )
    print("\n".join(arrow_stage_lines(table, path)))
    fields = ("label", "key")
    for name, make in arrow_sources(table, path).items():
        if name not in supported:
            print(f"\ncProfile, {name}: not run (unsupported here)")
            continue
        profile_pass(
            name, lambda make=make: count_pass(dataio_batches(make(), fields)), batch=BATCH
        )


# -- report ------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    """``a / b`` formatted as a multiple."""
    return f"{a / b:.2f}x"


def result_table(contenders: Sequence[Contender], bases: Sequence[str], unit: str) -> str:
    """Items/s, spread, ratios to the named baselines, memory and output per contender."""
    by_name = {c.name: c for c in contenders}
    rates = {name: by_name[name].rate() for name in bases}
    rows = []
    for c in contenders:
        rate = c.rate()
        ratios = [ratio(rate, rates[name]) for name in bases]
        delivered = f"{c.expected:,}"
        rows.append(
            [
                c.name,
                f"{rate:,.0f}",
                c.spread(),
                *ratios,
                delivered,
                mib(max(c.peaks)),
                mib(max(c.growth)),
                c.output,
            ]
        )
    headers = [
        "contender",
        f"{unit}/s",
        "min..max",
        *(f"vs {name}" for name in bases),
        unit,
        "peak RSS",
        "RSS growth",
        "output",
    ]
    return format_table(headers, rows)


def run_records(count: int, rounds: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Part 1: build the records, measure every contender, print the table.

    Returns the records and the Arrow sources that run here.
    """
    start = time.perf_counter()
    rows = make_records(count)
    table = arrow_records(rows)
    path = parquet_records(table)
    print(
        f"\n== part 1: {count:,} in-memory records, batch {BATCH}, passthrough of label and "
        f"key (built in {time.perf_counter() - start:.1f} s; Arrow table "
        f"{table.nbytes / 2**20:.0f} MiB, parquet {path.stat().st_size / 2**20:.0f} MiB in "
        f"row groups of {ROW_GROUP:,}: {path}) ==",
        flush=True,
    )
    print(verify_records(rows), flush=True)
    arrow = check_arrow(rows, arrow_sources(table, path))
    contenders = record_contenders(rows, arrow)
    interleave(contenders, rounds, unit="records")
    print(f"\nmedian of {rounds} rounds; rates count records delivered to the consumer:")
    print(result_table(contenders, ["plain loop", "DataLoader nw=0"], "records"))
    print(RSS_NOTE)
    print("targets (issue #14), on the medians:")
    print("\n".join(arrow_targets(contenders)))
    print(parquet_ceiling(path, contenders))
    print(f"CPU per pass (process_time, thread_time; min and median of {CPU_PASSES} passes):")
    print("\n".join(cpu_lines(arrow)))
    print(
        f"rank {SHARD['id']}/{SHARD['of']} rows deliver a quarter of the records: an indexed "
        "source reads only the rank's positions, a stream reads every record and keeps a "
        "quarter."
    )
    print(f"load average after part 1: {load_average()}", flush=True)
    return rows, arrow


def run_shards(per_shard: int, rounds: int) -> list[Path]:
    """Part 2: generate (or reuse) the shards, measure every contender, print the table."""
    start = time.perf_counter()
    paths, size = make_shards(per_shard)
    total = SHARDS * per_shard
    wds, why = import_webdataset()
    print(
        f"\n== part 2: {SHARDS} WebDataset shards x {per_shard:,} samples = {total:,} samples "
        f"(.jpg {PAYLOAD[0] // 1024}-{PAYLOAD[1] // 1024} KB random bytes + .cls), "
        f"{size / 1e6:.0f} MB of tar, batch {BATCH} (ready in {time.perf_counter() - start:.1f} s; "
        f"{shard_pattern(paths)}) ==",
        flush=True,
    )
    if wds is None:
        print(
            f"webdataset package: NOT importable here ({why}); its rows are left out and "
            "the tarfile loop is the baseline"
        )
    print(verify_shards(wds, paths), flush=True)
    contenders = shard_contenders(wds, paths, total)
    interleave(contenders, rounds, unit="samples")
    base = "webdataset loop" if wds is not None else "tarfile loop"
    print(f"\nmedian of {rounds} rounds; the tars are in the page cache after the warm-up pass:")
    print(result_table(contenders, [base, "tarfile loop"] if wds else [base], "samples"))
    mb = size / 1e6
    print(
        "tar MB/s (median): "
        + ", ".join(f"{c.name} {mb * c.rate() / c.expected:,.0f}" for c in contenders)
    )
    print(f"load average after part 2: {load_average()}", flush=True)
    return paths


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shrinks the defaults for a smoke run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="part 1 records (default 1,000,000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run in well under a minute")
    parser.add_argument(
        "--shard-samples", type=int, help=f"part 2 samples per shard (default {PER_SHARD:,})"
    )
    parser.add_argument(
        "--records-only",
        action="store_true",
        help="part 1's table, targets and ceiling only (no part 2, no profiles)",
    )
    args = parser.parse_args(argv)
    args.records = args.records or (50_000 if args.quick else 1_000_000)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.per_shard = args.shard_samples or (QUICK_PER_SHARD if args.quick else PER_SHARD)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Print the machine, one table per part, then where dataio's time goes."""
    args = parse_args(argv)
    print("\n".join(machine_lines(PACKAGES)))
    print(
        f"records: {args.records:,}; shards: {SHARDS} x {args.per_shard:,}; rounds: "
        f"{args.rounds}; batch {BATCH}; DataLoader num_workers 0 and {LOADER_WORKERS}"
    )
    if args.quick:
        print("--quick: a smoke run; passes are short, so the numbers are not the result")
    rows, arrow = run_records(args.records, args.rounds)
    if args.records_only:
        return
    paths = run_shards(args.per_shard, args.rounds)

    subset = rows[: min(len(rows), PROFILE_RECORDS)]
    print(f"\n== where dataio's time goes ({len(subset):,} records) ==")
    print("single pass each, main thread:")
    print("\n".join(stage_lines(subset)))
    fields = ("label", "key")
    profile_pass("dataio list", lambda: count_pass(dataio_batches(subset, fields)), batch=BATCH)
    profile_arrow(subset, arrow)
    shuffled = dataio.records(BulkRecordDataset(subset), indexed=True).shuffle(seed=0)
    profile_pass(
        "dataio indexed shuffle(seed=0)", lambda: count_pass(dataio_batches(shuffled, fields))
    )
    pattern = shard_pattern(paths)
    profile_pass(
        "dataio webdataset",
        lambda: count_pass(dataio_batches(dataio.webdataset(pattern), ("jpg", "cls"))),
    )
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
