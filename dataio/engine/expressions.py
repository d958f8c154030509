"""Compile :class:`~dataio.plan.expr.Expr` trees to DataFusion expressions, and check them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataio.engine.errors import guard
from dataio.exceptions import QueryError
from dataio.plan.expr import Expr

__all__ = ["POSITION", "check_expr", "column", "compile_expr", "named", "seeded"]

#: The column of row positions a frame adds below a step with seeded chains
#: (:mod:`dataio.engine.compile`); seeded chains read it.
POSITION = "__dataio_position"

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def column(name: str) -> Any:
    """A DataFusion column by its exact name (quoted: no case folding, any characters)."""
    from datafusion import col

    return col('"' + name.replace('"', '""') + '"')


def compile_expr(expr: Expr, ctx: Any) -> Any:
    """An :class:`~dataio.plan.expr.Expr` as a DataFusion expression."""
    import operator

    from datafusion import functions as f
    from datafusion import lit

    op, args = expr.op, expr.args
    if op == "col":
        return column(args[0])
    if op == "lit":
        import pyarrow as pa

        return lit(pa.scalar(args[0]))  # plain string, not string_view; no import probing
    if op == "binary":
        left, right = compile_expr(args[1], ctx), compile_expr(args[2], ctx)
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge, "&": operator.and_, "|": operator.or_,
            "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
            "%": operator.mod,
        }  # fmt: skip
        return ops[args[0]](left, right)
    if op == "not":
        return ~compile_expr(args[0], ctx)
    if op == "neg":
        return lit(0) - compile_expr(args[0], ctx)
    if op == "is_null":
        return compile_expr(args[0], ctx).is_null()
    if op == "is_not_null":
        return compile_expr(args[0], ctx).is_not_null()
    if op == "is_in":
        return f.in_list(compile_expr(args[0], ctx), [lit(v) for v in args[1]])
    if op == "cast":
        return compile_expr(args[0], ctx).cast(args[1])
    if op == "field":
        return f.get_field(compile_expr(args[0], ctx), args[1])
    if op == "alias":
        return compile_expr(args[0], ctx).alias(args[1])
    if op == "call":
        return ctx.udf(args[0])(*(compile_expr(a, ctx) for a in args[1]))
    if op == "chain":  # a slot chain: one fused kernel call per record batch
        from dataio.engine.udf import compile_chain

        seed = args[2] if len(args) > 2 else None
        position = column(POSITION) if seed is not None else None
        return compile_chain(
            tuple(args[1]), compile_expr(args[0], ctx), seed=seed, position=position
        )
    if op == "agg":
        return _aggregate(args[0], None if args[1] is None else compile_expr(args[1], ctx))
    raise QueryError(f"unknown expression {expr.describe()}")  # pragma: no cover


def seeded(expr: Expr) -> bool:
    """True when ``expr`` holds a chain with a seed (it reads row positions)."""
    return any(
        node.op == "chain" and len(node.args) > 2 and node.args[2] is not None
        for node in expr.walk()
    )


def _aggregate(name: str, value: Any) -> Any:
    from datafusion import functions as f

    if name == "count_all":
        return f.count()
    if name == "n_unique":
        return f.count(value, distinct=True)
    if name == "first":
        return f.first_value(value)
    functions: dict[str, Callable[[Any], Any]] = {
        "sum": f.sum, "mean": f.avg, "min": f.min, "max": f.max, "count": f.count,
    }  # fmt: skip
    return functions[name](value)


def named(expr: Expr, ctx: Any) -> Any:
    """Compile, naming the output like :meth:`Expr.output_name`."""
    compiled = compile_expr(expr, ctx)
    return compiled if expr.op in ("alias", "col") else compiled.alias(expr.output_name())


def _kind(dtype: Any) -> str:
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(dtype):
        return _kind(dtype.value_type)
    if t.is_null(dtype):
        return "null"
    if t.is_integer(dtype) or t.is_floating(dtype) or t.is_decimal(dtype):
        return "number"
    if t.is_string(dtype) or t.is_large_string(dtype) or dtype == pa.string_view():
        return "string"
    if t.is_binary(dtype) or t.is_large_binary(dtype) or dtype == pa.binary_view():
        return "binary"
    if t.is_boolean(dtype):
        return "boolean"
    if t.is_temporal(dtype):
        return "temporal"
    return str(dtype)


def check_expr(expr: Expr, df: Any, ctx: Any, where: str) -> None:
    """Unknown columns and comparisons between unrelated types, before DataFusion sees them."""
    names = df.schema().names
    for name in expr.columns():
        if name not in names:
            raise QueryError(
                f"{where}: column {name!r} not found; available columns: {list(names)}"
            )
    for node in expr.walk():
        if node.op == "chain":  # a slot chain reads bytes or paths
            with guard(where):
                base = df.select(compile_expr(node.args[0], ctx).alias("v")).schema().field(0)
            if _kind(base.type) not in ("binary", "string"):
                raise QueryError(
                    f"{where}: a decoder reads bytes or paths, but {node.args[0].describe()} "
                    f"is {base.type}"
                )
        if node.op != "binary" or node.args[0] not in _COMPARISONS:
            continue
        left, right = node.args[1], node.args[2]
        with guard(where):
            types = df.select(
                compile_expr(left, ctx).alias("l"), compile_expr(right, ctx).alias("r")
            ).schema()
        kinds = {_kind(types.field(0).type), _kind(types.field(1).type)}
        if len(kinds - {"null"}) > 1 and kinds != {"temporal", "string"}:
            raise QueryError(
                f"{where}: cannot compare {left.describe()} ({types.field(0).type}) with "
                f"{right.describe()} ({types.field(1).type}); cast one side with .cast(...)"
            )
