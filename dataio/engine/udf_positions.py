"""Seeded positions: each row's random generator from the chain's seed and the row's position.

Row ``i`` draws from :func:`~dataio.engine.executor.record_rng` ``(seed, 0, positions[i],
0)``, the generator a single-slot pipeline uses for that record at epoch 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.engine.udf_kernel import ChainKernel, pa_module
from dataio.exceptions import PlanError, QueryError

__all__ = ["row_generators"]


def row_generators(
    chain: ChainKernel, seed: int | None, positions: Any, valid: np.ndarray
) -> Callable[[int], Any] | None:
    """``rng(i)``: row ``i``'s generator, for a random chain (``None`` otherwise)."""
    if not chain.kernel.random:
        return None
    from dataio.engine.executor import record_rng

    pa = pa_module()
    if seed is None or positions is None:
        raise PlanError(f"chain {chain.label} has random ops: it needs a seed and row positions")
    if isinstance(positions, pa.ChunkedArray):
        positions = positions.combine_chunks()
    if len(positions) != len(valid):
        raise QueryError(f"chain {chain.label}: {len(positions)} positions for {len(valid)} rows")
    missing = np.asarray(positions.is_null().to_numpy(zero_copy_only=False), bool) & valid
    if missing.any():
        raise QueryError(
            f"chain {chain.label}: row {int(np.flatnonzero(missing)[0])} of the batch has a "
            "null position; pass each row's position (an integer >= 0) as the second argument"
        )
    try:
        at = np.asarray(positions.fill_null(0).cast(pa.int64()).to_numpy(), np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise QueryError(
            f"chain {chain.label}: positions must be integers, got {positions.type}"
        ) from exc
    negative = (at < 0) & valid
    if negative.any():
        row = int(np.flatnonzero(negative)[0])
        raise QueryError(
            f"chain {chain.label}: row {row} of the batch has position {int(at[row])}; "
            "positions are integers >= 0"
        )
    return lambda i: record_rng(seed, 0, int(at[i]), 0)
