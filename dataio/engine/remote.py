"""Remote scans.

``s3://`` and ``r2://`` objects are read by DataFusion itself (ranged reads of footers
and column chunks, so pushdown still saves bytes) through a store made here from what
``dataio.configure_credentials`` / ``configure_endpoint`` and the environment say.
Other schemes (``http(s)://`` and the rest of dataio's URI layer) are downloaded whole
through dataio's IO layer, with its proxies, TLS roots and retries, and parsed by
pyarrow; DataFusion's own HTTP store cannot be told to use them.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from dataio.exceptions import DataioError

__all__ = ["download_table", "is_remote", "object_store_for", "ranged"]

_RANGED = ("s3", "r2")


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URI of an object store or web server (not a local file)."""
    return "://" in path and not path.startswith("file://")


def ranged(path: str) -> bool:
    """Whether DataFusion reads ``path`` itself (with ranged requests)."""
    return is_remote(path) and path.split("://", 1)[0].lower() in _RANGED


def object_store_for(uri: str) -> Any:
    """The DataFusion object store serving an ``s3://`` or ``r2://`` bucket, built once
    per bucket and configuration. DataFusion's store takes no proxy or custom TLS roots:
    those settings apply to the other schemes, which go through dataio's IO layer."""
    from dataio.io import config
    from dataio.io.uri import parse

    loc = parse(uri)
    keys = config.credentials_for(loc.scheme)
    if keys.get("method") == "anonymous":
        raise DataioError(
            f"cannot scan {uri!r} with anonymous credentials: DataFusion's S3 store always "
            "signs requests; configure keys or method='default'"
        )
    endpoint, region = config.s3_target(loc.scheme)
    env = os.environ.get
    endpoint = endpoint or env("AWS_ENDPOINT_URL") or env("AWS_ENDPOINT")
    region = region or env("AWS_REGION") or env("AWS_DEFAULT_REGION")
    return _amazon_s3(loc.authority, tuple(sorted(keys.items())), endpoint, region)


@functools.lru_cache(maxsize=64)
def _amazon_s3(
    bucket: str, keys: tuple[tuple[str, str], ...], endpoint: str | None, region: str | None
) -> Any:
    from datafusion import object_store

    found = dict(keys)
    return object_store.AmazonS3(
        bucket_name=bucket,
        region=region,
        access_key_id=found.get("access_key_id"),
        secret_access_key=found.get("secret_access_key"),
        session_token=found.get("session_token"),
        endpoint=endpoint,
        allow_http=bool(endpoint and endpoint.startswith("http://")),
    )


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
