"""``col(...).str`` methods (:class:`~dataio.plan.expr.StringNamespace`) as DataFusion
expressions, with polars' semantics: regular expressions in Rust ``regex`` syntax (the
crate both use), lengths as ``uint32``, slices clamped to the string."""

from __future__ import annotations

from typing import Any

from dataio.exceptions import QueryError

__all__ = ["compile_str"]


def compile_str(method: str, value: Any, params: dict[str, Any]) -> Any:
    """``value.str.<method>(**params)`` as a DataFusion expression."""
    import pyarrow as pa
    from datafusion import functions as f
    from datafusion import lit

    if method == "contains":
        if params["literal"]:
            return f.strpos(value, lit(params["pattern"])) > lit(0)
        return f.regexp_like(value, lit(params["pattern"]))
    if method == "starts_with":
        return f.starts_with(value, lit(params["prefix"]))
    if method == "ends_with":
        return f.ends_with(value, lit(params["suffix"]))
    if method == "len_chars":
        return f.character_length(value).cast(pa.uint32())
    if method == "len_bytes":
        return f.octet_length(value).cast(pa.uint32())
    if method == "to_lowercase":
        return f.lower(value)
    if method == "to_uppercase":
        return f.upper(value)
    if method == "replace":
        if params["literal"]:
            return _replace_first(value, params["pattern"], params["value"])
        return f.regexp_replace(value, lit(params["pattern"]), lit(params["value"]))
    if method == "replace_all":
        if params["literal"]:
            return f.replace(value, lit(params["pattern"]), lit(params["value"]))
        return f.regexp_replace(value, lit(params["pattern"]), lit(params["value"]), lit("g"))
    if method == "slice":
        return _slice(value, params["offset"], params["length"])
    if method == "head":
        return f.left(value, lit(params["n"]))
    if method == "tail":
        return f.right(value, lit(params["n"]))
    trims = {"strip_chars": f.btrim, "strip_chars_start": f.ltrim, "strip_chars_end": f.rtrim}
    if method in trims:
        return trims[method](value, lit(params["characters"]))
    raise QueryError(f"unknown string method str.{method}()")  # pragma: no cover


def _replace_first(value: Any, pattern: str, replacement: str) -> Any:
    """The first occurrence of ``pattern`` replaced, as plain text (no regex, no ``$``)."""
    from datafusion import functions as f
    from datafusion import lit

    at = f.strpos(value, lit(pattern))
    before = f.substr(value, lit(1), at - lit(1))
    after = f.substr(value, at + lit(len(pattern)))
    return f.when(at > lit(0), f.concat(before, lit(replacement), after)).otherwise(value)


def _slice(value: Any, offset: int, length: int | None) -> Any:
    """polars' ``str.slice``: ``[start, start + length)`` clamped to the string, where a
    negative ``offset`` counts from the end. DataFusion's ``substr`` (1-based) clamps the
    same way, so only a negative start needs the string's length."""
    from datafusion import functions as f
    from datafusion import lit

    start = lit(offset + 1) if offset >= 0 else f.character_length(value) + lit(offset + 1)
    if length is None:
        return f.substr(value, start) if offset >= 0 else f.substr(value, f.greatest(start, lit(1)))
    return f.substr(value, start, lit(length))
