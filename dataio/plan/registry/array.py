"""Array ops on any decoded array (casts, standardization) and audio ops."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from dataio.exceptions import PlanError
from dataio.plan.ops import ARRAYS, AUDIO_ONLY, choice, flag, non_negative, positive_int
from dataio.plan.registry._spec import Params, ValueType, declare, same_type
from dataio.plan.registry.image import DTYPES

#: array cast targets of :func:`to_dtype`
CAST_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", *DTYPES[4:])
CastDType = Literal[
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
]  # fmt: skip


def _cast(value: ValueType, p: Params) -> ValueType:
    return replace(value, dtype=p["dtype"])


def _float32(value: ValueType, p: Params) -> ValueType:
    return replace(value, dtype="float32")


def _fixed_length(value: ValueType, p: Params) -> ValueType:
    if value.shape is None:
        return value
    return replace(value, shape=(p["length"], *value.shape[1:]))


@declare("to_dtype", "array", kernel="dataio.udfs.arrays:to_dtype", applies_to=ARRAYS, output=_cast)
def to_dtype(dtype: CastDType, *, scale: bool = False) -> Params:
    """Cast the decoded array; ``scale=True`` maps uint8 0..255 to and from float 0..1.

    Targets: ``bool``, ``uint8`` (clipped and rounded, as for pixels), ``int8`` to
    ``int64`` (floats truncate toward zero as in NumPy and torch; values that do not fit
    raise instead of wrapping), ``float16``, ``bfloat16`` (needs ml_dtypes), ``float32``
    and ``float64``.

    Example:
        >>> dataio.transforms.to_dtype("float32", scale=True)
        to_dtype(dtype='float32', scale=True)
    """
    return {
        "dtype": choice(dtype, CAST_DTYPES, "to_dtype dtype"),
        "scale": flag(scale, "to_dtype scale"),
    }


@declare(
    "standardize",
    "array",
    kernel="dataio.udfs.arrays:standardize",
    applies_to=ARRAYS,
    output=_float32,
)
def standardize(*, eps: float = 1e-6) -> Params:
    """Per-sample normalization: subtract each channel's mean, divide by its std.

    Example:
        >>> dataio.transforms.standardize()
        standardize(eps=1e-06)
    """
    return {"eps": non_negative(eps, "standardize eps")}


@declare(
    "fix_length",
    "array",
    kernel="dataio.udfs.audio:fix_length",
    applies_to=AUDIO_ONLY,
    random="random_crop",
    rng=True,
    output=_fixed_length,
)
def fix_length(length: int, *, random_crop: bool = False, pad_value: float = 0.0) -> Params:
    """Crop or pad audio (axis 0) to exactly ``length`` samples.

    Longer clips are cropped in the middle, or at a per-record random offset with
    ``random_crop=True``; shorter ones are padded at the end with ``pad_value``.

    Example:
        >>> dataio.transforms.fix_length(16000)
        fix_length(length=16000, pad_value=0.0, random_crop=False)
    """
    if isinstance(pad_value, bool) or not isinstance(pad_value, int | float):
        raise PlanError(f"fix_length pad_value must be a number, got {pad_value!r}")
    return {
        "length": positive_int(length, "fix_length length"),
        "random_crop": flag(random_crop, "fix_length random_crop"),
        "pad_value": float(pad_value),
    }


@declare("gain", "array", kernel="dataio.udfs.audio:gain", applies_to=AUDIO_ONLY, output=same_type)
def gain(db: float) -> Params:
    """Scale audio by ``db`` decibels.

    Example:
        >>> dataio.transforms.gain(-6.0)
        gain(db=-6.0)
    """
    if isinstance(db, bool) or not isinstance(db, int | float):
        raise PlanError(f"gain db must be a number, got {db!r}")
    return {"db": float(db)}
