"""DataFusion sessions with dataio's settings and kernels, and the thread pool's size."""

from __future__ import annotations

import threading
from typing import Any

from dataio.engine.sql import register_kernels

__all__ = ["scan_partitions", "scan_session", "session", "workers"]

_CONFIG = {
    # Plain string/binary out of Parquet: views surprise users and Python kernels.
    "datafusion.execution.parquet.schema_force_view_types": "false",
    # Row-level filter pushdown (late materialization) stays off, DataFusion's default:
    # measured slower on selective filters over wide binary columns (benchmarks/scan.py).
    # Row groups are still pruned by statistics and unread columns are never decoded.
    # Column names are case-sensitive in SQL strings, as they are in col("Name").
    "datafusion.sql_parser.enable_ident_normalization": "false",
}


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
