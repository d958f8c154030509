"""DataFusion glue: the kernels registered as SQL functions. The only datafusion import."""

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


def register_kernels(ctx: Any) -> Any:
    """Register dataio's kernels as scalar functions on a DataFusion ``SessionContext``.

    Registers ``decode_image(bytes, mode)`` and ``image_size(bytes)``.
    """
    import pyarrow as pa
    from datafusion import udf

    ctx.register_udf(
        udf(
            image.decode_image_array,
            [pa.binary(), pa.string()],
            _image_struct(),
            "immutable",
            "decode_image",
        )
    )
    ctx.register_udf(
        udf(
            image.image_size_array,
            [pa.binary()],
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
