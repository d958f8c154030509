"""Compile :class:`~dataio.plan.expr.Expr` trees to DataFusion expressions, and check them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataio.engine.errors import guard
from dataio.exceptions import QueryError
from dataio.plan.expr import Expr

__all__ = ["POSITION", "between", "check_expr", "column", "compile_expr", "named", "seeded"]

#: The column of row positions a frame adds below a step with seeded chains
#: (:mod:`dataio.engine.compile`); seeded chains read it.
POSITION = "__dataio_position"

_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def column(name: str) -> Any:
    """A DataFusion column by its exact name (quoted: no case folding, any characters)."""
    from datafusion import col

    return col('"' + name.replace('"', '""') + '"')


def compile_expr(expr: Expr, ctx: Any, df: Any = None) -> Any:
    """An :class:`~dataio.plan.expr.Expr` as a DataFusion expression.

    ``df`` is the DataFusion frame the expression runs over: arithmetic reads its
    operands' types there to divide as polars does (see :func:`_arithmetic`).
    """
    import pyarrow as pa
    from datafusion import functions as f
    from datafusion import lit

    op, args = expr.op, expr.args
    if op == "col":
        return column(args[0])
    if op == "lit":
        return lit(pa.scalar(args[0]))  # plain string, not string_view; no import probing
    if op == "binary":
        return _binary(args[0], args[1], args[2], ctx, df)
    if op == "not":
        return ~compile_expr(args[0], ctx, df)
    if op == "neg":
        return lit(0) - compile_expr(args[0], ctx, df)
    if op == "is_null":
        return compile_expr(args[0], ctx, df).is_null()
    if op == "is_not_null":
        return compile_expr(args[0], ctx, df).is_not_null()
    if op == "is_in":
        return f.in_list(compile_expr(args[0], ctx, df), [lit(v) for v in args[1]])
    if op == "is_between":
        return compile_expr(between(expr), ctx, df)
    if op == "cast":
        value = compile_expr(args[0], ctx, df)
        return value.try_cast(args[1]) if len(args) > 2 else value.cast(args[1])
    if op == "str":
        from dataio.engine.strings import compile_str

        return compile_str(args[0], compile_expr(args[1], ctx, df), dict(args[2]))
    if op == "field":
        return f.get_field(compile_expr(args[0], ctx, df), args[1])
    if op == "fill_null":
        return f.coalesce(compile_expr(args[0], ctx, df), compile_expr(args[1], ctx, df))
    if op == "abs":
        return f.abs(compile_expr(args[0], ctx, df))
    if op == "round":
        value = compile_expr(args[0], ctx, df)
        kind = _operand_kinds(value, value, df)[0]
        if kind == "int":
            return value  # as polars: integers are already round
        rounded = _round(value, args[1], args[2])
        return rounded.cast(pa.float32()) if kind == "float32" else rounded
    if op == "alias":
        return compile_expr(args[0], ctx, df).alias(args[1])
    if op == "call":
        return ctx.udf(args[0])(*(compile_expr(a, ctx, df) for a in args[1]))
    if op == "chain":  # a slot chain: one fused kernel call per record batch
        from dataio.engine.udf import compile_chain

        seed = args[2] if len(args) > 2 else None
        position = column(POSITION) if seed is not None else None
        return compile_chain(
            tuple(args[1]), compile_expr(args[0], ctx, df), seed=seed, position=position
        )
    if op == "agg":
        value = None if args[1] is None else compile_expr(args[1], ctx, df)
        return _aggregate(args[0], value)
    raise QueryError(f"unknown expression {expr.describe()}")  # pragma: no cover


def _round(value: Any, decimals: int, mode: str) -> Any:
    """DataFusion rounds halves away from zero; polars' default sends them to even."""
    from datafusion import functions as f
    from datafusion import lit

    if mode == "half_away_from_zero":
        return f.round(value, lit(decimals))
    scaled = value * lit(10.0**decimals)
    half = f.abs(scaled - f.trunc(scaled)) == lit(0.5)
    even = lit(2.0) * f.round(scaled / lit(2.0))
    return f.when(half, even).otherwise(f.round(scaled)) / lit(10.0**decimals)


def between(expr: Expr) -> Expr:
    """``is_between`` as comparisons (``closed`` says which bounds count)."""
    value, lower, upper, closed = expr.args
    low = value >= lower if closed in ("both", "left") else value > lower
    high = value <= upper if closed in ("both", "right") else value < upper
    return low & high


def _binary(symbol: str, left_expr: Expr, right_expr: Expr, ctx: Any, df: Any) -> Any:
    import operator

    left, right = compile_expr(left_expr, ctx, df), compile_expr(right_expr, ctx, df)
    if symbol in ("/", "//", "%"):
        kinds = _operand_kinds(left, right, df)
        return _arithmetic(symbol, left, right, kinds)
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge, "&": operator.and_, "|": operator.or_,
        "+": operator.add, "-": operator.sub, "*": operator.mul,
    }  # fmt: skip
    return ops[symbol](left, right)


def _operand_kinds(left: Any, right: Any, df: Any) -> tuple[str, str]:
    """``"int"``, ``"float32"`` or ``"float"`` for each operand (``"float"`` when the
    types are not known here)."""
    import pyarrow as pa

    if df is None:
        return ("float", "float")
    types = df.select(left.alias("l"), right.alias("r")).schema()

    def kind(dtype: Any) -> str:
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
        if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype) or pa.types.is_null(dtype):
            return "int"
        return "float32" if dtype in (pa.float32(), pa.float16()) else "float"

    return kind(types.field(0).type), kind(types.field(1).type)


