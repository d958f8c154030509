"""Conditions for slots (``dataio.cond``): field and shape predicates.

``col(name)`` reads a record field before decoding (``slot.active_when(...)``);
``shape(axis=)`` reads the decoded array (``slot.when(...).then(...).otherwise(...)``).
The predicates are plan values, defined in :mod:`dataio.plan.predicates`.
"""

from __future__ import annotations

from dataio.plan.predicates import FieldRef, Predicate, ShapeRef, col, shape

__all__ = ["FieldRef", "Predicate", "ShapeRef", "col", "shape"]
