"""``custom_op``: a user function as a versioned, batch-level op of a slot chain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dataio.exceptions import PlanError
from dataio.plan.ops import Op, make_op

__all__ = ["custom_op"]


def custom_op(
    fn: Callable[..., Any], *, name: str | None = None, version: str | int = "1", **params: Any
) -> Op:
    """Wrap ``fn`` as an op for the end of a slot chain; it runs once per batch.

    ``fn(column, **params)`` receives the slot's batched NumPy array (batch on axis 0)
    and returns an array with the same batch length. ``name`` and ``version`` enter the
    plan signature (and source signatures, when used with ``map_records``): bump the
    version when the function's behaviour changes, so old checkpoints are refused.

    Example:
        >>> clip = dataio.custom_op(lambda x, lo, hi: x.clip(lo, hi), name="clip", lo=0, hi=1)
        >>> dataio.slot("x").decode_numpy().then(clip)  # doctest: +SKIP
    """
    if not callable(fn):
        raise PlanError(f"custom_op needs a callable, got {fn!r}")
    op_name = name or getattr(fn, "__name__", "")
    if not op_name or op_name == "<lambda>":
        raise PlanError("custom_op needs name= for a lambda or unnamed callable")
    op = make_op(
        "custom", "custom", op=op_name, version=str(version), params=tuple(sorted(params.items()))
    )
    return replace(op, fn=fn)
