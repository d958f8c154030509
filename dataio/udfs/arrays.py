"""Per-record image array kernels on ``(height, width, channels)`` arrays.

Inputs are ``uint8`` (values 0..255) or floating (values in [0, 1] where a range
matters, as torchvision takes float images); outputs keep the input dtype unless a
function says otherwise. Color jitter follows torchvision's ``ColorJitter`` and its
functional tensor ops, including their truncation when results go back to ``uint8``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from dataio import limits
from dataio.exceptions import PlanError, TransformError

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "color_jitter",
    "grayscale",
    "jitter_params",
    "pad",
    "rotate90",
    "standardize",
    "to_dtype",
]

DType = Literal[
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
]  # fmt: skip
_DTYPES: tuple[str, ...] = DType.__args__  # type: ignore[attr-defined]
# torchvision's rgb_to_grayscale weights, used by contrast and saturation.
_TV_LUMA = (0.2989, 0.587, 0.114)


def _hwc(x: np.ndarray, op: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 3:
        raise TransformError(
            f"{op} takes a (height, width, channels) image, got shape {x.shape}; "
            "decode images with a channel axis (HWC layout)"
        )
    return x


def _non_negative(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise PlanError(f"pad {name} must be a non-negative integer, got {value!r}")
    return int(value)


def pad(
    x: np.ndarray,
    *,
    top: int,
    bottom: int,
    left: int,
    right: int,
    value: float | Sequence[float] = 0,
) -> np.ndarray:
    """Pad an HWC image with a constant: one value, or one per channel.

    Raises:
        TransformError: the value is not numbers, does not fit the dtype, or has the
            wrong channel count.
        LimitError: the padded image would be over ``max_decoded_bytes``.

    Example:
        >>> pad(np.zeros((2, 2, 3), np.uint8), top=1, bottom=0, left=0, right=2).shape
        (3, 4, 3)
    """
    x = _hwc(x, "pad")
    top, bottom = _non_negative(top, "top"), _non_negative(bottom, "bottom")
    left, right = _non_negative(left, "left"), _non_negative(right, "right")
    try:
        fill = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:  # "red", [1, [2]], 10**400
        raise TransformError(
            f"pad value must be one number or one per channel, got {value!r}"
        ) from exc
    if fill.ndim > 1 or (fill.ndim == 1 and fill.shape[0] not in (1, x.shape[2])):
        raise TransformError(
            f"pad value must be one number or {x.shape[2]} (one per channel), got {value!r}"
        )
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        if (fill < info.min).any() or (fill > info.max).any() or (fill != np.round(fill)).any():
            raise TransformError(
                f"pad value {value!r} does not fit {x.dtype} (integers {info.min}..{info.max})"
            )
    height, width, channels = x.shape
    shape = (height + top + bottom, width + left + right, channels)
    limits.check(
        "max_decoded_bytes",
        shape[0] * shape[1] * channels * x.dtype.itemsize,
        what=f"pad of a {height}x{width} image to {shape[0]}x{shape[1]}",
    )
    out = np.empty((height + top + bottom, width + left + right, channels), x.dtype)
    out[...] = fill.astype(x.dtype)
    out[top : top + height, left : left + width] = x
    return out


def rotate90(x: np.ndarray, k: int = 1) -> np.ndarray:
    """Rotate an HWC image by ``k`` quarter turns counter-clockwise (``np.rot90``).

    Example:
        >>> rotate90(np.zeros((2, 5, 3), np.uint8)).shape
        (5, 2, 3)
    """
    x = _hwc(x, "rotate90")
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise PlanError(f"rotate90 k must be an integer number of quarter turns, got {k!r}")
    return np.ascontiguousarray(np.rot90(x, int(k), axes=(0, 1)))


def grayscale(x: np.ndarray, channels: Literal[1, 3] = 1) -> np.ndarray:
    """ITU-R 601-2 luma, ``L = 0.299 R + 0.587 G + 0.114 B``, as Pillow's ``convert("L")``.

    ``uint8`` images round exactly as Pillow does; an alpha channel is ignored and a
    one-channel image is already gray. ``channels=3`` repeats the luma.

    Example:
        >>> grayscale(np.full((1, 1, 3), 255, np.uint8))[0, 0]
        array([255], dtype=uint8)
    """
    x = _hwc(x, "grayscale")
    if channels not in (1, 3):
        raise PlanError(f"grayscale channels must be 1 or 3, got {channels!r}")
    if x.shape[2] == 1:
        luma = x
    elif x.shape[2] in (3, 4):
        if x.dtype == np.uint8:
            # Pillow's fixed point: the weights times 2**16, rounded at the half.
            r, g, b = (x[..., i : i + 1].astype(np.uint32) for i in range(3))
            acc = r * 19595 + g * 38470 + b * 7471 + 0x8000
            luma = (acc >> 16).astype(np.uint8)
        else:
            r, g, b = x[..., 0:1], x[..., 1:2], x[..., 2:3]
            luma = (r * 0.299 + g * 0.587 + b * 0.114).astype(x.dtype)
    else:
        raise TransformError(
            f"grayscale takes 1, 3 or 4 channels (gray, RGB, RGBA), got {x.shape[2]}"
        )
    return np.repeat(luma, channels, axis=2) if channels == 3 else np.ascontiguousarray(luma)


# -- color jitter (torchvision's functional tensor ops) ---------------------------------


def _bound(x: np.ndarray) -> float:
    return 255.0 if x.dtype == np.uint8 else 1.0


def _back(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # torch's float -> uint8 conversion truncates toward zero; values are clamped first.
    return values.astype(dtype)


def _blend(x: np.ndarray, other: np.ndarray | np.float32, ratio: float) -> np.ndarray:
    mixed = np.float32(ratio) * x.astype(np.float32) + np.float32(1.0 - ratio) * other
    return _back(np.clip(mixed, 0.0, _bound(x)), x.dtype)


def _tv_gray(x: np.ndarray) -> np.ndarray:
    """torchvision's ``rgb_to_grayscale`` (truncated to ``uint8`` for ``uint8`` input)."""
    r, g, b = (x[..., i : i + 1].astype(np.float32) for i in range(3))
    luma = np.float32(_TV_LUMA[0]) * r + np.float32(_TV_LUMA[1]) * g + np.float32(_TV_LUMA[2]) * b
    return luma.astype(x.dtype)


