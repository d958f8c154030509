"""Scans: check files, read their schemas, and open them as DataFusion frames."""

from __future__ import annotations

import os
from typing import Any

from dataio.engine.errors import guard
from dataio.engine.plain import plain_schema, view_schema
from dataio.engine.remote import is_remote, read_remote
from dataio.engine.session import scan_session
from dataio.exceptions import DataioError, FormatError, NotFoundError
from dataio.plan.frame import Node, Scan, walk

__all__ = [
    "check_data",
    "listing",
    "read_file",
    "read_path",
    "reads_remote",
    "row_count",
    "scan_options",
    "scan_schema",
]


def read_path(
    ctx: Any, fmt: str, path: str, options: dict[str, Any], schema: Any, extension: str = ""
) -> Any:
    """A DataFusion frame over one file, or over a directory's files ending in ``extension``."""
    if is_remote(path) and fmt != "tfrecord":
        return read_remote(ctx, fmt, path, options, schema)
    if fmt == "parquet":
        # Strings and binaries decode as views (no copy out of the pages: the metadata
        # query of benchmarks/scan.py ran ~1.25x faster); rows leave as plain types.
        view = None if schema is None else view_schema(schema)
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
    if fmt == "feather" and is_remote(path):  # the footer, by ranges: no download
        from dataio.formats._arrow import remote_ipc_schema

        with guard(f"scan_{fmt}", path):
            return plain_schema(remote_ipc_schema(path, f"scan_{fmt}"))
    if fmt == "feather":
        import pyarrow as pa

        with pa.memory_map(path) as source:
            return plain_schema(pa.ipc.open_file(source).schema)
    with guard(f"scan_{fmt}", path):
        schema = read_path(scan_session(1), fmt, path, options, options.get("schema")).schema()
        if fmt == "parquet" and not is_remote(path) and options.get("schema") is None:
            schema = _with_extension_types(schema, path)
    return plain_schema(schema)


def _with_extension_types(schema: Any, path: str) -> Any:
    """``schema`` with the Arrow extension types (``fixed_shape_tensor``, ...) the file's
    stored Arrow schema declares: DataFusion infers their storage types only, and a scan
    given the extension types keeps them in its results."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = pq.read_schema(path)
    fields = list(schema)
    for i, field in enumerate(fields):
        index = stored.get_field_index(field.name)
        kind = stored.field(index).type if index >= 0 else None
        if isinstance(kind, pa.BaseExtensionType) and kind.storage_type == field.type:
            fields[i] = field.with_type(kind)
    return pa.schema(fields, schema.metadata)


def read_file(ctx: Any, scan: Scan, path: str) -> Any:
    """A DataFusion frame over one file of ``scan``, checked first."""
    if not is_remote(path) and not os.path.isfile(path):
        # with a schema given, DataFusion reads a missing local file as empty
        raise NotFoundError(f"{scan.label()}: the file {path!r} is gone")
    check_data(scan, path)
    with guard(f"scan_{scan.format}", path):
        return read_path(ctx, scan.format, path, dict(scan.options), scan.schema)


def check_data(scan: Scan, path: str) -> None:
    """Validate a local Arrow IPC file before DataFusion reads it (once per path, size and
    mtime): DataFusion trusts its offsets, and damaged ones crash the process."""
    if scan.format == "feather" and not is_remote(path):
        from dataio.formats._arrow import check_ipc_file

        check_ipc_file(path, scan.label())


def listing(scan: Scan) -> tuple[str, str] | None:
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


def reads_remote(node: Node) -> bool:
    """Whether any scan in the plan reads an object store."""
    return any(isinstance(n, Scan) and any(is_remote(f) for f in n.files) for n in walk(node))


def row_count(scan: Scan) -> int:
    """The rows of a Parquet or Feather scan, from its files' metadata (no data read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dataio.formats._arrow import check_regular, open_error

    total = 0
    for path in scan.files:
        try:
            check_regular(path, scan.label())
            if scan.format == "parquet":
                total += pq.read_metadata(path).num_rows
            else:
                with pa.memory_map(path) as source:
                    reader = pa.ipc.open_file(source)
                    total += sum(
                        reader.get_batch(i).num_rows for i in range(reader.num_record_batches)
                    )
        except pa.ArrowException as exc:
            raise FormatError(f"{scan.label()}: cannot read {path!r}: {exc}") from None
        except OSError as exc:
            raise open_error(exc, path, scan.label()) from None
    return total


def scan_options(fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of a scan in their canonical form (TFRecord compression names)."""
    if fmt == "tfrecord" and options.get("compression") is not None:
        from dataio.formats.tfrecord import compression_option

        return {**options, "compression": compression_option(options["compression"])}
    return options
