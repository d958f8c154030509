"""Predicates for slot-local conditions (``dataio.cond``): plan values, part of signatures.

Two families:

* field predicates (:func:`col`) read the input record, before any decoding, so an
  optional slot can be skipped without reading or decoding its bytes;
* shape predicates (:func:`shape`) read the decoded array and choose a branch of
  transforms with ``slot.when(pred).then(...).otherwise(...)``.

Predicates combine with ``&``, ``|`` and ``~``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dataio.exceptions import FieldError, PlanError

__all__ = ["FieldRef", "Predicate", "ShapeRef", "col", "shape"]

_COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


@dataclass(frozen=True)
class Predicate:
    """A boolean condition on a record (``kind="field"``) or a decoded array (``"shape"``).

    Attributes:
        kind: ``"field"`` or ``"shape"``.
        op: ``"eq"``, ``"lt"``, ..., ``"is_null"``, ``"is_in"``, ``"and"``, ``"or"``, ``"not"``.
        args: the operands (names, axes, values or sub-predicates).
    """

    kind: str
    op: str
    args: tuple[Any, ...]

    def __and__(self, other: Predicate) -> Predicate:
        return _combine("and", self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return _combine("or", self, other)

    def __invert__(self) -> Predicate:
        return Predicate(self.kind, "not", (self,))

    def __bool__(self) -> bool:
        raise PlanError(
            "a dataio.cond predicate has no truth value in Python; combine predicates "
            "with &, | and ~ instead of and, or and not"
        )

    def describe(self) -> Any:
        """A JSON-ready description (enters plan signatures)."""
        args = [a.describe() if isinstance(a, Predicate) else _plain(a) for a in self.args]
        return {self.op: args, "on": self.kind}

    def evaluate(self, target: Any) -> bool:
        """Evaluate on a record mapping (field predicates) or an array (shape predicates).

        Raises:
            FieldError: a field predicate names a field the record does not have.
        """
        if self.op == "and":
            return all(p.evaluate(target) for p in self.args)
        if self.op == "or":
            return any(p.evaluate(target) for p in self.args)
        if self.op == "not":
            return not self.args[0].evaluate(target)
        value = self._operand(target)
        if self.op == "is_null":
            return value is None
        if self.op == "is_not_null":
            return value is not None
        if self.op == "is_in":
            return value in self.args[1]
        if value is None:
            return False
        try:
            return bool(_COMPARE[self.op](value, self.args[1]))
        except TypeError:
            raise FieldError(
                f"cannot compare {self.describe_operand()} = {value!r} with {self.args[1]!r}"
            ) from None

    def __repr__(self) -> str:
        symbols = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
        if self.op in ("and", "or"):
            joiner = " & " if self.op == "and" else " | "
            return "(" + joiner.join(repr(a) for a in self.args) + ")"
        if self.op == "not":
            return f"~{self.args[0]!r}"
        target = f"col({self.args[0]!r})" if self.kind == "field" else f"shape[{self.args[0]}]"
        if self.op in symbols:
            return f"{target} {symbols[self.op]} {self.args[1]!r}"
        if self.op == "is_in":
            return f"{target}.is_in({list(self.args[1])!r})"
        return f"{target}.{self.op}()"

    def describe_operand(self) -> str:
        """The operand in words: ``field 'x'`` or ``shape axis 0``."""
        return f"field {self.args[0]!r}" if self.kind == "field" else f"shape axis {self.args[0]}"

    def _operand(self, target: Any) -> Any:
        if self.kind == "field":
            name = self.args[0]
            if not isinstance(target, Mapping) or name not in target:
                fields = sorted(target) if isinstance(target, Mapping) else []
                raise FieldError(
                    f"the condition reads field {name!r}, which is not in the record; "
                    f"available fields: {fields}"
                )
            return target[name]
        axis = self.args[0]
        dims = getattr(target, "shape", None)
        if dims is None:
            raise FieldError(
                f"a shape condition needs an array, got {type(target).__name__}; "
                "use dataio.cond.col(...) for record fields"
            )
        if not -len(dims) <= axis < len(dims):
            raise FieldError(f"shape axis {axis} is out of range for an array of shape {dims}")
        return dims[axis]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | frozenset):
        return sorted(value, key=repr) if isinstance(value, frozenset) else list(value)
    return value


def _combine(op: str, left: Predicate, right: Any) -> Predicate:
    if not isinstance(right, Predicate):
        raise PlanError(f"cannot combine a predicate with {right!r}; both sides must be predicates")
    if left.kind != right.kind:
        raise PlanError(
            "cannot combine a field predicate with a shape predicate: field predicates "
            "run before decoding, shape predicates after"
        )
    return Predicate(left.kind, op, (left, right))


class _Operand:
    kind = ""

    def __init__(self, target: Any) -> None:
        self.target = target

    def _cmp(self, op: str, value: Any) -> Predicate:
        return Predicate(self.kind, op, (self.target, value))

    def eq(self, value: Any) -> Predicate:
        """Equal to ``value``."""
        return self._cmp("eq", value)

    def ne(self, value: Any) -> Predicate:
        """Not equal to ``value``."""
        return self._cmp("ne", value)

    def lt(self, value: Any) -> Predicate:
        """Less than ``value``."""
        return self._cmp("lt", value)

    def le(self, value: Any) -> Predicate:
        """Less than or equal to ``value``."""
        return self._cmp("le", value)

    def gt(self, value: Any) -> Predicate:
        """Greater than ``value``."""
        return self._cmp("gt", value)

    def ge(self, value: Any) -> Predicate:
        """Greater than or equal to ``value``."""
        return self._cmp("ge", value)

    __lt__ = lt
    __le__ = le
    __gt__ = gt
    __ge__ = ge

    def __eq__(self, value: object) -> Predicate:  # type: ignore[override]
        return self._cmp("eq", value)

    def __ne__(self, value: object) -> Predicate:  # type: ignore[override]
        return self._cmp("ne", value)

    __hash__ = None  # type: ignore[assignment]


class FieldRef(_Operand):
    """A record field in a predicate; build with :func:`col`."""

    kind = "field"

    def is_null(self) -> Predicate:
        """The field is ``None``."""
        return Predicate("field", "is_null", (self.target,))

    def is_not_null(self) -> Predicate:
        """The field is not ``None``."""
        return Predicate("field", "is_not_null", (self.target,))

    def is_in(self, values: Iterable[Any]) -> Predicate:
        """The field's value is one of ``values``."""
        return Predicate("field", "is_in", (self.target, tuple(values)))


class ShapeRef(_Operand):
    """One axis of a decoded array's shape; build with :func:`shape`."""

    kind = "shape"


def col(name: str) -> FieldRef:
    """Refer to a record field; evaluated before decoding.

    Example:
        >>> from dataio import cond as c
        >>> pred = c.col("mask_id").is_not_null() & (c.col("split") == "train")
    """
    if not isinstance(name, str) or not name:
        raise PlanError(f"cond.col needs a field name, got {name!r}")
    return FieldRef(name)


def shape(*, axis: int) -> ShapeRef:
    """Refer to axis ``axis`` of the decoded array's shape; evaluated after decoding.

    Example:
        >>> from dataio import cond as c
        >>> tall = c.shape(axis=0).gt(512)
    """
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise PlanError(f"cond.shape axis must be an integer, got {axis!r}")
    return ShapeRef(axis)
