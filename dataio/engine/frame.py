"""Lazy frames on DataFusion: compile frame plans, run them in order, explain them.

Three ways to run a plan:

* ``schema``: over empty tables with the scans' schemas. Validates the plan and gives its
  output schema without touching a file; every frame method runs it.
* ``collect``: everything at once, in parallel. A *row-local* plan (a scan followed by
  filters, projections and new columns) runs once per file on a thread pool and the
  results are concatenated in file order, because DataFusion does not keep order across
  its own partitions. Other plans (sort, join, aggregate, SQL) run as one DataFusion plan
  over all partitions.
* ``stream``: batch by batch, one DataFusion partition at a time. Row-local plans read
  file after file; other plans run with ``target_partitions=1`` over single-partition
  inputs, so the output order is the same on every run, and no multi-partition stream is
  ever left open (DataFusion aborts the process if Python exits with one open while a
  Python function runs).

Python filters run on the Arrow batches DataFusion returns. Where later steps need
DataFusion again, the rows that passed are materialized as an in-memory table.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from dataio.engine.remote import download_table, is_remote, object_store_for, ranged
from dataio.engine.sql import register_kernels
from dataio.exceptions import DataioError, FormatError, NotFoundError, QueryError
from dataio.expr import Expr
from dataio.frame_plan import (
    Aggregate,
    Filter,
    Join,
    Limit,
    Memory,
    Node,
    PyFilter,
    Scan,
    Select,
    Sort,
    Sql,
    WithColumns,
)
from dataio.io.uri import parse

__all__ = [
    "collect_table",
    "explain",
    "feather_table",
    "plain_schema",
    "plan_schema",
    "scan_schema",
    "session",
    "stream_batches",
]

Mode = Literal["schema", "collect", "stream", "explain"]

_CONFIG = {
    # Plain string/binary out of Parquet: views surprise users and Python kernels.
    "datafusion.execution.parquet.schema_force_view_types": "false",
    # Row-level filter pushdown (late materialization) stays off, DataFusion's default:
    # measured slower on selective filters over wide binary columns (benchmarks/scan.py).
    # Row groups are still pruned by statistics and unread columns are never decoded.
    # Column names are case-sensitive in SQL strings, as they are in col("Name").
    "datafusion.sql_parser.enable_ident_normalization": "false",
}
_READ_ERRORS = ("parquet error", "arrow error: parser", "ipc", "json", "csv")
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def workers() -> int:
    """Threads for parallel work: the usable cores (``DATAIO_CPU_WORKERS`` overrides)."""
    from dataio.engine.pool import cpu_workers

    return max(1, cpu_workers())


def session(partitions: int, *, ordered: bool = False, remote: bool = False) -> Any:
    """A DataFusion context with dataio's settings and kernels.

    ``ordered``: no file is split across partitions and no round-robin repartitioning,
    so each partition of a plan keeps its input's rows in order.

    ``remote``: the plan reads object stores, where fetching many footers at once hides
    latency; local plans fetch at most one footer per worker at a time. DataFusion reads
    local files on tokio's blocking pool, and its default of 32 concurrent footer and
    statistics fetches starts a blocking thread per file (16 for benchmarks/scan.py) that
    later reads row groups too. Each such thread keeps the buffers it read in its own
    allocator pages (they are freed by the worker threads that decode them), so every
    extra thread grows the process by up to the bytes one scan reads: a 16-file scan
    faulted in ~50 MB of fresh memory per collect for its first dozen collects (~2x
    slower here) and a 1.8 GB read grew RSS by ~1.8 GB per collect. With one fetch per
    worker the pool stays at a few threads and their pages are reused.
    """
    from datafusion import SessionConfig, SessionContext

    config = SessionConfig().with_target_partitions(partitions)
    if not remote:
        config = config.set("datafusion.execution.meta_fetch_concurrency", str(workers()))
    if ordered:
        config = config.with_repartition_file_scans(False).set(
            "datafusion.optimizer.enable_round_robin_repartition", "false"
        )
        # partitions of a listing would otherwise take files from each other's groups
        config = config.set("datafusion.execution.enable_file_stream_work_stealing", "false")
    for key, value in _CONFIG.items():
        config = config.set(key, value)
    return register_kernels(SessionContext(config))


def scan_partitions() -> int:
    """Partitions of an ordered parallel scan: two per worker.

    Each partition reads its files one row group at a time and waits while a row group
    is fetched; with two per worker, a worker decodes one partition's row group while
    the other's is read, and the last files are shared out more evenly. On the metadata
    query of ``benchmarks/scan.py`` (2 workers, 16 files) this took ~2 ms (4%) off; more
    partitions gained nothing more and hold more row groups in memory at once.
    """
    return 2 * workers()


_scan_sessions = threading.local()


def scan_session(partitions: int, *, ordered: bool = False, remote: bool = False) -> Any:
    """This thread's long-lived context for scans and plan schemas.

    Reusing it keeps DataFusion's cache of Parquet footers and file statistics between
    plans (an id-range query over 16 files: ~9 ms instead of ~24 ms), which is keyed by
    path, size and modification time. Directory listings are not cached, so files added
    or removed are seen by the next plan. SQL plans register their views only while
    planning and drop them before returning.
    """
    cache: dict[tuple[int, bool, bool], Any] | None = getattr(_scan_sessions, "contexts", None)
    if cache is None:
        cache = _scan_sessions.contexts = {}
    key = (partitions, ordered, remote)
    ctx = cache.get(key)
    if ctx is None:
        ctx = session(partitions, ordered=ordered, remote=remote)
        ctx.sql("SET datafusion.runtime.list_files_cache_limit = '0'").collect()
        cache[key] = ctx
    return ctx


# -- Arrow types ----------------------------------------------------------------------------


def _plain_type(dtype: Any) -> Any:
    import pyarrow as pa

    if dtype == pa.string_view():
        return pa.string()
    if dtype == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        inner = _plain_type(dtype.value_type)
        if inner != dtype.value_type:
            field = dtype.value_field.with_type(inner)
            return pa.list_(field) if pa.types.is_list(dtype) else pa.large_list(field)
    if pa.types.is_struct(dtype):
        fields = [dtype.field(i) for i in range(dtype.num_fields)]
        plain = [f.with_type(_plain_type(f.type)) for f in fields]
        if any(p.type != f.type for p, f in zip(plain, fields, strict=True)):
            return pa.struct(plain)
    return dtype


def _view_schema(schema: Any) -> Any:
    """``schema`` with top-level string/binary columns as ``string_view``/``binary_view``."""
    import pyarrow as pa

    views = {pa.string(): pa.string_view(), pa.binary(): pa.binary_view()}
    return pa.schema([f.with_type(views.get(f.type, f.type)) for f in schema], schema.metadata)


def plain_schema(schema: Any) -> Any:
    """``schema`` with ``string_view``/``binary_view`` (also nested) as string/binary."""
    import pyarrow as pa

    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema], schema.metadata)


def _plain(batch: Any, schema: Any) -> Any:
    return batch if batch.schema.equals(schema) else batch.cast(schema)


def plain_table(table: Any) -> Any:
    """A table without view types (``pa.table`` of polars data gives views)."""
    schema = plain_schema(table.schema)
    return table if table.schema.equals(schema) else table.cast(schema)


# -- errors ---------------------------------------------------------------------------------

_QUALIFIER = re.compile(r'(?:"\?table\?"|\?table\?|c[0-9a-f]{32}|[A-Za-z_][A-Za-z0-9_]*)\.(?=")')


def _clean(message: str) -> str:
    message = message.replace("DataFusion error: ", "").strip()
    return _QUALIFIER.sub("", message)


def _is_engine_error(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit | DataioError):
        return False
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def translate(exc: BaseException, where: str, path: str | None = None) -> DataioError:
    """A DataFusion error as a :class:`DataioError` saying what and where."""
    message = _clean(str(exc))
    lowered = message.lower()
    if path is not None and (
        "no such file" in lowered or ("not found" in lowered and "field" not in lowered)
    ):
        return NotFoundError(f"{where}: the file {path!r} is gone: {message}")
    if "object store error" in lowered:
        # the storage server failed (went away, timed out, refused), whatever the reader
        # was parsing at the time: not a format error (dataio.io's rules say which)
        from dataio.io.errors import translate as translate_io

        return translate_io(RuntimeError(message), path or where, where)
    if path is not None and (
        type(exc).__name__ == "PanicException"
        or (any(k in lowered for k in _READ_ERRORS) and "cast" not in lowered)
    ):
        return FormatError(f"{where}: cannot read {path!r}: {message}")
    if "no field named" in lowered:
        return QueryError(f"{where}: unknown column: {message}")
    if "sql error" in lowered or "parsererror" in lowered:
        return QueryError(f"{where}: malformed SQL: {message}")
    if "cast error" in lowered or "cannot infer common" in lowered or "coerce" in lowered:
        return QueryError(f"{where}: type mismatch: {message}")
    return QueryError(f"{where}: {message}")


@contextmanager
def guard(where: str, path: str | None = None) -> Iterator[None]:
    """Turn DataFusion errors raised in the block into dataio errors."""
    try:
        yield
    except BaseException as exc:
        if not _is_engine_error(exc):
            raise
        raise translate(exc, where, path) from exc


# -- scans ----------------------------------------------------------------------------------


def _read(
    ctx: Any, fmt: str, path: str, options: dict[str, Any], schema: Any, extension: str = ""
) -> Any:
    """A DataFusion frame over one file, or over a directory's files ending in ``extension``."""
    if is_remote(path) and fmt != "tfrecord":
        # DataFusion's IPC reader does not validate what it reads (a damaged file can
        # crash the process), so remote Feather is downloaded and validated whole
        if not ranged(path) or fmt == "feather":
            table = download_table(fmt, path, options)
            if schema is not None and not table.schema.equals(schema):
                with guard(f"scan_{fmt}", path):
                    table = table.cast(schema)
            return ctx.from_arrow(table)
        loc = parse(path)
        ctx.register_object_store(f"{loc.scheme}://", object_store_for(path), loc.authority)
    if fmt == "parquet":
        # Strings and binaries decode as views (no copy out of the pages: the metadata
        # query of benchmarks/scan.py ran ~1.25x faster); rows leave as plain types.
        view = None if schema is None else _view_schema(schema)
        return ctx.read_parquet(path, file_extension=extension, schema=view)
    if fmt == "feather":
        return ctx.read_arrow(path, file_extension=extension, schema=schema)
    if fmt == "csv":
        return ctx.read_csv(
            path,
            schema=schema,
            has_header=options.get("has_header", True),
            delimiter=options.get("separator", ","),
            file_extension=extension,
        )
    if fmt == "json":
        return ctx.read_json(path, schema=schema, file_extension=extension)
    if fmt == "tfrecord":
        from dataio.formats.tfrecord import read_table

        return ctx.from_arrow(read_table(path, schema, options.get("compression")))
    raise DataioError(f"unknown scan format {fmt!r}")  # pragma: no cover


