"""The registry's machinery: :class:`OpSpec`, :func:`declare`, and the surfaces built from a spec.

A spec's ``params`` function is the op's one declaration of its parameters: its
signature (names, defaults, types) and docstring are the public ones, and its body
validates the arguments into the op's canonical parameters. Factories, slot methods
and expression methods are generated from it, so they cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, Self, TypeVar

from dataio.exceptions import PlanError
from dataio.plan.ops import Op, OpKind, make_op

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)

#: an op's canonical parameters, as its ``params`` function returns them
Params = dict[str, Any]
Namespace = Literal["decoders", "transforms"]
ExprNamespace = Literal["image", "audio", "tensor", "bin"]


@dataclass(frozen=True)
class ValueType:
    """What a chain yields per row, as far as the plan can tell.

    Attributes:
        dtype: the NumPy dtype name, or ``None`` when the data decides (NPY files).
        shape: the dims in output order (``None`` for a dim the data decides), or
            ``None`` when even the rank is unknown.
        layout: ``"HWC"`` or ``"CHW"`` for images, else ``None``.
        objects: Python objects (a list column), not an array.
    """

    dtype: str | None = None
    shape: tuple[int | None, ...] | None = None
    layout: str | None = None
    objects: bool = False

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The shape when every row has the same one, else ``None``."""
        if self.shape is None or any(d is None for d in self.shape):
            return None
        return tuple(d for d in self.shape if d is not None)


#: a rule giving an op's output type from its input type and parameters
TypeRule = Callable[[ValueType, Params], ValueType]


def same_type(value: ValueType, params: Params) -> ValueType:
    """The rule of ops that keep dtype and shape."""
    return value


@dataclass(frozen=True, eq=False)
class OpSpec(Generic[P]):
    """One op, declared once.

    Attributes:
        name: the op (and kernel) name, e.g. ``"resize_short"``.
        kind: the :class:`~dataio.plan.ops.Op` kind; it fixes the op's place in a chain.
        params: the typed parameter function (see the module docstring).
        factory: the factory's name in :mod:`dataio.decoders` or :mod:`dataio.transforms`.
        method: the ``Slot`` (and chain expression) method name.
        kernel: ``"module:function"`` of the compute in :mod:`dataio.udfs`; the engine
            resolves it. Fused image ops name the fused kernel that interprets them.
        output: the rule for the value type the op yields.
        applies_to: the decoders whose output the op accepts (empty: any).
        random: whether the op draws per record; a string names the bool parameter
            that decides it.
        rng: the kernel takes the record's generator as ``rng=``.
        fused: the op runs inside the fused image kernel rather than on its own.
        objects: a decoder yielding Python objects (a list column).
        rate: a decoder whose kernel returns ``(value, source_rate)``.
        expr: for decoders, the expression namespace and method (``("image", "decode")``).
    """

    name: str
    kind: OpKind
    params: Callable[P, Params | Op]
    factory: str
    method: str
    kernel: str
    output: TypeRule = same_type
    applies_to: tuple[str, ...] = ()
    random: bool | str = False
    rng: bool = False
    fused: bool = False
    objects: bool = False
    rate: bool = False
    expr: tuple[ExprNamespace, str] | None = None
    namespace: Namespace = field(init=False)

    def __post_init__(self) -> None:
        namespace = "decoders" if self.kind == "decode" else "transforms"
        object.__setattr__(self, "namespace", namespace)

    @property
    def doc(self) -> str:
        """The op's docstring (that of its factory)."""
        return inspect.getdoc(self.params) or ""

    @property
    def signature(self) -> inspect.Signature:
        """The factory's signature."""
        return inspect.signature(self.params).replace(return_annotation="Op")

    def op(self, *args: P.args, **kwargs: P.kwargs) -> Op:
        """Validate the arguments and build the op."""
        made = self.params(*args, **kwargs)
        if isinstance(made, Op):  # a torchvision-style form spelling another op
            return made
        random = bool(made[self.random]) if isinstance(self.random, str) else self.random
        return make_op(self.name, self.kind, random=random, applies_to=self.applies_to, **made)

    def __repr__(self) -> str:
        return f"OpSpec({self.name!r}, {self.kind!r})"


