"""``explain()``: dataio's plan tree, then DataFusion's logical and physical plans."""

from __future__ import annotations

from dataio.engine.compile import compile_plan
from dataio.engine.errors import guard
from dataio.engine.scan import reads_remote
from dataio.engine.session import session, workers
from dataio.plan.frame import Node, PyFilter, tree, walk

__all__ = ["explain"]


def explain(node: Node, *, analyze: bool) -> str:
    """Text: dataio's plan, then DataFusion's optimized logical and physical plans, or
    with ``analyze`` the physical plan after running it, with its metrics."""
    ctx = session(workers(), remote=reads_remote(node))
    df = compile_plan(node, ctx, "explain")
    lines = ["dataio plan:", *("  " + line for line in tree(node))]
    python = [n.label() for n in walk(node) if isinstance(n, PyFilter)]
    if python:
        lines.append("python filters (after DataFusion): " + "; ".join(python))
    with guard(f"explain() of {node.label()}"):
        if analyze:
            ctx.register_view("__dataio_frame", df)
            table = ctx.sql("EXPLAIN ANALYZE SELECT * FROM __dataio_frame").to_arrow_table()
            lines += ["", "DataFusion physical plan (analyzed):"]
            lines += str(table.column("plan")[-1]).splitlines()
        else:
            lines += ["", "DataFusion logical plan:"]
            lines += df.optimized_logical_plan().display_indent().splitlines()
            lines += ["", "DataFusion physical plan:"]
            lines += df.execution_plan().display_indent().splitlines()
    return "\n".join(lines)
