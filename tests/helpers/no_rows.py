"""Make pyarrow's row conversions fail, to prove a code path creates no Python rows.

pyarrow's classes are immutable extension types, so ``monkeypatch.setattr`` cannot
replace their methods. :func:`forbid_row_conversion` clears the immutable flag of each
class for the assignment (through ``ctypes``) and does not restore the methods: call
it only in a subprocess that exists for the check.
"""

from __future__ import annotations

import ctypes
from typing import Any

_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE


class RowConversionError(AssertionError):
    """Raised by a forbidden pyarrow row conversion."""


def _force_setattr(cls: type, name: str, value: Any) -> None:
    for offset in range(0, 512, ctypes.sizeof(ctypes.c_ulong)):
        word = ctypes.c_ulong.from_address(id(cls) + offset)
        if word.value == cls.__flags__:  # tp_flags, found by its known value
            break
    else:
        raise RuntimeError(f"tp_flags of {cls!r} not found")
    word.value &= ~_IMMUTABLE
    try:
        setattr(cls, name, value)
    finally:
        # set the bit back only: setattr cleared the valid-version-tag flag, and writing
        # the old flags back would make stale method-cache entries look valid
        word.value |= _IMMUTABLE


def forbid_row_conversion() -> list[str]:
    """Make ``RecordBatch.to_pylist``, ``Table.to_pylist`` and every ``Scalar.as_py`` raise.

    Returns the names of the methods replaced.
    """
    import pyarrow as pa

    def forbidden(name: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            raise RowConversionError(f"{type(self).__name__}.{name}() was called")

        return method

    targets: list[tuple[type, str]] = [(pa.RecordBatch, "to_pylist"), (pa.Table, "to_pylist")]
    pending = [pa.Scalar]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "as_py" in vars(cls) or cls is pa.Scalar:
            targets.append((cls, "as_py"))
    for cls, name in targets:
        _force_setattr(cls, name, forbidden(name))
    return [f"{cls.__name__}.{name}" for cls, name in targets]
