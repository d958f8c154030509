"""Short text for sources: a source's ``describe()`` written as the calls that built it.

``records(list)[3 rows].shuffle(seed=1)`` instead of ``<PermutedIndexed object at 0x..>``.
Only what a source already knows is shown: nothing is read to write it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["source_text"]

WIDTH = 60  # a value longer than this is cut with "..."
OPERATORS = ("map_records", "flat_map_records", "filter", "shuffle")


def source_text(description: dict[str, Any], rows: int | None = None) -> str:
    """``description`` (a source's ``describe()``) as a call chain, with its row count
    when known."""
    text = _text(description)
    return text if rows is None else f"{text}[{rows} rows]"


def _text(d: dict[str, Any]) -> str:
    if "of" in d:
        name = next((k for k in OPERATORS if k in d), next(k for k in d if k != "of"))
        return f"{_text(d['of'])}.{name}({_arguments(d[name])})"
    if "concat" in d:
        return "concat(" + ", ".join(_text(c) for c in d["concat"]) + ")"
    kind = d.get("source", "source")
    if kind == "frame":
        return f"frame({_plan_text(d.get('plan', {}))})"
    rest = {k: v for k, v in d.items() if k != "source"}
    if kind == "records":
        what = rest.pop("type", None) or rest.pop("factory", None) or rest.get("mode")
        rest.pop("mode", None)
        schema = rest.pop("schema", None)
        args = [str(what)] + ([_schema_text(schema)] if schema else [])
        return f"records({', '.join(args)})"
    return f"{kind}({_arguments(rest)})"


def _arguments(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in value.items() if v is not None)
    return str(value) if isinstance(value, str) else _short(value)


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) <= WIDTH:
        return text
    half = (WIDTH - 3) // 2  # keep both ends: a path's root and its file pattern
    return text[:half] + "..." + text[-half:]


def _schema_text(schema: list[list[str]]) -> str:
    fields = ", ".join(f"{name}: {kind}" for name, kind in schema)
    return _cut("{" + fields + "}")


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 4] + "...}"


def _plan_text(plan: dict[str, Any]) -> str:
    """A frame plan's description as ``scan_parquet('...').filter(...)``."""
    steps: list[str] = []
    node: Any = plan
    while isinstance(node, dict):
        if "scan" in node:
            steps.append(f"scan_{node['scan']}({_short(_one(node.get('paths', [])))})")
            break
        if "memory" in node:
            steps.append(f"memory({node['memory']}, {node.get('rows')} rows)")
            break
        if "sql" in node:
            steps.append(f"sql({_short(node['sql'])})")
            break
        name = next(iter(node))
        steps.append(f"{name}(...)")
        node = node.get("input", node.get("left"))
    steps.reverse()
    return ".".join(steps)


def _one(paths: list[Any]) -> Any:
    return paths[0] if len(paths) == 1 else paths
