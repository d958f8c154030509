"""The plan nodes behind :class:`dataio.frame.LazyFrame`: immutable values, no compute.

Each node names its inputs, gives a one-line label for plan trees and a JSON-ready
description for source signatures. ``dataio/engine/compile.py`` compiles nodes to
DataFusion; nothing here imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dataio.plan.expr import Expr
from dataio.plan.naming import callable_name

__all__ = [
    "SOURCES",
    "Aggregate",
    "FileRecords",
    "Filter",
    "Join",
    "Limit",
    "Memory",
    "Node",
    "PyFilter",
    "Scan",
    "Select",
    "Sort",
    "Sql",
    "Unique",
    "WithColumns",
    "source_schema",
    "tree",
    "walk",
]


class Node:
    """A step of a frame's plan."""

    def children(self) -> tuple[Node, ...]:
        """The nodes this one reads."""
        return ()

    def label(self) -> str:
        """One line for the plan tree."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (configuration, never data)."""
        raise NotImplementedError


def tree(node: Node, indent: int = 0) -> list[str]:
    """The plan as indented lines, top step first."""
    lines = ["  " * indent + node.label()]
    for child in node.children():
        lines += tree(child, indent + 1)
    return lines


def walk(node: Node) -> Iterator[Node]:
    """Every node of a plan, parents before children."""
    yield node
    for child in node.children():
        yield from walk(child)


@dataclass(frozen=True, eq=False)
class Scan(Node):
    """Files of one format. ``spec`` is what the user passed; ``files`` what it resolved to."""

    format: str
    spec: tuple[str, ...]
    files: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    schema: Any  # pyarrow.Schema, resolved from the first file when the frame was built

    def option(self, name: str, default: Any = None) -> Any:
        """One scan option."""
        return dict(self.options).get(name, default)

    def label(self) -> str:
        shown = self.spec[0] if len(self.spec) == 1 else list(self.spec)
        extra = "".join(f", {k}={v!r}" for k, v in self.options if k != "schema")
        return f"scan_{self.format}({shown!r}{extra}) [{len(self.files)} file(s)]"

    def describe(self) -> dict[str, Any]:
        return {
            "scan": self.format,
            "paths": [os.fspath(p) for p in self.spec],
            "options": {k: str(v) for k, v in self.options},
        }


@dataclass(frozen=True, eq=False)
class Memory(Node):
    """In-memory Arrow data (a table, batches or anything with ``__arrow_c_stream__``)."""

    table: Any  # pyarrow.Table
    name: str

    def label(self) -> str:
        return f"memory({self.name}) [{self.table.num_rows} rows]"

    def describe(self) -> dict[str, Any]:
        return {"memory": self.name, "schema": str(self.table.schema), "rows": self.table.num_rows}


@dataclass(frozen=True, eq=False)
class FileRecords(Node):
    """Records a Python reader makes from each file (``scan_numpy``, ``scan_npz``,
    ``scan_hdf5``), with a fixed Arrow schema.

    Unlike :class:`Scan`, nothing is resolved or read when the frame is built: each run
    (and each pass as a record source) resolves ``spec`` again and reads file after file.
    ``read`` turns one path into its records (dicts, NumPy arrays in them); ``to_arrow``
    turns a file's records into a ``pyarrow.RecordBatch`` of ``schema``. ``fields`` are
    the data fields a damaged file's record raises on when iterated.
    """

    name: str
    spec: tuple[str, ...]
    extensions: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    read: Callable[[str], Iterator[dict[str, Any]]]
    to_arrow: Callable[[list[dict[str, Any]]], Any]
    fields: tuple[str, ...]
    schema: Any  # pyarrow.Schema, the same for every file

    def label(self) -> str:
        shown = self.spec[0] if len(self.spec) == 1 else list(self.spec)
        extra = "".join(f", {k}={v!r}" for k, v in self.options)
        return f"{self.name}({shown!r}{extra})"

    def describe(self) -> dict[str, Any]:
        return {
            "scan": self.name,
            "paths": list(self.spec),
            "options": {k: str(v) for k, v in self.options},
        }


SOURCES = (Scan, Memory, FileRecords)
"""The nodes a plan starts from."""


def source_schema(node: Scan | Memory | FileRecords) -> Any:
    """The Arrow schema a source node gives."""
    return node.table.schema if isinstance(node, Memory) else node.schema


@dataclass(frozen=True, eq=False)
class Filter(Node):
    """Rows where an expression (or a SQL predicate string) is true; pushed down."""

    input: Node
    predicate: Expr | str

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        text = self.predicate if isinstance(self.predicate, str) else self.predicate.describe()
        return f"filter({text})"

    def describe(self) -> dict[str, Any]:
        text = self.predicate if isinstance(self.predicate, str) else self.predicate.describe()
        return {"filter": text, "input": self.input.describe()}