def _check_file(fmt: str, path: str) -> None:
    """Reject a corrupt Parquet footer or Arrow IPC file with a clear error."""
    import pyarrow as pa

    from dataio.formats._arrow import check_ipc_file, check_regular, open_error

    if is_remote(path):
        return  # DataFusion reads the footer next; its errors name the file
    if fmt not in ("parquet", "feather"):
        if not os.path.exists(path):
            raise NotFoundError(f"scan_{fmt}: no such file {path!r}")
        return
    check_regular(path, f"scan_{fmt}")  # a FIFO would block; say which file is unreadable
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.read_metadata(path)
        else:
            check_ipc_file(path, f"scan_{fmt}")
    except (pa.ArrowException, ValueError) as exc:
        if isinstance(exc, DataioError):
            raise
        what = "Parquet footer" if fmt == "parquet" else "Arrow IPC file header/footer"
        raise FormatError(
            f"scan_{fmt}: {path!r} is not a valid {fmt} file (corrupt {what}): {exc}"
        ) from None
    except OSError as exc:
        raise open_error(exc, path, f"scan_{fmt}") from None


_FILE_SCHEMAS: dict[tuple[str, str, str, int, int], Any] = {}


def scan_schema(fmt: str, path: str, options: dict[str, Any]) -> Any:
    """The schema a scan gives, from its first file's metadata (no data pages read).

    Local Parquet and Feather schemas are kept per path, size and modification time,
    like DataFusion's footer cache: a scan of a file read before skips two footer reads
    (~0.4 ms of the ~3.5 ms dataio spent around a 16-file collect).
    """
    if fmt not in ("parquet", "feather") or is_remote(path):
        return _scan_schema(fmt, path, options)
    try:
        stat = os.stat(path)
    except OSError:
        return _scan_schema(fmt, path, options)  # names the problem
    key = (
        fmt,
        os.path.abspath(path),
        repr(sorted(options.items())),
        stat.st_size,
        stat.st_mtime_ns,
    )
    schema = _FILE_SCHEMAS.get(key)
    if schema is None:
        schema = _scan_schema(fmt, path, options)
        if len(_FILE_SCHEMAS) >= 1024:
            _FILE_SCHEMAS.clear()
        _FILE_SCHEMAS[key] = schema
    return schema


