"""Arrow types as users get them: no ``string_view``/``binary_view`` out of the engine.

DataFusion decodes strings and binaries as views; every frame result leaves as plain
``string``/``binary`` (nested too), which Python kernels and users expect.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "empty_arrays",
    "empty_table",
    "plain_batch",
    "plain_schema",
    "plain_table",
    "view_schema",
]


def _plain_type(dtype: Any) -> Any:
    import pyarrow as pa

    if dtype == pa.string_view():
        return pa.string()
    if dtype == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        inner = _plain_type(dtype.value_type)
        if inner != dtype.value_type:
            field = dtype.value_field.with_type(inner)
            return pa.list_(field) if pa.types.is_list(dtype) else pa.large_list(field)
    if pa.types.is_struct(dtype):
        fields = [dtype.field(i) for i in range(dtype.num_fields)]
        plain = [f.with_type(_plain_type(f.type)) for f in fields]
        if any(p.type != f.type for p, f in zip(plain, fields, strict=True)):
            return pa.struct(plain)
    return dtype


def view_schema(schema: Any) -> Any:
    """``schema`` with top-level string/binary columns as ``string_view``/``binary_view``."""
    import pyarrow as pa

    views = {pa.string(): pa.string_view(), pa.binary(): pa.binary_view()}
    return pa.schema([f.with_type(views.get(f.type, f.type)) for f in schema], schema.metadata)


def plain_schema(schema: Any) -> Any:
    """``schema`` with ``string_view``/``binary_view`` (also nested) as string/binary."""
    import pyarrow as pa

    return pa.schema([f.with_type(_plain_type(f.type)) for f in schema], schema.metadata)


def plain_batch(batch: Any, schema: Any) -> Any:
    return batch if batch.schema.equals(schema) else batch.cast(schema)


def plain_table(table: Any) -> Any:
    """A table without view types (``pa.table`` of polars data gives views)."""
    schema = plain_schema(table.schema)
    return table if table.schema.equals(schema) else table.cast(schema)


def empty_arrays(schema: Any) -> list[Any]:
    """One array with no rows per field (``Schema.empty_table`` fails on some extension
    types)."""
    import pyarrow as pa

    arrays = []
    for field in schema:
        if isinstance(field.type, pa.BaseExtensionType):
            storage = pa.array([], field.type.storage_type)
            arrays.append(pa.ExtensionArray.from_storage(field.type, storage))
        else:
            arrays.append(pa.array([], field.type))
    return arrays


def empty_table(schema: Any) -> Any:
    """A table with no rows of ``schema``, extension types included."""
    import pyarrow as pa

    return pa.Table.from_arrays(empty_arrays(schema), schema=schema)
