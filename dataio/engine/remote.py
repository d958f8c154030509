"""Remote scans.

Remote Parquet is read by ranges on every scheme (``s3``, ``r2``, ``gs``, ``az``,
``hf``, ``http(s)``): :mod:`dataio.engine.remote_files` gives DataFusion a pyarrow
dataset whose file reads are ranged GETs through the same obstore stores as the verbs
(credentials, endpoints, proxies, TLS roots, retries), so filters prune row groups and
unread columns are never fetched. DataFusion's own object stores are not used: they
take no proxy, no custom TLS roots and (for ``gs``/``az``) no endpoint
(docs/decisions/016-remote-scans.md).

Remote Feather (Arrow IPC) files give their schema from the footer, read by ranges, and
scans of them with plain projections and slices are read by ranges too (only the
record batches and columns needed, each batch validated; :mod:`dataio.engine.feather`).

Downloaded whole, through the verbs, and parsed by pyarrow: Feather under other plans
(filters, joins: DataFusion's IPC reader trusts the offsets it reads, so the file is
validated in full first), CSV and JSON (no footer to range over), and Parquet on a web
server that ignores ``Range``.
"""

from __future__ import annotations

from typing import Any

from dataio.exceptions import DataioError

__all__ = ["download_table", "is_remote", "ranged", "read_remote"]


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URI of an object store or web server (not a local file)."""
    return "://" in path and not path.startswith("file://")


def ranged(fmt: str, path: str) -> bool:
    """Whether a scan of ``path`` as ``fmt`` reads it by ranges (else: downloads it)."""
    return is_remote(path) and fmt == "parquet"


def read_remote(ctx: Any, fmt: str, uri: str, options: dict[str, Any], schema: Any) -> Any:
    """A DataFusion frame over one remote object: ranged Parquet, else the whole object."""
    from dataio.engine.errors import guard

    if ranged(fmt, uri):
        from dataio.engine.remote_files import NoRanges, dataset

        try:
            return ctx.read_table(dataset(uri, schema))
        except NoRanges:
            pass  # a web server without Range support: read the object whole below
    table = download_table(fmt, uri, options)
    if schema is not None and not table.schema.equals(schema):
        with guard(f"scan_{fmt}", uri):
            table = table.cast(schema)
    return ctx.from_arrow(table)


def download_table(fmt: str, uri: str, options: dict[str, Any]) -> Any:
    """The whole object at ``uri`` read through dataio's IO layer, as a ``pyarrow.Table``."""
    import pyarrow as pa

    from dataio.exceptions import FormatError
    from dataio.formats._arrow import validated
    from dataio.io.uri import parse
    from dataio.io.verbs import fetch_whole

    data = pa.py_buffer(fetch_whole(parse(uri), uri))  # the body's buffer, not a copy
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(pa.BufferReader(data))
        if fmt == "feather":
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            return validated(table, uri)
        if fmt == "csv":
            import pyarrow.csv as pacsv

            header = options.get("has_header", True)
            return pacsv.read_csv(
                pa.BufferReader(data),
                read_options=pacsv.ReadOptions(autogenerate_column_names=not header),
                parse_options=pacsv.ParseOptions(delimiter=options.get("separator", ",")),
            )
        if fmt == "json":
            import pyarrow.json as pajson

            return pajson.read_json(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise FormatError(f"scan_{fmt}: cannot read {uri!r} as {fmt}: {exc}") from None
    raise DataioError(f"cannot scan {uri!r} as {fmt}")  # pragma: no cover