def _rgb_or_gray(x: np.ndarray, op: str) -> np.ndarray:
    x = _hwc(x, op)
    if x.shape[2] not in (1, 3):
        raise TransformError(f"{op} takes 1 or 3 channels, got {x.shape[2]}")
    return x


def adjust_brightness(x: np.ndarray, factor: float) -> np.ndarray:
    """Multiply by ``factor``, clamped to the dtype's range (0 gives black)."""
    x = _rgb_or_gray(x, "adjust_brightness")
    return _blend(x, np.float32(0.0), factor)


def adjust_contrast(x: np.ndarray, factor: float) -> np.ndarray:
    """Blend with the image's mean gray level (0 gives a flat gray image)."""
    x = _rgb_or_gray(x, "adjust_contrast")
    gray = _tv_gray(x) if x.shape[2] == 3 else x
    mean = np.float32(gray.astype(np.float32).mean(dtype=np.float64))
    return _blend(x, mean, factor)


def adjust_saturation(x: np.ndarray, factor: float) -> np.ndarray:
    """Blend with the grayscale image (0 gives gray); one-channel images are unchanged."""
    x = _rgb_or_gray(x, "adjust_saturation")
    if x.shape[2] == 1:
        return x
    return _blend(x, _tv_gray(x).astype(np.float32), factor)