def _scan_schema(fmt: str, path: str, options: dict[str, Any]) -> Any:
    _check_file(fmt, path)
    if fmt == "tfrecord":
        from dataio.formats.tfrecord import infer_schema

        return options.get("schema") or infer_schema(path, options.get("compression"))
    if fmt == "feather" and not is_remote(path):
        import pyarrow as pa

        with pa.memory_map(path) as source:
            return plain_schema(pa.ipc.open_file(source).schema)
    with guard(f"scan_{fmt}", path):
        schema = _read(scan_session(1), fmt, path, options, options.get("schema")).schema()
    return plain_schema(schema)


def _read_file(ctx: Any, scan: Scan, path: str) -> Any:
    if not is_remote(path) and not os.path.isfile(path):
        # with a schema given, DataFusion reads a missing local file as empty
        raise NotFoundError(f"{scan.label()}: the file {path!r} is gone")
    _check_data(scan, path)
    with guard(f"scan_{scan.format}", path):
        return _read(ctx, scan.format, path, dict(scan.options), scan.schema)


def _check_data(scan: Scan, path: str) -> None:
    """Validate a local Arrow IPC file before DataFusion reads it (once per path, size and
    mtime): DataFusion trusts its offsets, and damaged ones crash the process."""
    if scan.format == "feather" and not is_remote(path):
        from dataio.formats._arrow import check_ipc_file

        check_ipc_file(path, scan.label())


