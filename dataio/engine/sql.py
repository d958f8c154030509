"""DataFusion glue: the kernels registered as SQL functions.

``decode_image`` and the slot chains given to ``dataio.sql(..., functions=...)`` are
batched scalar functions from :mod:`dataio.engine.udf` (one fused kernel call per
record batch, rows on dataio's CPU pool). Inputs are declared as ``binary_view`` /
``string_view``: DataFusion coerces ``binary``, ``large_binary`` and ``binary_view``
columns (and ``string`` literals) to those, so the same function works on any binary
column, from Parquet or from memory; the kernels read the views' buffers in place.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register_chains", "register_kernels", "sql_context", "unregister_chains"]


def _image_size(values: Any) -> Any:
    from dataio.engine.udf_image import image_sizes

    return image_sizes(values)


def register_kernels(ctx: Any) -> Any:
    """Register dataio's kernels as scalar functions on a DataFusion ``SessionContext``.

    Registers ``decode_image(bytes, mode)`` and ``image_size(bytes)``; ``bytes`` may be
    any binary column type (``binary``, ``large_binary``, ``binary_view``).
    """
    import pyarrow as pa
    from datafusion import udf

    from dataio.engine.udf_image import decode_image_udf

    ctx.register_udf(decode_image_udf())
    ctx.register_udf(
        udf(
            _image_size,
            [pa.binary_view()],
            pa.struct([("height", pa.int32()), ("width", pa.int32())]),
            "immutable",
            "image_size",
        )
    )
    return ctx


def sql_context() -> Any:
    """A new DataFusion ``SessionContext`` with dataio's kernels registered."""
    from datafusion import SessionContext

    return register_kernels(SessionContext())


def register_chains(ctx: Any, functions: tuple[tuple[str, Any, int | None], ...]) -> None:
    """Register each ``(name, ops, seed)`` slot chain as the SQL function ``name(bytes)``.

    The function returns ``fixed_shape_tensor`` values when the chain's shape is static
    (see :mod:`dataio.engine.udf`). A seeded chain is ``name(bytes, position)``.
    """
    from dataio.engine.udf import chain_udf

    for name, ops, seed in functions:
        ctx.register_udf(chain_udf(ops, name, seed))


def unregister_chains(ctx: Any, functions: tuple[tuple[str, Any, int | None], ...]) -> None:
    """Drop the functions :func:`register_chains` added (plans keep their own copies)."""
    for name, *_ in functions:
        ctx.deregister_udf(name)
