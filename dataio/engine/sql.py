"""DataFusion glue: the kernels registered as SQL functions.

Inputs are declared as ``binary_view`` / ``string_view``: DataFusion coerces ``binary``,
``large_binary`` and ``binary_view`` columns (and ``string`` literals) to those, so the
same function works on any binary column, from Parquet or from memory. The wrappers
cast back to plain ``binary`` / ``string`` before the kernel runs.
"""

from __future__ import annotations

from typing import Any

from dataio.udfs import image

__all__ = ["register_kernels", "sql_context"]


def _image_struct() -> Any:
    import pyarrow as pa

    return pa.struct(
        [
            ("height", pa.int32()),
            ("width", pa.int32()),
            ("channels", pa.int32()),
            ("pixels", pa.binary()),
        ]
    )


def _plain(values: Any, target: Any) -> Any:
    """A view (or large) array as the plain Arrow type the kernels read."""
    return values if values.type == target else values.cast(target)


def _decode_image(values: Any, modes: Any) -> Any:
    import pyarrow as pa

    return image.decode_image_array(_plain(values, pa.binary()), _plain(modes, pa.string()))


def _image_size(values: Any) -> Any:
    import pyarrow as pa

    return image.image_size_array(_plain(values, pa.binary()))


def register_kernels(ctx: Any) -> Any:
    """Register dataio's kernels as scalar functions on a DataFusion ``SessionContext``.

    Registers ``decode_image(bytes, mode)`` and ``image_size(bytes)``; ``bytes`` may be
    any binary column type (``binary``, ``large_binary``, ``binary_view``).
    """
    import pyarrow as pa
    from datafusion import udf

    ctx.register_udf(
        udf(
            _decode_image,
            [pa.binary_view(), pa.string_view()],
            _image_struct(),
            "immutable",
            "decode_image",
        )
    )
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
