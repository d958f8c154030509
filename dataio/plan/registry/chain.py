"""Rules over whole chains: the order and decoder checks, and the chain's value type.

Slots and chain expressions share them, so a chain is valid (and typed) the same way
whichever surface built it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Generic, TypeVar

from dataio.exceptions import PlanError
from dataio.plan.ops import Op, make_op
from dataio.plan.predicates import Predicate
from dataio.plan.registry._spec import Chainable, ValueType, spec

T = TypeVar("T", bound=Chainable)

#: a chain's ops in this order of kinds (equal ranks may interleave)
ORDER = {"decode": 0, "geometry": 1, "array": 1, "branch": 1, "normalize": 2, "output": 3}
ORDER["custom"] = 4


def check_branch_ops(where: str, ops: tuple[Op, ...]) -> None:
    """Raise unless ``ops`` may sit in a ``when`` branch."""
    for op in ops:
        if not isinstance(op, Op) or op.kind not in ("geometry", "array", "branch"):
            raise PlanError(
                f"{where}: a branch holds transforms (geometry or array ops), got {op!r}"
            )


def check_when(where: str, ops: tuple[Op, ...], predicate: object) -> Predicate:
    """Raise unless a ``when(predicate)`` branch may follow ``ops``."""
    if not isinstance(predicate, Predicate) or predicate.kind != "shape":
        raise PlanError(
            f"{where}: when() takes a shape predicate such as "
            "dataio.cond.shape(axis=0).gt(512); field predicates gate slots with active_when"
        )
    if not ops:
        raise PlanError(f"{where}: when() needs a decoder before it")
    return predicate


@dataclass(frozen=True)
class When(Generic[T]):
    """The pending ``.when(predicate)`` of a chain: call :meth:`then` with the true-side ops."""

    chain: T
    predicate: Predicate
    where: str

    def then(self, *ops: Op) -> T:
        """Ops applied when the predicate holds; chain ``.otherwise(...)`` for the rest."""
        check_branch_ops(self.where, ops)
        branch = make_op("when", "branch", pred=self.predicate, then=tuple(ops), otherwise=())
        return self.chain.then(branch)


def with_otherwise(where: str, ops: tuple[Op, ...], otherwise: tuple[Op, ...]) -> tuple[Op, ...]:
    """``ops`` with ``otherwise`` as the false side of its last ``when`` branch."""
    last = ops[-1] if ops else None
    if last is None or last.kind != "branch" or last.param("otherwise"):
        raise PlanError(f"{where}: otherwise() must follow .when(...).then(...)")
    check_branch_ops(where, otherwise)
    branch = make_op(
        "when", "branch", pred=last.param("pred"), then=last.param("then"), otherwise=otherwise
    )
    chain = (*ops[:-1], branch)
    validate_chain(where, chain)
    return chain


def _decoder_check(where: str, decoder: Op, ops: tuple[Op, ...]) -> None:
    for op in ops:
        if op.kind == "branch":
            _decoder_check(where, decoder, op.param("then") + op.param("otherwise"))
        elif op.applies_to and decoder.name not in op.applies_to:
            accepted = " or ".join(op.applies_to)
            raise PlanError(
                f"{where}: {op.name} needs {accepted}, but the chain decodes with {decoder.name}"
            )


def validate_chain(where: str, ops: tuple[Op, ...]) -> None:
    """Raise :class:`PlanError` (prefixed by ``where``) unless ``ops`` is a valid chain.

    A chain is one decoder, then transforms the decoder's output accepts, then at most
    one ``normalize``, one ``output`` and custom ops, in that order.
    """
    kinds = [op.kind for op in ops]
    if kinds and kinds[0] != "decode":
        raise PlanError(
            f"{where}: the chain must start with a decoder such as .decode_image(), got {ops[0]!r}"
        )
    if kinds.count("decode") > 1:
        raise PlanError(f"{where}: a chain holds one decoder, got {kinds.count('decode')}")
    if "batch" in kinds:
        raise PlanError(
            f"{where}: batch transforms go after the shape stage in dataio.pipeline(...), "
            "not in a slot chain"
        )
    for previous, op in itertools.pairwise(ops):
        if ORDER[op.kind] < ORDER[previous.kind]:
            raise PlanError(
                f"{where}: {op!r} cannot follow {previous!r}; order a chain as decode, "
                "transforms, normalize, output, custom ops"
            )
        if op.kind in ("normalize", "output") and op.kind == previous.kind:
            raise PlanError(f"{where}: {op.name} appears twice")
    if ops:
        _decoder_check(where, ops[0], ops[1:])
    normalize = next((op for op in ops if op.kind == "normalize"), None)
    out = next((op for op in ops if op.kind == "output"), None)
    dtype = None if out is None else out.param("dtype")
    if normalize is not None and dtype is not None and not dtype.startswith(("float", "bfloat")):
        raise PlanError(
            f"{where}: normalize produces floats; output(dtype={dtype!r}) would "
            "truncate them: pick float32, float16 or bfloat16, or drop normalize"
        )


def _merge(a: ValueType, b: ValueType) -> ValueType:
    """The type both branches agree on (a dim either side leaves open is open)."""
    if a.objects or b.objects:
        return ValueType(objects=True)
    shape = None
    if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
        shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True))
    dtype = a.dtype if a.dtype == b.dtype else None
    return ValueType(dtype, shape, a.layout if a.layout == b.layout else None)


def _fold(value: ValueType, ops: tuple[Op, ...]) -> ValueType:
    for op in ops:
        if op.kind == "branch":
            value = _merge(_fold(value, op.param("then")), _fold(value, op.param("otherwise")))
        elif op.kind == "custom":
            value = ValueType()  # the user's function decides
        else:
            value = spec(op.name).output(value, op.params_dict())
    return value


def chain_type(ops: tuple[Op, ...]) -> ValueType:
    """The value type a valid chain yields per row (dims the data decides are ``None``).

    Example:
        >>> from dataio import decoders, transforms
        >>> chain_type((decoders.image(), transforms.center_crop(224))).static_shape
        (224, 224, 3)
    """
    return _fold(ValueType(), ops)