def _listing(scan: Scan) -> tuple[str, str] | None:
    """(directory, extension) when one DataFusion listing reads exactly ``scan``'s files
    in their order, else None.

    A listing sorts its files by path and splits them into contiguous groups, one per
    partition (file scans are not split in an ordered session), so partitions taken in
    order give file order. One listing plans and runs faster than a ``UNION`` of one
    scan per file (16 files: ~1.6x less time, benchmarks/scan.py). It applies when the
    files are sorted, share a suffix and are every file with that suffix under their
    directory (recursively, as the listing walks), none hidden.
    """
    if scan.format not in ("parquet", "feather", "csv", "json") or len(scan.files) < 2:
        return None
    if any(is_remote(f) for f in scan.files):
        return None
    files = [os.path.abspath(f) for f in scan.files]
    directory = os.path.dirname(files[0])
    extension = os.path.splitext(files[0])[1]
    if not extension or files != sorted(files):
        return None
    if any(os.path.dirname(f) != directory or not f.endswith(extension) for f in files):
        return None
    found = []
    for root, dirs, names in os.walk(directory):
        if any(d.startswith((".", "_")) for d in dirs) and root == directory:
            return None
        for name in names:
            if name.endswith(extension):
                if name.startswith((".", "_")):
                    return None
                found.append(os.path.join(root, name))
    if sorted(found) != files:
        return None
    return directory + os.sep, extension


# -- expressions ----------------------------------------------------------------------------


def _column(name: str) -> Any:
    from datafusion import col

    return col('"' + name.replace('"', '""') + '"')


def compile_expr(expr: Expr, ctx: Any) -> Any:
    """An :class:`~dataio.expr.Expr` as a DataFusion expression."""
    import operator

    from datafusion import functions as f
    from datafusion import lit

    op, args = expr.op, expr.args
    if op == "col":
        return _column(args[0])
    if op == "lit":
        import pyarrow as pa

        return lit(pa.scalar(args[0]))  # plain string, not string_view; no import probing
    if op == "binary":
        left, right = compile_expr(args[1], ctx), compile_expr(args[2], ctx)
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge, "&": operator.and_, "|": operator.or_,
            "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
            "%": operator.mod,
        }  # fmt: skip
        return ops[args[0]](left, right)
    if op == "not":
        return ~compile_expr(args[0], ctx)
    if op == "neg":
        return lit(0) - compile_expr(args[0], ctx)
    if op == "is_null":
        return compile_expr(args[0], ctx).is_null()
    if op == "is_not_null":
        return compile_expr(args[0], ctx).is_not_null()
    if op == "is_in":
        return f.in_list(compile_expr(args[0], ctx), [lit(v) for v in args[1]])
    if op == "cast":
        return compile_expr(args[0], ctx).cast(args[1])
    if op == "field":
        return f.get_field(compile_expr(args[0], ctx), args[1])
    if op == "alias":
        return compile_expr(args[0], ctx).alias(args[1])
    if op == "call":
        return ctx.udf(args[0])(*(compile_expr(a, ctx) for a in args[1]))
    if op == "agg":
        return _aggregate(args[0], None if args[1] is None else compile_expr(args[1], ctx))
    raise QueryError(f"unknown expression {expr.describe()}")  # pragma: no cover


def _aggregate(name: str, value: Any) -> Any:
    from datafusion import functions as f

    if name == "count_all":
        return f.count()
    if name == "n_unique":
        return f.count(value, distinct=True)
    if name == "first":
        return f.first_value(value)
    functions: dict[str, Callable[[Any], Any]] = {
        "sum": f.sum, "mean": f.avg, "min": f.min, "max": f.max, "count": f.count,
    }  # fmt: skip
    return functions[name](value)


def _named(expr: Expr, ctx: Any) -> Any:
    """Compile, naming the output like :meth:`Expr.output_name`."""
    compiled = compile_expr(expr, ctx)
    return compiled if expr.op in ("alias", "col") else compiled.alias(expr.output_name())


def _kind(dtype: Any) -> str:
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(dtype):
        return _kind(dtype.value_type)
    if t.is_null(dtype):
        return "null"
    if t.is_integer(dtype) or t.is_floating(dtype) or t.is_decimal(dtype):
        return "number"
    if t.is_string(dtype) or t.is_large_string(dtype) or dtype == pa.string_view():
        return "string"
    if t.is_binary(dtype) or t.is_large_binary(dtype) or dtype == pa.binary_view():
        return "binary"
    if t.is_boolean(dtype):
        return "boolean"
    if t.is_temporal(dtype):
        return "temporal"
    return str(dtype)


def _check_expr(expr: Expr, df: Any, ctx: Any, where: str) -> None:
    """Unknown columns and comparisons between unrelated types, before DataFusion sees them."""
    names = df.schema().names
    for name in expr.columns():
        if name not in names:
            raise QueryError(
                f"{where}: column {name!r} not found; available columns: {list(names)}"
            )
    for node in expr.walk():
        if node.op != "binary" or node.args[0] not in _COMPARISONS:
            continue
        left, right = node.args[1], node.args[2]
        with guard(where):
            types = df.select(
                compile_expr(left, ctx).alias("l"), compile_expr(right, ctx).alias("r")
            ).schema()
        kinds = {_kind(types.field(0).type), _kind(types.field(1).type)}
        if len(kinds - {"null"}) > 1 and kinds != {"temporal", "string"}:
            raise QueryError(
                f"{where}: cannot compare {left.describe()} ({types.field(0).type}) with "
                f"{right.describe()} ({types.field(1).type}); cast one side with .cast(...)"
            )


# -- plans ----------------------------------------------------------------------------------

_ROW_OPS = (Filter, PyFilter, Select, WithColumns)


