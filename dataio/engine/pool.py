"""The process-wide CPU pool every loader shares.

Decoders and resizers release the GIL, so threads scale across cores without the
pickling and shared-memory costs of worker processes.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from dataio.exceptions import PlanError

__all__ = ["cpu_pool", "cpu_workers"]

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def cpu_workers() -> int:
    """Size of the CPU pool: ``DATAIO_CPU_WORKERS`` or the cores this process may use."""
    value = os.environ.get("DATAIO_CPU_WORKERS")
    if value:
        try:
            workers = int(value)
        except ValueError:
            workers = 0
        if workers <= 0:
            raise PlanError(f"DATAIO_CPU_WORKERS must be a positive integer, got {value!r}")
        return workers
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _forget_after_fork() -> None:
    """A forked child (a DataLoader worker) has none of the pool's threads: work queued
    to the parent's pool would wait forever, so the child starts its own on first use."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None


os.register_at_fork(after_in_child=_forget_after_fork)


def cpu_pool() -> ThreadPoolExecutor:
    """Return the shared pool, creating it on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(cpu_workers(), thread_name_prefix="dataio-cpu")
        return _pool
