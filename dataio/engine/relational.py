"""Joins and SQL over compiled inputs."""

from __future__ import annotations

from typing import Any

from dataio.engine.errors import guard
from dataio.engine.expressions import column
from dataio.exceptions import QueryError
from dataio.plan.frame import Join, Sql
from dataio.plan.sql_paths import path_tables, quote_identifier

__all__ = ["join", "sql_plan", "unqualified"]


def join(node: Join, left: Any, right: Any) -> Any:
    """``node``'s join of two compiled inputs (see :func:`unqualified`), columns as polars."""
    where = node.label()
    left_names = left.schema().names
    right_names = right.schema().names
    for side, names, keys in (
        ("left", left_names, node.left_on),
        ("right", right_names, node.right_on),
    ):
        for key in keys:
            if key not in names:
                raise QueryError(
                    f"{where}: key {key!r} is not a column of the {side} frame; "
                    f"available columns: {list(names)}"
                )
    shared = {lk for lk, rk in zip(node.left_on, node.right_on, strict=True) if lk == rk}
    # Right columns get names that cannot clash: shared keys a temporary one (dropped or
    # coalesced below), other clashing names the suffix.
    renames = {n: f"{n}\x00right" if n in shared else n + node.suffix for n in right_names}
    renames = {n: r for n, r in renames.items() if n in shared or n in left_names}
    with guard(where):
        right = right.select(*(column(n).alias(renames.get(n, n)) for n in right_names))
        joined = left.join(
            right,
            how=node.how,
            left_on=list(node.left_on),
            right_on=[renames.get(k, k) for k in node.right_on],
            coalesce_duplicate_keys=False,
        )
        if node.how in ("semi", "anti"):
            return joined
        from datafusion import functions as f

        if node.how == "right":  # as polars: left's other columns, then all of right's
            out = [column(n) for n in left_names if n not in shared]
            out += [
                column(renames[n]).alias(n) if n in shared else column(renames.get(n, n))
                for n in right_names
            ]
            return joined.select(*out)
        out = [
            f.coalesce(column(n), column(renames[n])).alias(n)
            if n in shared and node.how == "full"
            else column(n)
            for n in left_names
        ]
        out += [column(renames.get(n, n)) for n in right_names if n not in shared]
        return joined.select(*out)


def unqualified(df: Any, where: str) -> Any:
    """The same columns without table qualifiers, so two inputs never clash by table name."""
    with guard(where):
        return df.select(*(column(n).alias(n) for n in df.schema().names))


def sql_plan(node: Sql, inputs: list[tuple[str, Any]], ctx: Any) -> Any:
    """``node``'s query over its compiled inputs, each registered by name while planning."""
    from dataio.engine.sql import register_chains, unregister_chains

    where = f"sql({node.query!r})"
    # quoted: a path table's name is the path ("data/*.parquet"), dots and all
    names = [quote_identifier(name) for name, _ in inputs]
    try:
        register_chains(ctx, node.functions)  # the plan keeps them; the context does not
        for name, (_, df) in zip(names, inputs, strict=True):
            with guard(where):
                ctx.register_view(name, df)
        with guard(where):
            return ctx.sql(path_tables(node.query)[0])
    finally:
        unregister_chains(ctx, node.functions)
        for name in names:
            if ctx.table_exist(name):
                ctx.deregister_table(name)