def row_chain(node: Node) -> tuple[Scan | Memory, list[Node]] | None:
    """A scan (or table) followed by row-local steps only, as (source, steps)."""
    steps: list[Node] = []
    while isinstance(node, _ROW_OPS):
        steps.append(node)
        node = node.input
    if isinstance(node, Scan | Memory):
        return node, steps[::-1]
    return None


def _units(source: Scan | Memory) -> list[str | None]:
    return list(source.files) if isinstance(source, Scan) else [None]


def _compile_steps(df: Any, steps: list[Node], ctx: Any, mode: Mode) -> Any:
    for step in steps:
        df = _apply(step, df, ctx, mode)
    return df


def _apply(step: Node, df: Any, ctx: Any, mode: Mode) -> Any:
    """One row-local or relational step over an already compiled input."""
    where = step.label()
    if isinstance(step, PyFilter):
        return df  # schema/explain only: the Python part runs on batches
    if isinstance(step, Filter):
        if isinstance(step.predicate, str):
            with guard(where):
                return df.filter(df.parse_sql_expr(step.predicate))
        if mode == "schema":
            _check_expr(step.predicate, df, ctx, where)
        with guard(where):
            return df.filter(compile_expr(step.predicate, ctx))
    if isinstance(step, Select | WithColumns):
        if mode == "schema":
            for expr in step.exprs:
                _check_expr(expr, df, ctx, where)
        with guard(where):
            exprs = [_named(e, ctx) for e in step.exprs]
            return df.select(*exprs) if isinstance(step, Select) else df.with_columns(*exprs)
    if isinstance(step, Sort):
        if mode == "schema":
            for key in step.keys:
                _check_expr(key, df, ctx, where)
        with guard(where):
            keys = [
                compile_expr(k, ctx).sort(ascending=not d, nulls_first=step.nulls_first)
                for k, d in zip(step.keys, step.descending, strict=True)
            ]
            return df.sort(*keys)
    if isinstance(step, Limit):
        with guard(where):
            return df.limit(step.n if step.n is not None else 2**62, step.offset)
    if isinstance(step, Aggregate):
        if mode == "schema":
            for expr in (*step.keys, *step.aggs):
                _check_expr(expr, df, ctx, where)
        with guard(where):
            return df.aggregate(
                [_named(k, ctx) for k in step.keys], [_named(a, ctx) for a in step.aggs]
            )
    raise QueryError(f"cannot apply {where} here")  # pragma: no cover


def compile_plan(node: Node, ctx: Any, mode: Mode) -> Any:
    """A DataFusion DataFrame for ``node`` (materializing Python-filtered parts)."""
    chain = row_chain(node)
    if chain is not None:
        source, steps = chain
        if mode in ("collect", "stream"):
            python = [i for i, step in enumerate(steps) if isinstance(step, PyFilter)]
            if python:
                # Rows that passed a Python filter go back to DataFusion as one in-memory
                # partition; the steps after it keep their order on it.
                base = ctx.from_arrow(collect_table(steps[python[-1]]))
                return _compile_steps(base, steps[python[-1] + 1 :], ctx, mode)
            if mode == "stream" and len(_units(source)) > 1:
                return ctx.from_arrow(collect_table(node))  # several files, kept in order
        return _compile_steps(_compile_source(source, ctx, mode), steps, ctx, mode)
    if isinstance(node, PyFilter):
        if mode in ("schema", "explain"):
            return compile_plan(node.input, ctx, mode)
        return ctx.from_arrow(collect_table(node))
    if isinstance(node, Limit) and mode in ("collect", "stream") and row_chain(node.input):
        return ctx.from_arrow(collect_table(node))  # "the first n rows" in file order
    if isinstance(node, Join):
        return _join(node, ctx, mode)
    if isinstance(node, Sql):
        return _sql(node, ctx, mode)
    inner = node.children()
    if len(inner) != 1:  # pragma: no cover
        raise QueryError(f"cannot compile {node.label()}")
    return _apply(node, compile_plan(inner[0], ctx, mode), ctx, mode)


def _compile_source(source: Scan | Memory, ctx: Any, mode: Mode) -> Any:
    if mode == "schema":
        schema = source.schema if isinstance(source, Scan) else source.table.schema
        return ctx.from_arrow(_empty(schema))
    if isinstance(source, Memory):
        return ctx.from_arrow(source.table)
    frames = [_read_file(ctx, source, path) for path in source.files]
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return df


