"""Running a lowered chain over a record batch: rows spread over dataio's CPU pool.

The rows run in contiguous runs on :func:`dataio.engine.pool.cpu_pool`, each kernel call
writing into one preallocated output buffer when the shape is static.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.engine.udf_errors import row_error
from dataio.engine.udf_kernel import ChainKernel
from dataio.engine.udf_output import allocate, tensor_column, variable_column
from dataio.engine.udf_positions import row_generators
from dataio.engine.udf_values import as_view, reader
from dataio.exceptions import TransformError

__all__ = ["run_batch", "run_rows"]


def run_batch(
    chain: ChainKernel,
    values: Any,
    *,
    paths: bool = False,
    seed: int | None = None,
    positions: Any = None,
) -> Any:
    """Run ``chain``'s kernel over every value of an Arrow array; an array of ``arrow_type``.

    ``values`` are encoded bytes (``binary``, ``large_binary`` or ``binary_view``), or
    paths/URIs (UTF-8) when ``paths`` is true. Null values give null rows. A random
    chain needs ``seed`` and ``positions`` (an integer array, one per value): row ``i``
    draws from ``record_rng(seed, 0, positions[i], 0)``, as record ``positions[i]`` of a
    single-slot pipeline at epoch 0.

    Raises:
        DataioError: the first failing row's error (its class kept), naming the row.
    """
    values = as_view(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    rngs = row_generators(chain, seed, positions, valid)
    out, results = run_rows(chain, values, valid, paths=paths, rngs=rngs)
    if out is not None:
        return tensor_column(chain, out, valid)
    return variable_column(chain, results, valid)


def run_rows(
    chain: ChainKernel,
    values: Any,
    rows: np.ndarray,
    *,
    paths: bool = False,
    rngs: Callable[[int], Any] | None = None,
) -> tuple[np.ndarray | None, list[np.ndarray | None]]:
    """The kernel over the rows where ``rows`` is true: one buffer when the shape is
    static (other rows zero), else one array per row (``None`` elsewhere)."""
    n = len(values)
    read = reader(values)
    shape = chain.shape
    out = allocate((n, *shape), chain.dtype, rows) if shape is not None else None
    direct = chain.kernel.row_shape is not None  # the kernel writes into ``out`` itself
    results: list[np.ndarray | None] = [None] * n

    def work(lo: int, hi: int) -> None:
        run = chain.kernel.run
        assert run is not None  # a chain always has a kernel
        for i in range(lo, hi):
            if not rows[i]:
                continue
            data: Any = None
            try:
                data = read(i)
                encoded = data
                if paths:
                    from dataio.io import read_bytes

                    encoded = read_bytes(bytes(data).decode("utf-8", "surrogateescape"))
                rng = None if rngs is None else rngs(i)
                value, _ = run(encoded, rng, out[i] if direct and out is not None else None)
                if not direct:
                    value = _checked(chain, np.asarray(value))
            except Exception as exc:
                raise row_error(f"chain {chain.label}", exc, i, data, paths) from exc
            if out is None:
                results[i] = value
            elif not direct:
                out[i] = value

    _spread(work, n)
    return out, results


def _spread(work: Callable[[int, int], None], n: int) -> None:
    """Rows in contiguous runs on the CPU pool; the first failing row's error is raised."""
    from dataio.engine.pool import cpu_pool, cpu_workers

    workers = cpu_workers()
    # a few runs per worker even out images of unequal cost (sizes vary within a batch)
    tasks = min(4 * workers, n) if workers > 1 else 1
    if tasks <= 1 or _on_pool_thread():
        work(0, n)  # a pool thread waiting on the pool could starve it (a loader's reads)
        return
    bounds = np.linspace(0, n, tasks + 1).astype(int)
    futures = [cpu_pool().submit(work, int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
    errors = [f.exception() for f in futures]  # waits for all: none writes after we return
    for error in errors:
        if error is not None:
            raise error


def _on_pool_thread() -> bool:
    return threading.current_thread().name.startswith("dataio-cpu")


def _checked(chain: ChainKernel, value: np.ndarray) -> np.ndarray:
    """A row as the planned dtype (and shape, when static)."""
    if chain.shape is not None and value.shape != chain.shape:
        raise TransformError(f"gave shape {value.shape}, but the chain's type says {chain.shape}")
    if value.dtype == chain.dtype:
        return value
    if not np.can_cast(value.dtype, chain.dtype, "same_kind"):
        raise TransformError(
            f"gave {value.dtype}, but the chain's type says {chain.dtype}; "
            "end the chain with to_dtype(...)"
        )
    return value.astype(chain.dtype)