@dataclass(frozen=True, eq=False)
class PyFilter(Node):
    """Rows for which a Python callable on the row dict is true; runs after DataFusion."""

    input: Node
    fn: Callable[[dict[str, Any]], Any]

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"filter(python {callable_name(self.fn)})"

    def describe(self) -> dict[str, Any]:
        return {"python_filter": callable_name(self.fn), "input": self.input.describe()}


@dataclass(frozen=True, eq=False)
class Select(Node):
    """Exactly these columns or expressions, in this order."""

    input: Node
    exprs: tuple[Expr, ...]

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"select({', '.join(e.describe() for e in self.exprs)})"

    def describe(self) -> dict[str, Any]:
        return {"select": [e.describe() for e in self.exprs], "input": self.input.describe()}


@dataclass(frozen=True, eq=False)
class WithColumns(Node):
    """Add or replace columns, each an aliased expression."""

    input: Node
    exprs: tuple[Expr, ...]

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"with_columns({', '.join(e.describe() for e in self.exprs)})"

    def describe(self) -> dict[str, Any]:
        return {"with_columns": [e.describe() for e in self.exprs], "input": self.input.describe()}


@dataclass(frozen=True, eq=False)
class Limit(Node):
    """At most ``n`` rows after skipping ``offset``, in the input's order."""

    input: Node
    n: int | None
    offset: int = 0

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        return f"limit({self.n}, offset={self.offset})"

    def describe(self) -> dict[str, Any]:
        return {"limit": self.n, "offset": self.offset, "input": self.input.describe()}


@dataclass(frozen=True, eq=False)
class Sort(Node):
    """Rows ordered by keys; nulls last unless ``nulls_first``."""

    input: Node
    keys: tuple[Expr, ...]
    descending: tuple[bool, ...]
    nulls_first: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        keys = ", ".join(
            f"{k.describe()}{' desc' if d else ''}"
            for k, d in zip(self.keys, self.descending, strict=True)
        )
        return f"sort({keys}{', nulls_first' if self.nulls_first else ''})"

    def describe(self) -> dict[str, Any]:
        return {
            "sort": [k.describe() for k in self.keys],
            "descending": list(self.descending),
            "nulls_first": self.nulls_first,
            "input": self.input.describe(),
        }


@dataclass(frozen=True, eq=False)
class Join(Node):
    """Rows of ``left`` matched with rows of ``right`` on key columns."""

    left: Node
    right: Node
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: str
    suffix: str = "_right"

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def label(self) -> str:
        return (
            f"join(how={self.how!r}, left_on={list(self.left_on)}, right_on={list(self.right_on)})"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "join": self.how,
            "left_on": list(self.left_on),
            "right_on": list(self.right_on),
            "suffix": self.suffix,
            "left": self.left.describe(),
            "right": self.right.describe(),
        }


@dataclass(frozen=True, eq=False)
class Aggregate(Node):
    """One row per distinct key combination, with aggregate columns."""

    input: Node
    keys: tuple[Expr, ...]
    aggs: tuple[Expr, ...]

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        keys = ", ".join(k.describe() for k in self.keys)
        return f"group_by({keys}).agg({', '.join(a.describe() for a in self.aggs)})"

    def describe(self) -> dict[str, Any]:
        return {
            "group_by": [k.describe() for k in self.keys],
            "agg": [a.describe() for a in self.aggs],
            "input": self.input.describe(),
        }


@dataclass(frozen=True, eq=False)
class Unique(Node):
    """One row per distinct value of ``subset`` (all columns when empty), as polars'
    ``unique``: ``keep`` is ``"first"``, ``"last"``, ``"any"`` or ``"none"``; the kept rows
    stay in the input's order."""

    input: Node
    subset: tuple[str, ...]
    keep: str = "any"
    maintain_order: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.input,)

    def label(self) -> str:
        subset = f"subset={list(self.subset)}, " if self.subset else ""
        return f"unique({subset}keep={self.keep!r})"

    def describe(self) -> dict[str, Any]:
        return {
            "unique": list(self.subset),
            "keep": self.keep,
            "maintain_order": self.maintain_order,
            "input": self.input.describe(),
        }


@dataclass(frozen=True, eq=False)
class Sql(Node):
    """A SQL query over named inputs."""

    query: str
    tables: tuple[tuple[str, Node], ...]
    #: (name, slot chain ops, seed or None): a seeded chain is ``name(bytes, position)``
    functions: tuple[tuple[str, tuple[Any, ...], int | None], ...] = ()

    def children(self) -> tuple[Node, ...]:
        return tuple(node for _, node in self.tables)

    def label(self) -> str:
        extra = f", functions={[f[0] for f in self.functions]}" if self.functions else ""
        return f"sql({self.query!r}, tables={[name for name, _ in self.tables]}{extra})"

    def describe(self) -> dict[str, Any]:
        out = {"sql": self.query, "tables": {name: node.describe() for name, node in self.tables}}
        if self.functions:
            out["functions"] = {
                n: [op.describe() for op in ops] + ([] if seed is None else [f"seed({seed})"])
                for n, ops, seed in self.functions
            }
        return out