def _empty(schema: Any) -> Any:
    """A table with no rows (``Schema.empty_table`` fails on some extension types)."""
    import pyarrow as pa

    arrays = []
    for field in schema:
        if isinstance(field.type, pa.BaseExtensionType):
            storage = pa.array([], field.type.storage_type)
            arrays.append(pa.ExtensionArray.from_storage(field.type, storage))
        else:
            arrays.append(pa.array([], field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _join(node: Join, ctx: Any, mode: Mode) -> Any:
    where = node.label()
    left, right = (_unqualified(compile_plan(n, ctx, mode), where) for n in (node.left, node.right))
    left_names = left.schema().names
    right_names = right.schema().names
    for side, names, keys in (
        ("left", left_names, node.left_on),
        ("right", right_names, node.right_on),
    ):
        for key in keys:
            if key not in names:
                raise QueryError(
                    f"{where}: key {key!r} is not a column of the {side} frame; "
                    f"available columns: {list(names)}"
                )
    shared = {lk for lk, rk in zip(node.left_on, node.right_on, strict=True) if lk == rk}
    # Right columns get names that cannot clash: shared keys a temporary one (dropped or
    # coalesced below), other clashing names the suffix.
    renames = {n: f"{n}\x00right" if n in shared else n + node.suffix for n in right_names}
    renames = {n: r for n, r in renames.items() if n in shared or n in left_names}
    with guard(where):
        right = right.select(*(_column(n).alias(renames.get(n, n)) for n in right_names))
        joined = left.join(
            right,
            how=node.how,
            left_on=list(node.left_on),
            right_on=[renames.get(k, k) for k in node.right_on],
            coalesce_duplicate_keys=False,
        )
        if node.how in ("semi", "anti"):
            return joined
        from datafusion import functions as f

        if node.how == "right":  # as polars: left's other columns, then all of right's
            out = [_column(n) for n in left_names if n not in shared]
            out += [
                _column(renames[n]).alias(n) if n in shared else _column(renames.get(n, n))
                for n in right_names
            ]
            return joined.select(*out)
        out = [
            f.coalesce(_column(n), _column(renames[n])).alias(n)
            if n in shared and node.how == "full"
            else _column(n)
            for n in left_names
        ]
        out += [_column(renames.get(n, n)) for n in right_names if n not in shared]
        return joined.select(*out)


def _unqualified(df: Any, where: str) -> Any:
    """The same columns without table qualifiers, so two inputs never clash by table name."""
    with guard(where):
        return df.select(*(_column(n).alias(n) for n in df.schema().names))


def _sql(node: Sql, ctx: Any, mode: Mode) -> Any:
    inputs = [(name, compile_plan(child, ctx, mode)) for name, child in node.tables]
    where = f"sql({node.query!r})"
    try:
        for name, df in inputs:
            with guard(where):
                ctx.register_view(name, df)
        with guard(where):
            return ctx.sql(node.query)
    finally:
        for name, _ in inputs:
            if ctx.table_exist(name):
                ctx.deregister_table(name)


_SCHEMAS: weakref.WeakKeyDictionary[Node, Any] = weakref.WeakKeyDictionary()
_ONE_STEP = (Filter, PyFilter, Select, WithColumns, Sort, Limit, Aggregate)
_STEP_SCHEMAS: OrderedDict[tuple[str, Any, bytes], Any] = OrderedDict()
_STEP_SCHEMAS_MAX = 512
_step_lock = threading.Lock()


def plan_schema(node: Node) -> Any:
    """The output schema of a plan, planned over empty inputs (reads no file)."""
    known = _SCHEMAS.get(node)
    if known is not None:
        return known
    inner = node.children()
    if isinstance(node, Scan | Memory):
        before = node.schema if isinstance(node, Scan) else node.table.schema
        schema = _step_schema(node, before)
    elif isinstance(node, _ONE_STEP) and len(inner) == 1 and _checked_before(inner[0]):
        schema = _step_schema(node, _SCHEMAS[inner[0]])
    else:
        schema = _checked_schema(node, compile_plan(node, scan_session(1), "schema"))
    _SCHEMAS[node] = schema
    return schema


def _checked_before(node: Node) -> bool:
    """Whether ``node``'s schema is known (sources: found now, from their own schema)."""
    if node not in _SCHEMAS and isinstance(node, Scan | Memory):
        plan_schema(node)
    return node in _SCHEMAS


def _step_schema(node: Node, before: Any) -> Any:
    """The schema after one step over an input of schema ``before`` (for a source: its
    schema as DataFusion plans it).

    A frame method adds one step to a checked plan, so only that step is checked, over
    an empty table of its input's schema. The outcome depends on nothing else, so it is
    remembered by the step's values (:func:`_step_key`) and the input schema's bytes: a
    query built again, as a notebook cell or a training epoch does, is checked in
    microseconds instead of ~1 ms of DataFusion planning. Steps holding Python callables
    are checked every time.
    """
    source = isinstance(node, Scan | Memory)
    step = () if source else _step_key(node)
    key = None if step is None else (type(node).__name__, step, before.serialize().to_pybytes())
    if key is not None:
        with _step_lock:
            schema = _STEP_SCHEMAS.get(key)
            if schema is not None:
                _STEP_SCHEMAS.move_to_end(key)
                return schema
    ctx = scan_session(1)
    df = ctx.from_arrow(_empty(before))
    schema = _checked_schema(node, df if source else _apply(node, df, ctx, "schema"))
    if key is None:  # a step that cannot be told apart by value is checked every time
        return schema
    with _step_lock:
        _STEP_SCHEMAS[key] = schema
        while len(_STEP_SCHEMAS) > _STEP_SCHEMAS_MAX:
            _STEP_SCHEMAS.popitem(last=False)
    return schema


class _NoKey(Exception):
    """A step holds a value that :func:`_value_key` cannot stand for exactly."""


def _step_key(node: Node) -> Any:
    """What defines one step, by value and with types (``None``: no exact key).

    Not its label: labels are for people, and two steps can read alike (a dtype and its
    name, a SQL string and an expression, ``-lit(x)`` and ``lit(-x)``, struct types that
    differ only in field metadata).
    """
    from dataclasses import fields, is_dataclass

    if not is_dataclass(node):  # pragma: no cover - every plan node is a dataclass
        return None
    try:
        return tuple(
            (f.name, _value_key(getattr(node, f.name))) for f in fields(node) if f.name != "input"
        )
    except _NoKey:
        return None


def _value_key(value: Any) -> Any:
    import pyarrow as pa

    if isinstance(value, Expr):
        return ("expr", value.op, tuple(_value_key(a) for a in value.args))
    if isinstance(value, tuple | list):
        return ("seq", tuple(_value_key(v) for v in value))
    if isinstance(value, pa.DataType):
        return ("dtype", pa.schema([pa.field("t", value)]).serialize().to_pybytes())
    if value is None or isinstance(value, bool | int | str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))  # keeps -0.0 and nan apart from 0.0 and each other
    raise _NoKey  # a Python callable, or anything else


def _checked_schema(node: Node, df: Any) -> Any:
    with guard(node.label()):
        df.optimized_logical_plan()  # constant folding reports literal casts that fail
        return plain_schema(df.schema())


# -- execution ------------------------------------------------------------------------------


def _tail(node: Node) -> tuple[Node, list[Node]]:
    """Split Python filters and limits off the top: (core, steps applied after it)."""
    steps: list[Node] = []
    while isinstance(node, PyFilter | Limit):
        steps.append(node)
        node = node.input
    return node, steps[::-1]


def _python_filter(batches: Iterator[Any], step: PyFilter) -> Iterator[Any]:
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


def _limit(batches: Iterator[Any], step: Limit) -> Iterator[Any]:
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


def _chain_batches(
    source: Scan | Memory, steps: list[Node], *, parallel: bool, hint: int | None, schema: Any
) -> Iterator[Any]:
    """The chain's batches in file order.

    Each file gets its own one-partition plan. In parallel, the files are the inputs of
    one ``UNION ALL`` whose partition ``i`` is file ``i`` (file scans are not split, so
    DataFusion cannot move row groups between partitions); otherwise the files stream one
    after another.
    """
    units = _units(source)
    where = _where(source, steps)

    def frame(ctx: Any, unit: str | None) -> Any:
        if unit is None or not isinstance(source, Scan):
            base = _compile_source(source, ctx, "collect")
        else:
            base = _read_file(ctx, source, unit)
        df = _compile_steps(base, steps, ctx, "collect")
        return df.limit(hint) if hint is not None else df

    def sequential() -> Iterator[Any]:
        ctx = scan_session(1)
        for unit in units:
            with guard(where, unit):
                stream = frame(ctx, unit).execute_stream()
                for batch in stream:
                    yield _plain(batch.to_pyarrow(), schema)

    if not parallel or len(units) == 1:
        yield from sequential()
        return
    remote = _reads_remote(source)
    ctx = scan_session(scan_partitions(), ordered=True, remote=remote)
    listing = _listing(source) if isinstance(source, Scan) and hint is None else None
    if listing is not None:
        assert isinstance(source, Scan)
        directory, extension = listing
        for path in source.files:
            _check_data(source, path)
        try:
            with guard(where):
                options = dict(source.options)
                base = _read(ctx, source.format, directory, options, source.schema, extension)
                df = _plain_frame(_compile_steps(base, steps, ctx, "collect"))
                parts = df.collect_partitioned()
        except DataioError:
            parts = None  # the per-file plans below name the file that fails
        if parts is not None:
            for part in parts:
                for batch in part:
                    yield _plain(batch, schema)
            return
    # Parallel runs feed collect(), which holds the whole result anyway: one UNION over
    # every file costs one plan instead of one per group (measured ~3.5 ms each).
    group = len(units)
    for first in range(0, len(units), group):
        chunk = units[first : first + group]
        frames = [frame(ctx, unit) for unit in chunk]
        union = frames[0]
        for other in frames[1:]:
            union = union.union(other)
        try:
            parts = _plain_frame(union).collect_partitioned()
        except BaseException as exc:
            if not _is_engine_error(exc):
                raise
            for unit in chunk:  # names the file that fails
                with guard(where, unit):
                    frame(session(1, remote=remote), unit).collect()
            raise translate(exc, where) from exc
        if len(parts) != len(chunk):  # pragma: no cover - a plan that split a file
            parts = [frame(session(1, remote=remote), unit).collect() for unit in chunk]
        for part in parts:
            for batch in part:
                yield _plain(batch, schema)


def _plain_frame(df: Any) -> Any:
    """``df`` with its top-level view columns cast to string/binary inside the plan.

    The casts then run on DataFusion's workers, partition by partition, instead of on
    the Python thread after the collect (a filtered 16-file scan: ~1 ms less, about the
    cast's time). Nested views are left to :func:`_plain`.
    """
    import pyarrow as pa

    views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    schema = df.schema()
    if not any(f.type in views for f in schema):
        return df
    columns = [
        _column(f.name).cast(views[f.type]).alias(f.name) if f.type in views else _column(f.name)
        for f in schema
    ]
    return df.select(*columns)


def _where(source: Scan | Memory, steps: list[Node]) -> str:
    return " -> ".join([source.label(), *(s.label() for s in steps)])


def run(node: Node, *, parallel: bool) -> Iterator[Any]:
    """The plan's batches (pyarrow, no view types), in order where the plan has one."""
    schema = plan_schema(node)
    core, tail = _tail(node)
    while tail and isinstance(tail[0], Limit) and row_chain(core) is None:
        core, tail = tail[0], tail[1:]  # DataFusion limits a sort (top-k) or a join itself
    chain = row_chain(core)
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
            _python_filter(batches, step) if isinstance(step, PyFilter) else _limit(batches, step)  # type: ignore[arg-type]
        )
    for batch in batches:
        yield _plain(batch, schema)


