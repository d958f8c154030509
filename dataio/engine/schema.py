"""Output schemas of frame plans, planned over empty inputs and remembered per step."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from dataio.engine.compile import apply_step, compile_plan
from dataio.engine.errors import guard
from dataio.engine.plain import empty_table, plain_schema
from dataio.engine.session import scan_session
from dataio.plan.expr import Expr
from dataio.plan.frame import (
    SOURCES,
    Aggregate,
    Filter,
    Limit,
    Node,
    PyFilter,
    Select,
    Sort,
    WithColumns,
    source_schema,
)

__all__ = ["plan_schema"]

_SCHEMAS: weakref.WeakKeyDictionary[Node, Any] = weakref.WeakKeyDictionary()
_ONE_STEP = (Filter, PyFilter, Select, WithColumns, Sort, Limit, Aggregate)
_STEP_SCHEMAS: OrderedDict[tuple[str, Any, bytes], Any] = OrderedDict()
_STEP_SCHEMAS_MAX = 512
_step_lock = threading.Lock()


def plan_schema(node: Node) -> Any:
    """The output schema of a plan, planned over empty inputs (reads no file)."""
    known = _SCHEMAS.get(node)
    if known is not None:
        return known
    inner = node.children()
    if isinstance(node, SOURCES):
        schema = _step_schema(node, source_schema(node))
    elif isinstance(node, _ONE_STEP) and len(inner) == 1 and _checked_before(inner[0]):
        schema = _step_schema(node, _SCHEMAS[inner[0]])
    else:
        schema = _checked_schema(node, compile_plan(node, scan_session(1), "schema"))
    _SCHEMAS[node] = schema
    return schema


def _checked_before(node: Node) -> bool:
    """Whether ``node``'s schema is known (sources: found now, from their own schema)."""
    if node not in _SCHEMAS and isinstance(node, SOURCES):
        plan_schema(node)
    return node in _SCHEMAS


def _step_schema(node: Node, before: Any) -> Any:
    """The schema after one step over an input of schema ``before`` (for a source: its
    schema as DataFusion plans it).

    A frame method adds one step to a checked plan, so only that step is checked, over
    an empty table of its input's schema. The outcome depends on nothing else, so it is
    remembered by the step's values (:func:`_step_key`) and the input schema's bytes: a
    query built again, as a notebook cell or a training epoch does, is checked in
    microseconds instead of ~1 ms of DataFusion planning. Steps holding Python callables
    are checked every time.
    """
    source = isinstance(node, SOURCES)
    step = () if source else _step_key(node)
    key = None if step is None else (type(node).__name__, step, before.serialize().to_pybytes())
    if key is not None:
        with _step_lock:
            schema = _STEP_SCHEMAS.get(key)
            if schema is not None:
                _STEP_SCHEMAS.move_to_end(key)
                return schema
    ctx = scan_session(1)
    df = ctx.from_arrow(empty_table(before))
    schema = _checked_schema(node, df if source else apply_step(node, df, ctx, "schema"))
    if key is None:  # a step that cannot be told apart by value is checked every time
        return schema
    with _step_lock:
        _STEP_SCHEMAS[key] = schema
        while len(_STEP_SCHEMAS) > _STEP_SCHEMAS_MAX:
            _STEP_SCHEMAS.popitem(last=False)
    return schema


class _NoKey(Exception):
    """A step holds a value that :func:`_value_key` cannot stand for exactly."""


def _step_key(node: Node) -> Any:
    """What defines one step, by value and with types (``None``: no exact key).

    Not its label: labels are for people, and two steps can read alike (a dtype and its
    name, a SQL string and an expression, ``-lit(x)`` and ``lit(-x)``, struct types that
    differ only in field metadata).
    """
    from dataclasses import fields, is_dataclass

    if not is_dataclass(node):  # pragma: no cover - every plan node is a dataclass
        return None
    try:
        return tuple(
            (f.name, _value_key(getattr(node, f.name))) for f in fields(node) if f.name != "input"
        )
    except _NoKey:
        return None


def _value_key(value: Any) -> Any:
    import pyarrow as pa

    if isinstance(value, Expr):
        return ("expr", value.op, tuple(_value_key(a) for a in value.args))
    if isinstance(value, tuple | list):
        return ("seq", tuple(_value_key(v) for v in value))
    if isinstance(value, pa.DataType):
        return ("dtype", pa.schema([pa.field("t", value)]).serialize().to_pybytes())
    if value is None or isinstance(value, bool | int | str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", repr(value))  # keeps -0.0 and nan apart from 0.0 and each other
    raise _NoKey  # a Python callable, or anything else


def _checked_schema(node: Node, df: Any) -> Any:
    with guard(node.label()):
        df.optimized_logical_plan()  # constant folding reports literal casts that fail
        return plain_schema(df.schema())