_SPECS: dict[str, OpSpec[Any]] = {}


def declare(
    name: str,
    kind: OpKind,
    *,
    kernel: str,
    factory: str | None = None,
    method: str | None = None,
    **options: Any,
) -> Callable[[Callable[P, Params | Op]], OpSpec[P]]:
    """Declare op ``name`` with the decorated parameter function.

    ``factory`` defaults to ``name``, ``method`` to ``name``; ``options`` are the other
    :class:`OpSpec` fields.
    """

    def register(params: Callable[P, Params | Op]) -> OpSpec[P]:
        if name in _SPECS:
            raise PlanError(f"op {name!r} is declared twice")
        spec = OpSpec(
            name, kind, params, factory or name, method or name, kernel, **options
        )  # fmt: skip
        _SPECS[name] = spec
        return spec

    return register


def specs() -> tuple[OpSpec[Any], ...]:
    """Every declared op, in declaration order."""
    return tuple(_SPECS.values())


def spec(name: str) -> OpSpec[Any]:
    """The spec of op ``name``.

    Raises:
        PlanError: no op has that name.
    """
    try:
        return _SPECS[name]
    except KeyError:
        raise PlanError(f"unknown op {name!r}; known ops: {sorted(_SPECS)}") from None


# -- surfaces ------------------------------------------------------------------------------


def _summary(spec: OpSpec[Any]) -> str:
    first = spec.doc.split("\n\n", 1)[0].replace("\n", " ")
    return f"{first}\n\nSee :func:`dataio.{spec.namespace}.{spec.factory}`."


def _method_signature(spec: OpSpec[Any], returns: str) -> inspect.Signature:
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    params = [self_param, *spec.signature.parameters.values()]
    return spec.signature.replace(parameters=params, return_annotation=returns)


def factory(spec: OpSpec[P]) -> Callable[P, Op]:
    """The namespace function of ``spec``: a real function with its signature and docs."""

    def build(*args: P.args, **kwargs: P.kwargs) -> Op:
        return spec.op(*args, **kwargs)

    build.__name__ = build.__qualname__ = spec.factory
    build.__module__ = f"dataio.{spec.namespace}"
    build.__doc__ = spec.doc
    build.__signature__ = spec.signature  # type: ignore[attr-defined]
    return build


class Chainable(Protocol):
    """A chain value that appends ops: a ``Slot``, a ``Chain`` or a chain expression."""

    def then(self, *ops: Op) -> Self:
        """Append ops."""
        ...


T = TypeVar("T", bound=Chainable)


def chain_method(spec: OpSpec[P]) -> Callable[Concatenate[T, P], T]:
    """A method appending ``spec``'s op to a chain value (``Slot``, chain expression)."""

    def method(self: T, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.then(spec.op(*args, **kwargs))

    method.__name__ = method.__qualname__ = spec.method
    method.__doc__ = _summary(spec)
    method.__signature__ = _method_signature(spec, "Self")  # type: ignore[attr-defined]
    return method


class Starts(Protocol[R_co]):
    """An expression namespace: starts a chain expression with a decoder op."""

    def start(self, op: Op) -> R_co:
        """A chain expression holding ``op``."""
        ...


def decoder_method(spec: OpSpec[P]) -> Callable[Concatenate[Starts[R_co], P], R_co]:
    """A namespace method starting a chain expression with decoder ``spec``."""
    if spec.expr is None:
        raise PlanError(f"{spec.name} has no expression namespace")

    def method(self: Starts[R_co], /, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.start(spec.op(*args, **kwargs))

    method.__name__ = method.__qualname__ = spec.expr[1]
    method.__doc__ = _summary(spec)
    method.__signature__ = _method_signature(spec, "ChainExpr")  # type: ignore[attr-defined]
    return method