def _plan_batches(core: Node, *, parallel: bool, schema: Any) -> Iterator[Any]:
    where = core.label()
    remote = _reads_remote(core)
    if parallel:
        ctx = session(workers(), remote=remote)
        df = compile_plan(core, ctx, "collect")
        with guard(where):
            batches = df.collect()
        for batch in batches:
            yield _plain(batch, schema)
        return
    ctx = session(1, remote=remote)
    df = compile_plan(core, ctx, "stream")
    with guard(where):
        stream = df.execute_stream()
        for batch in stream:
            yield _plain(batch.to_pyarrow(), schema)


def collect_table(node: Node) -> Any:
    """Run the whole plan in parallel; a ``pyarrow.Table`` in the plan's order."""
    import pyarrow as pa

    fast = feather_table(node)
    if fast is not None:
        return fast
    schema = plan_schema(node)
    return pa.Table.from_batches(list(run(node, parallel=True)), schema=schema)


def stream_batches(node: Node) -> Iterator[Any]:
    """Run the plan one partition at a time; batches in the same order on every run."""
    return run(node, parallel=False)


# -- Feather --------------------------------------------------------------------------------


def feather_table(node: Node) -> Any:
    """Scans of Arrow IPC files with plain projections and slices, read by pyarrow from a
    memory map: Arrow types and buffers come out as stored. ``None`` for other plans."""
    import pyarrow as pa

    from dataio.formats._arrow import check_ipc_file, open_error

    columns: list[str] | None = None
    renames: dict[str, str] = {}
    offset, length = 0, None
    steps: list[Node] = []
    while isinstance(node, Select | Limit):
        steps.append(node)
        node = node.input
    if not isinstance(node, Scan) or node.format != "feather":
        return None
    if any(is_remote(path) for path in node.files):
        return None  # downloaded (and validated) by the plan, not mapped here
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
    for path in node.files:
        with guard(node.label(), path):
            try:
                # damaged offsets would crash whatever reads the table next; checked
                # once per path, size and mtime, so re-reading a file stays zero-copy
                check_ipc_file(path, node.label())
                with pa.memory_map(path) as source:
                    table = pa.ipc.open_file(source).read_all()
            except FileNotFoundError:
                raise NotFoundError(f"{node.label()}: the file {path!r} is gone") from None
            except pa.ArrowException as exc:
                raise FormatError(f"{node.label()}: cannot read {path!r}: {exc}") from None
            except OSError as exc:
                raise open_error(exc, path, node.label()) from None
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