def _arithmetic(symbol: str, left: Any, right: Any, kinds: tuple[str, str]) -> Any:
    """polars' division: ``/`` is true division (integers divide as ``float64``; two
    ``float32`` stay ``float32``), ``//`` floors, ``%`` takes the divisor's sign, and an
    integer ``//`` or ``%`` by zero is null (DataFusion would fail the query)."""
    import pyarrow as pa
    from datafusion import functions as f
    from datafusion import lit

    integers = kinds == ("int", "int") and symbol != "/"
    if not integers:
        wide = pa.float32() if kinds == ("float32", "float32") else pa.float64()
        left, right = left.cast(wide), right.cast(wide)
    if symbol == "/":
        return left / right
    if integers:
        right = f.nullif(right, lit(0))
    if symbol == "//":
        if not integers:
            return f.floor(left / right)
        quotient, rest = left / right, left % right
        # DataFusion truncates toward zero; floor when the signs differ and it is inexact
        inexact = (rest != lit(0)) & ((left < lit(0)) != (right < lit(0)))
        return f.when(inexact, quotient - lit(1)).otherwise(quotient)
    rest = left % right
    flip = (rest != lit(0)) & ((rest < lit(0)) != (right < lit(0)))
    return f.when(flip, rest + right).otherwise(rest)


def seeded(expr: Expr) -> bool:
    """True when ``expr`` holds a chain with a seed (it reads row positions)."""
    return any(
        node.op == "chain" and len(node.args) > 2 and node.args[2] is not None
        for node in expr.walk()
    )


def _aggregate(name: str, value: Any) -> Any:
    import pyarrow as pa
    from datafusion import functions as f
    from datafusion import lit

    if name == "count_all":
        return f.count()
    if name == "n_unique":
        return f.count(value, distinct=True)
    if name == "first":
        return f.first_value(value)
    if name == "null_count":
        return f.count(lit(1), filter=value.is_null())
    if name in ("std", "var", "median"):  # as polars: float results, also for integers
        wide = value.cast(pa.float64())
        spread: dict[str, Callable[[Any], Any]] = {
            "std": f.stddev, "var": f.var_sample, "median": f.median,
        }  # fmt: skip
        return spread[name](wide)
    functions: dict[str, Callable[[Any], Any]] = {
        "sum": f.sum, "mean": f.avg, "min": f.min, "max": f.max, "count": f.count,
    }  # fmt: skip
    return functions[name](value)


def named(expr: Expr, ctx: Any, df: Any = None) -> Any:
    """Compile, naming the output like :meth:`Expr.output_name`."""
    compiled = compile_expr(expr, ctx, df)
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
    """Unknown columns and operands of the wrong types, before DataFusion sees them."""
    names = df.schema().names
    for name in expr.columns():
        if name not in names:
            raise QueryError(
                f"{where}: column {name!r} not found; available columns: {list(names)}"
            )
    for node in expr.walk():
        if node.op == "is_between":
            check_expr(between(node), df, ctx, where)
        if node.op == "chain":  # a slot chain reads bytes or paths
            base = _type(node.args[0], df, ctx, where)
            if _kind(base) not in ("binary", "string"):
                raise QueryError(
                    f"{where}: a decoder reads bytes or paths, but {node.args[0].describe()} "
                    f"is {base}"
                )
        if node.op == "str":
            base = _type(node.args[1], df, ctx, where)
            if _kind(base) not in ("string", "null"):
                raise QueryError(
                    f"{where}: .str.{node.args[0]}() needs a string column, but "
                    f"{node.args[1].describe()} is {base}; cast it with .cast('string')"
                )
        if node.op == "is_in":
            _check_values(node, df, ctx, where)
        if node.op != "binary" or node.args[0] not in _COMPARISONS:
            continue
        left, right = node.args[1], node.args[2]
        types = (_type(left, df, ctx, where), _type(right, df, ctx, where))
        kinds = {_kind(types[0]), _kind(types[1])}
        if len(kinds - {"null"}) > 1 and kinds != {"temporal", "string"}:
            raise QueryError(
                f"{where}: cannot compare {left.describe()} ({types[0]}) with "
                f"{right.describe()} ({types[1]}); cast one side with .cast(...)"
            )


def _check_values(node: Expr, df: Any, ctx: Any, where: str) -> None:
    """``is_in`` values of the column's kind (DataFusion would fail only when it runs)."""
    from dataio.plan.expr import lit

    value = _type(node.args[0], df, ctx, where)
    for item in node.args[1]:
        kinds = {_kind(value), _kind(_type(lit(item), df, ctx, where))}
        if len(kinds - {"null"}) > 1 and kinds != {"temporal", "string"}:
            raise QueryError(
                f"{where}: {node.args[0].describe()} ({value}) cannot hold {item!r}; "
                "give values of the column's type, or cast the column with .cast(...)"
            )


def _type(expr: Expr, df: Any, ctx: Any, where: str) -> Any:
    """The Arrow type ``expr`` has over ``df``."""
    with guard(where):
        return df.select(compile_expr(expr, ctx, df).alias("v")).schema().field(0).type