def _rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    maxc = rgb.max(axis=-1)
    minc = rgb.min(axis=-1)
    flat = maxc == minc
    chroma = maxc - minc
    one = np.float32(1.0)
    s = chroma / np.where(flat, one, maxc)
    divisor = np.where(flat, one, chroma)
    rc, gc, bc = (maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor
    is_r, is_g = maxc == r, (maxc == g) & (maxc != r)
    is_b = (maxc != g) & (maxc != r)
    h = is_r * (bc - gc) + is_g * (2.0 + rc - bc) + is_b * (4.0 + gc - rc)
    h = np.fmod(h / np.float32(6.0) + one, one)
    return np.stack([h, s, maxc], axis=-1).astype(np.float32)


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    i = np.floor(h * np.float32(6.0))
    f = h * np.float32(6.0) - i
    sector = i.astype(np.int32) % 6
    p = np.clip(v * (1.0 - s), 0.0, 1.0)
    q = np.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = np.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.empty((*h.shape, 3), np.float32)
    for channel in range(3):
        out[..., channel] = np.choose(sector, [c[channel] for c in choices])
    return out


def adjust_hue(x: np.ndarray, factor: float) -> np.ndarray:
    """Rotate the hue by ``factor`` turns (in [-0.5, 0.5]); one-channel images are unchanged."""
    x = _rgb_or_gray(x, "adjust_hue")
    if not -0.5 <= factor <= 0.5:
        raise PlanError(f"hue factor must be in [-0.5, 0.5], got {factor!r}")
    if x.shape[2] == 1:
        return x
    rgb = x.astype(np.float32) / np.float32(255.0) if x.dtype == np.uint8 else x.astype(np.float32)
    hsv = _rgb_to_hsv(rgb)
    hsv[..., 0] = np.mod(hsv[..., 0] + np.float32(factor), np.float32(1.0))
    out = _hsv_to_rgb(hsv)
    if x.dtype == np.uint8:
        # torchvision's convert_image_dtype: scale by 256 - 1e-3, then truncate.
        return (out * np.float32(255.999)).astype(np.uint8)
    return out.astype(x.dtype)


def _jitter_range(value: float, name: str) -> tuple[float, float] | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PlanError(f"color_jitter {name} must be a non-negative number, got {value!r}")
    if name == "hue":
        if value > 0.5:
            raise PlanError(f"color_jitter hue must be in [0, 0.5], got {value!r}")
        return (-float(value), float(value)) if value else None
    return (max(0.0, 1.0 - value), 1.0 + value) if value else None


def jitter_params(
    rng: np.random.Generator,
    *,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    hue: float = 0.0,
) -> list[tuple[str, float]]:
    """Draw ColorJitter's adjustments: ``[(name, factor), ...]`` in the order to apply.

    As torchvision: first a random order of the four adjustments, then one factor for
    each non-zero setting (brightness, contrast, saturation, hue in that order), uniform
    in ``[max(0, 1 - v), 1 + v]`` (``[-h, h]`` for hue). Zero settings are skipped.
    """
    names = ("brightness", "contrast", "saturation", "hue")
    values = (brightness, contrast, saturation, hue)
    ranges = [_jitter_range(v, n) for v, n in zip(values, names, strict=True)]
    order = rng.permutation(4)
    factors = [None if r is None else float(rng.uniform(r[0], r[1])) for r in ranges]
    return [(names[i], f) for i in order if (f := factors[i]) is not None]


_ADJUST = {
    "brightness": adjust_brightness,
    "contrast": adjust_contrast,
    "saturation": adjust_saturation,
    "hue": adjust_hue,
}


def color_jitter(
    x: np.ndarray,
    rng: np.random.Generator,
    *,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    hue: float = 0.0,
) -> np.ndarray:
    """torchvision's ``ColorJitter``, drawing its order and factors from ``rng``.

    Example:
        >>> color_jitter(image, np.random.default_rng(0), brightness=0.4, hue=0.1)
    """
    x = _rgb_or_gray(x, "color_jitter")
    params = jitter_params(
        rng, brightness=brightness, contrast=contrast, saturation=saturation, hue=hue
    )
    for name, factor in params:
        x = _ADJUST[name](x, factor)
    return x


# -- dtype and normalization ------------------------------------------------------------


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype named ``name``; ``"bfloat16"`` comes from ``ml_dtypes``.

    Raises:
        PlanError: ``name`` is not a dtype dataio casts to, or bfloat16 without ml_dtypes.
    """
    if name not in _DTYPES:
        raise PlanError(f"dtype must be one of {list(_DTYPES)}, got {name!r}")
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise PlanError(
                "bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)"
            ) from exc
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def to_dtype(x: np.ndarray, dtype: DType, *, scale: bool = False) -> np.ndarray:
    """Cast to one of :data:`DType` (bool, integer and float types, bfloat16 included).

    ``uint8`` keeps pixel semantics: values are clipped to 0..255 and rounded, and with
    ``scale=True`` uint8 0..255 maps to floats 0..1 and back. Other integer targets cast
    as NumPy and torch do (floats truncate toward zero) but refuse values they cannot
    hold instead of wrapping them; ``bool`` is ``x != 0``.

    Raises:
        TransformError: a value is NaN, infinite or out of the integer target's range.

    Example:
        >>> to_dtype(np.array([[[0, 255]]], np.uint8), "float32", scale=True)
        array([[[0., 1.]]], dtype=float32)
    """
    target = numpy_dtype(dtype)
    x = np.asarray(x)
    if x.dtype == target:
        return x
    if target == np.uint8:
        values = x.astype(np.float32)
        if scale and np.issubdtype(x.dtype, np.floating):
            values = values * np.float32(255.0)
        return np.rint(np.clip(values, 0.0, 255.0)).astype(np.uint8)
    if scale and x.dtype == np.uint8 and dtype in ("float16", "bfloat16", "float32", "float64"):
        return (x.astype(np.float32) * np.float32(1.0 / 255.0)).astype(target)
    if np.issubdtype(target, np.integer) and x.size:
        _check_range(x, target)
    return x.astype(target)


def _check_range(x: np.ndarray, target: np.dtype) -> None:
    info = np.iinfo(target)
    if x.dtype == np.bool_:
        return
    if not np.issubdtype(x.dtype, np.integer):
        x = np.asarray(x, np.float64)
        if not np.isfinite(x).all():
            raise TransformError(f"to_dtype {target.name}: the array holds NaN or infinity")
        x = np.trunc(x)
    low, high = x.min(), x.max()
    if low < info.min or high > info.max:
        raise TransformError(
            f"to_dtype {target.name}: values {low}..{high} do not fit in [{info.min}, "
            f"{info.max}]; clip them first or pick a wider type"
        )


def standardize(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Per-channel ``(x - mean) / max(std, eps)`` over one image's pixels; float32.

    Example:
        >>> standardize(np.array([[[0.0], [2.0]]])).ravel()
        array([-1.,  1.], dtype=float32)
    """
    x = _hwc(x, "standardize")
    values = x.astype(np.float64)
    mean = values.mean(axis=(0, 1), keepdims=True)
    std = np.maximum(values.std(axis=(0, 1), keepdims=True), eps)
    return ((values - mean) / std).astype(np.float32)
