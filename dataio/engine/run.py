"""Run frame plans: everything at once in parallel (``collect``) or batch by batch.

* ``collect``: a *row-local* plan (a scan followed by filters, projections and new
  columns) runs once per file on a thread pool and the results are concatenated in file
  order, because DataFusion does not keep order across its own partitions. Other plans
  (sort, join, aggregate, SQL) run as one DataFusion plan over all partitions.
* ``stream``: one DataFusion partition at a time. Row-local plans read file after file;
  other plans run with ``target_partitions=1`` over single-partition inputs, so the
  output order is the same on every run, and no multi-partition stream is ever left open
  (DataFusion aborts the process if Python exits with one open while a Python function
  runs).

Python filters run on the Arrow batches DataFusion returns (:mod:`dataio.engine.tail`).
Where later steps need DataFusion again, the rows that passed are materialized as an
in-memory table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataio.engine.compile import (
    SourceNode,
    compile_plan,
    compile_source,
    compile_steps,
    positioned,
    row_chain,
    units,
)
from dataio.engine.errors import guard, is_engine_error, translate
from dataio.engine.expressions import column
from dataio.engine.feather import feather_table
from dataio.engine.plain import plain_batch
from dataio.engine.scan import check_data, listing, read_file, read_path, reads_remote
from dataio.engine.schema import plan_schema
from dataio.engine.session import scan_partitions, scan_session, session, workers
from dataio.engine.tail import limit_batches, python_filter, split_tail
from dataio.exceptions import DataioError
from dataio.plan.frame import Limit, Node, PyFilter, Scan
from dataio.progress import iterate

__all__ = ["collect_table", "plain_frame", "run", "stream_batches"]


def _chain_batches(
    source: SourceNode, steps: list[Node], *, parallel: bool, hint: int | None, schema: Any
) -> Iterator[Any]:
    """The chain's batches in file order.

    Each file gets its own one-partition plan. In parallel, the files are the inputs of
    one ``UNION ALL`` whose partition ``i`` is file ``i`` (file scans are not split, so
    DataFusion cannot move row groups between partitions); otherwise the files stream one
    after another.
    """
    runs = units(source)
    where = _where(source, steps)

    def frame(ctx: Any, unit: str | None) -> Any:
        if unit is None or not isinstance(source, Scan):
            base = compile_source(source, ctx, "collect")
        else:
            base = read_file(ctx, source, unit)
        df = compile_steps(base, steps, ctx, "collect")
        return df.limit(hint) if hint is not None else df

    def sequential() -> Iterator[Any]:
        ctx = scan_session(1)
        for unit in runs:
            with guard(where, unit):
                stream = frame(ctx, unit).execute_stream()
                for batch in stream:
                    yield plain_batch(batch.to_pyarrow(), schema)

    if not parallel or len(runs) == 1:
        yield from sequential()
        return
    remote = reads_remote(source)
    ctx = scan_session(scan_partitions(), ordered=True, remote=remote)
    whole = listing(source) if isinstance(source, Scan) and hint is None else None
    if whole is not None:
        assert isinstance(source, Scan)
        directory, extension = whole
        for path in source.files:
            check_data(source, path)
        try:
            with guard(where):
                options = dict(source.options)
                base = read_path(ctx, source.format, directory, options, source.schema, extension)
                df = plain_frame(compile_steps(base, steps, ctx, "collect"))
                parts = df.collect_partitioned()
        except DataioError:
            parts = None  # the per-file plans below name the file that fails
        if parts is not None:
            for part in parts:
                for batch in part:
                    yield plain_batch(batch, schema)
            return
    # Parallel runs feed collect(), which holds the whole result anyway: one UNION over
    # every file costs one plan instead of one per group (measured ~3.5 ms each).
    group = len(runs)
    for first in range(0, len(runs), group):
        chunk = runs[first : first + group]
        frames = [frame(ctx, unit) for unit in chunk]
        union = frames[0]
        for other in frames[1:]:
            union = union.union(other)
        try:
            parts = plain_frame(union).collect_partitioned()
        except BaseException as exc:
            if not is_engine_error(exc):
                raise
            for unit in chunk:  # names the file that fails
                with guard(where, unit):
                    frame(session(1, remote=remote), unit).collect()
            raise translate(exc, where) from exc
        if len(parts) != len(chunk):  # pragma: no cover - a plan that split a file
            parts = [frame(session(1, remote=remote), unit).collect() for unit in chunk]
        for part in parts:
            for batch in part:
                yield plain_batch(batch, schema)


def plain_frame(df: Any) -> Any:
    """``df`` with its top-level view columns cast to string/binary inside the plan.

    The casts then run on DataFusion's workers, partition by partition, instead of on
    the Python thread after the collect (a filtered 16-file scan: ~1 ms less, about the
    cast's time). Nested views are left to :func:`~dataio.engine.plain.plain_batch`.
    """
    import pyarrow as pa

    views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    schema = df.schema()
    if not any(f.type in views for f in schema):
        return df
    columns = [
        column(f.name).cast(views[f.type]).alias(f.name) if f.type in views else column(f.name)
        for f in schema
    ]
    return df.select(*columns)


def _where(source: SourceNode, steps: list[Node]) -> str:
    return " -> ".join([source.label(), *(s.label() for s in steps)])


def run(node: Node, *, parallel: bool) -> Iterator[Any]:
    """The plan's batches (pyarrow, no view types), in order where the plan has one."""
    schema = plan_schema(node)
    core, tail = split_tail(node)
    while tail and isinstance(tail[0], Limit) and row_chain(core) is None:
        core, tail = tail[0], tail[1:]  # DataFusion limits a sort (top-k) or a join itself
    chain = row_chain(core)
    if chain is not None and any(positioned(s) for s in chain[1]):
        chain = None  # seeded chains number the rows of their materialized input
    if chain is not None and not any(isinstance(s, PyFilter) for s in chain[1]):
        source, steps = chain
        hint = None
        if tail and isinstance(tail[0], Limit) and tail[0].n is not None:
            hint = tail[0].n + tail[0].offset
        batches = _chain_batches(
            source, steps, parallel=parallel, hint=hint, schema=plan_schema(core)
        )
    else:
        # A chain with Python filters inside materializes; one partition keeps its order.
        ordered = parallel and chain is None
        batches = _plan_batches(core, parallel=ordered, schema=plan_schema(core))
    for step in tail:
        batches = (
            python_filter(batches, step)
            if isinstance(step, PyFilter)
            else limit_batches(batches, step)  # type: ignore[arg-type]
        )
    for batch in batches:
        yield plain_batch(batch, schema)


def _plan_batches(core: Node, *, parallel: bool, schema: Any) -> Iterator[Any]:
    where = core.label()
    remote = reads_remote(core)
    if parallel:
        ctx = session(workers(), remote=remote)
        df = compile_plan(core, ctx, "collect", materialize=collect_table)
        with guard(where):
            batches = df.collect()
        for batch in batches:
            yield plain_batch(batch, schema)
        return
    ctx = session(1, remote=remote)
    df = compile_plan(core, ctx, "stream", materialize=collect_table)
    with guard(where):
        stream = df.execute_stream()
        for batch in stream:
            yield plain_batch(batch.to_pyarrow(), schema)


def collect_table(node: Node) -> Any:
    """Run the whole plan in parallel; a ``pyarrow.Table`` in the plan's order."""
    import pyarrow as pa

    fast = feather_table(node)
    if fast is not None:
        return fast
    schema = plan_schema(node)
    # a bar only for a long collect in a terminal or notebook (dataio.progress)
    batches = iterate(run(node, parallel=True), desc="collect", unit="row", weight=_rows, long=True)
    return pa.Table.from_batches(list(batches), schema=schema)


def _rows(batch: Any) -> int:
    return int(batch.num_rows)


def stream_batches(node: Node) -> Iterator[Any]:
    """Run the plan one partition at a time; batches in the same order on every run."""
    return run(node, parallel=False)