# -- explain --------------------------------------------------------------------------------


def tree(node: Node, indent: int = 0) -> list[str]:
    """The plan as indented lines, top step first."""
    lines = ["  " * indent + node.label()]
    for child in node.children():
        lines += tree(child, indent + 1)
    return lines


def explain(node: Node, *, analyze: bool) -> str:
    """Text: dataio's plan, then DataFusion's optimized logical and physical plans, or
    with ``analyze`` the physical plan after running it, with its metrics."""
    ctx = session(workers(), remote=_reads_remote(node))
    df = compile_plan(node, ctx, "explain")
    lines = ["dataio plan:", *("  " + line for line in tree(node))]
    python = [n.label() for n in _walk(node) if isinstance(n, PyFilter)]
    if python:
        lines.append("python filters (after DataFusion): " + "; ".join(python))
    with guard(f"explain() of {node.label()}"):
        if analyze:
            ctx.register_view("__dataio_frame", df)
            table = ctx.sql("EXPLAIN ANALYZE SELECT * FROM __dataio_frame").to_arrow_table()
            lines += ["", "DataFusion physical plan (analyzed):"]
            lines += str(table.column("plan")[-1]).splitlines()
        else:
            lines += ["", "DataFusion logical plan:"]
            lines += df.optimized_logical_plan().display_indent().splitlines()
            lines += ["", "DataFusion physical plan:"]
            lines += df.execution_plan().display_indent().splitlines()
    return "\n".join(lines)


def _reads_remote(node: Node) -> bool:
    """Whether any scan in the plan reads an object store."""
    return any(isinstance(n, Scan) and any(is_remote(f) for f in n.files) for n in _walk(node))


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children():
        yield from _walk(child)
