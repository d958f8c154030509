"""How plans name Python callables in their descriptions and signatures.

A plan value (a record map, a Python filter, a source factory) holds a callable; its
description names it, never hashes its code, so a checkpoint taken before an edit to
the function's body still loads. One function, so every plan names callables alike.
"""

from __future__ import annotations

from typing import Any

__all__ = ["callable_name"]


def callable_name(fn: Any) -> str:
    """Name a Python callable for signatures: module and qualified name, not code.

    A :func:`dataio.custom_op` is named by its declared name and version.

    Example:
        >>> callable_name(len)
        'builtins.len'
    """
    if getattr(fn, "kind", None) == "custom" and hasattr(fn, "param"):
        return f"custom_op:{fn.param('op')}@{fn.param('version')}"
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"
