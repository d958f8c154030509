"""Plan nodes for slot operations: immutable descriptions, no compute.

Every op a slot chain can hold is an :class:`Op`: a name, a kind and its parameters.
The factories in :mod:`dataio.decoders` and :mod:`dataio.transforms` build them; the
engine lowers a chain of them into one fused kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dataio.exceptions import PlanError

OpKind = Literal["decode", "geometry", "array", "branch", "normalize", "output", "custom", "batch"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Op:
    """One operation of a slot chain.

    Attributes:
        name: the kernel name, e.g. ``"resize_short"``.
        kind: ``"decode"`` (bytes to array), ``"geometry"`` (resampling, crops, flips),
            ``"array"`` (any other per-record op on the decoded value), ``"branch"``
            (``when/then/otherwise``), ``"normalize"``, ``"output"`` (dtype and layout of
            an image tensor), ``"custom"`` (a batch-level :func:`dataio.custom_op`) or
            ``"batch"`` (a batch transform after the shape stage).
        params: the parameters as sorted ``(name, value)`` pairs of plain values.
        random: whether the op draws from the per-record random generator.
        applies_to: the decoders whose output this op accepts (empty: any).
        fn: the Python function of a custom op (not part of equality or signatures;
            its name and version are).
    """

    name: str
    kind: OpKind
    params: tuple[tuple[str, Any], ...] = ()
    random: bool = False
    applies_to: tuple[str, ...] = field(default=(), compare=False)
    fn: Any = field(default=None, compare=False, repr=False)

    def param(self, name: str) -> Any:
        """Return the value of parameter ``name``."""
        return dict(self.params)[name]

    def params_dict(self) -> dict[str, Any]:
        """The parameters as a dict."""
        return dict(self.params)

    def __call__(self, value: Any) -> Any:
        """Apply a custom op's function (so one can also serve as a ``map_records`` fn)."""
        if self.fn is None:
            raise PlanError(f"{self.name} is a plan node; only custom ops can be called")
        return self.fn(value, **dict(self.param("params")))

    def describe(self) -> dict[str, Any]:
        """Return a JSON-ready description, used by signatures and ``explain()``."""
        return {"op": self.name, **{k: _plain(v) for k, v in self.params}}

    def __repr__(self) -> str:
        if self.kind == "branch":
            then = ", ".join(repr(op) for op in self.param("then"))
            text = f"when({self.param('pred')!r}).then({then})"
            if self.param("otherwise"):
                text += f".otherwise({', '.join(repr(op) for op in self.param('otherwise'))})"
            return text
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.name}({args})"


IMAGE_ONLY = ("decode_image",)
AUDIO_ONLY = ("decode_audio",)
ARRAYS = ("decode_image", "decode_audio", "decode_numpy", "decode_safetensors")


def make_op(
    name: str,
    kind: OpKind,
    *,
    random: bool = False,
    applies_to: tuple[str, ...] = (),
    **params: Any,
) -> Op:
    """Build an :class:`Op` with its parameters in a canonical order."""
    return Op(name, kind, tuple(sorted(params.items())), random, applies_to)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "describe"):  # nested ops and predicates
        return value.describe()
    return value


def positive_int(value: Any, what: str) -> int:
    """Validate a strictly positive integer parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"{what} must be a positive integer, got {value!r}")
    return value


def non_negative_int(value: object, what: str) -> int:
    """Validate an integer parameter >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def non_negative(value: object, what: str) -> float:
    """Validate a number parameter >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise PlanError(f"{what} must be a non-negative number, got {value!r}")
    return float(value)


def flag(value: object, what: str) -> bool:
    """Validate a ``True``/``False`` option."""
    if not isinstance(value, bool):
        raise PlanError(f"{what} must be True or False, got {value!r}")
    return value


def probability(value: Any, what: str) -> float:
    """Validate a probability in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PlanError(f"{what} must be a number in [0, 1], got {value!r}")
    return float(value)


def float_pair(value: Any, what: str, *, positive: bool = True) -> tuple[float, float]:
    """Validate an ordered ``(low, high)`` pair of numbers."""
    if (
        not isinstance(value, Sequence)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise PlanError(f"{what} must be a (low, high) pair of numbers, got {value!r}")
    low, high = float(value[0]), float(value[1])
    if low > high or (positive and low <= 0):
        raise PlanError(f"{what} must satisfy 0 < low <= high, got {value!r}")
    return low, high


def channel_values(value: Any, what: str) -> tuple[float, ...]:
    """Validate per-channel statistics (a number or a sequence of numbers)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (float(value),)
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) > 0
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        return tuple(float(v) for v in value)
    raise PlanError(f"{what} must be a number or a sequence of numbers, got {value!r}")


def choice(value: Any, allowed: Sequence[str], what: str) -> str:
    """Validate a string option against its allowed values."""
    if value not in allowed:
        raise PlanError(f"{what} must be one of {list(allowed)}, got {value!r}")
    return str(value)
