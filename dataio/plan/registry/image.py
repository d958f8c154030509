"""Image ops: geometry (fused into one resample), pixel ops, normalize, output layout.

Sizes take what torchvision users write: ``resize(224)`` resizes the short side (as
``transforms.Resize(224)``), ``resize((h, w))`` / ``center_crop(224)`` /
``center_crop((h, w))`` are exact, alongside the ``h=, w=`` keywords. Every spelling
builds the same canonical op, so plan signatures do not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from dataio.exceptions import PlanError
from dataio.plan.ops import (
    IMAGE_ONLY,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Op,
    channel_values,
    choice,
    float_pair,
    non_negative,
    non_negative_int,
    positive_int,
    probability,
)
from dataio.plan.registry._spec import Params, ValueType, declare

Layout = Literal["HWC", "CHW"]
LAYOUTS = ("HWC", "CHW")
#: image output dtypes: uint8 and wider integers hold pixels, floats also normalized ones
DTYPES = ("uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
OutputDType = Literal[
    "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"
]
NORMALIZE_PRESETS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD)}
#: a torchvision size: one int (a square, or the short side for ``resize``) or ``(h, w)``
Size = int | tuple[int, int] | Sequence[int]

FUSED = "dataio.udfs.image:run_chain"


# -- sizes ---------------------------------------------------------------------------------


def _height_width(op: str, size: Size | None, h: int | None, w: int | None) -> tuple[int, int]:
    """``(h, w)`` from a torchvision size or the ``h=, w=`` keywords."""
    if size is not None:
        if h is not None or w is not None:
            raise PlanError(f"{op} takes a size or h= and w=, not both (got size={size!r})")
        if isinstance(size, int) and not isinstance(size, bool):
            side = positive_int(size, f"{op} size")
            return side, side
        if isinstance(size, Sequence) and not isinstance(size, str) and len(size) == 2:
            return positive_int(size[0], f"{op} h"), positive_int(size[1], f"{op} w")
        raise PlanError(f"{op} size must be an int or an (h, w) pair of ints, got {size!r}")
    if h is None or w is None:
        raise PlanError(f"{op} needs a size (224 or (h, w)) or both h= and w=")
    return positive_int(h, f"{op} h"), positive_int(w, f"{op} w")


# -- type rules ----------------------------------------------------------------------------


def _hwc(value: ValueType) -> tuple[int | None, int | None, int | None]:
    if value.shape is None or len(value.shape) != 3:
        return None, None, None
    if value.layout == "CHW":
        c, h, w = value.shape
        return h, w, c
    h, w, c = value.shape
    return h, w, c


def _image(
    value: ValueType,
    h: int | None,
    w: int | None,
    c: int | None,
    *,
    dtype: str | None = None,
    layout: str | None = None,
) -> ValueType:
    layout = layout or value.layout or "HWC"
    shape = (c, h, w) if layout == "CHW" else (h, w, c)
    return ValueType(dtype or value.dtype, shape, layout)


def _sized(value: ValueType, p: Params) -> ValueType:
    return _image(value, p["h"], p["w"], _hwc(value)[2])


def _short_side(value: ValueType, p: Params) -> ValueType:
    return _image(value, None, None, _hwc(value)[2])  # the long side follows the aspect


def _padded(value: ValueType, p: Params) -> ValueType:
    h, w, c = _hwc(value)
    h = None if h is None else h + p["top"] + p["bottom"]
    w = None if w is None else w + p["left"] + p["right"]
    return _image(value, h, w, c)


def _rotated(value: ValueType, p: Params) -> ValueType:
    h, w, c = _hwc(value)
    return _image(value, w, h, c) if p["k"] % 2 else value


def _gray(value: ValueType, p: Params) -> ValueType:
    h, w, _ = _hwc(value)
    return _image(value, h, w, p["channels"])


def _normalized(value: ValueType, p: Params) -> ValueType:
    return _image(value, *_hwc(value), dtype="float32", layout=p["layout"])


def _output(value: ValueType, p: Params) -> ValueType:
    return _image(value, *_hwc(value), dtype=p["dtype"], layout=p["layout"])


def _same_image(value: ValueType, p: Params) -> ValueType:
    return replace(value)


# -- geometry ------------------------------------------------------------------------------


@declare(
    "resize_short",
    "geometry",
    kernel=FUSED,
    fused=True,
    applies_to=IMAGE_ONLY,
    output=_short_side,
)
def resize_short(size: int) -> Params:
    """Resize so the shorter side equals ``size``, keeping the aspect ratio.

    Example:
        >>> dataio.transforms.resize_short(256)
        resize_short(size=256)
    """
    return {"size": positive_int(size, "resize_short size")}


@declare("resize", "geometry", kernel=FUSED, fused=True, applies_to=IMAGE_ONLY, output=_sized)
def resize(size: Size | None = None, *, h: int | None = None, w: int | None = None) -> Params | Op:
    """Resize like torchvision: ``resize(224)`` sets the short side, ``resize((h, w))``
    (or ``h=, w=``) resizes to exactly ``h`` x ``w`` (aspect ratio may change).

    Antialiased bilinear. ``resize(n)`` is :func:`resize_short` ``(n)``, the same op.

    Example:
        >>> dataio.transforms.resize(h=224, w=224)
        resize(h=224, w=224)
        >>> dataio.transforms.resize(256)
        resize_short(size=256)
    """
    if isinstance(size, int) and not isinstance(size, bool) and h is None and w is None:
        return resize_short.op(size)
    height, width = _height_width("resize", size, h, w)
    return {"h": height, "w": width}


@declare("center_crop", "geometry", kernel=FUSED, fused=True, applies_to=IMAGE_ONLY, output=_sized)
def center_crop(size: Size | None = None, *, h: int | None = None, w: int | None = None) -> Params:
    """Crop the central ``h`` x ``w`` window (the image must be at least that large).

    ``center_crop(224)`` is a square window, ``center_crop((h, w))`` = ``h=, w=``.

    Example:
        >>> dataio.transforms.center_crop(h=224, w=224)
        center_crop(h=224, w=224)
    """
    height, width = _height_width("center_crop", size, h, w)
    return {"h": height, "w": width}


@declare(
    "random_crop",
    "geometry",
    kernel=FUSED,
    fused=True,
    applies_to=IMAGE_ONLY,
    random=True,
    output=_sized,
)
def random_crop(size: Size | None = None, *, h: int | None = None, w: int | None = None) -> Params:
    """Crop an ``h`` x ``w`` window at a position drawn per record.

    ``random_crop(32)`` is a square window, ``random_crop((h, w))`` = ``h=, w=``.

    Example:
        >>> dataio.transforms.random_crop(h=32, w=32)
        random_crop(h=32, w=32)
    """
    height, width = _height_width("random_crop", size, h, w)
    return {"h": height, "w": width}


@declare(
    "random_resized_crop",
    "geometry",
    kernel=FUSED,
    fused=True,
    applies_to=IMAGE_ONLY,
    random=True,
    output=_sized,
)
def random_resized_crop(
    size: Size | None = None,
    *,
    h: int | None = None,
    w: int | None = None,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
) -> Params:
    """Crop a random area fraction ``scale`` with aspect ``ratio``, resized to ``h`` x ``w``.

    The window is drawn like torchvision's ``RandomResizedCrop`` (ten tries, then a
    central crop clamped to ``ratio``), from the per-record generator.
    ``random_resized_crop(224)`` is a square output, ``(h, w)`` = ``h=, w=``.

    Example:
        >>> dataio.transforms.random_resized_crop(h=224, w=224, scale=(0.5, 1.0))
        random_resized_crop(h=224, ratio=(0.75, 1.3333333333333333), scale=(0.5, 1.0), w=224)
    """
    height, width = _height_width("random_resized_crop", size, h, w)
    low, high = float_pair(scale, "random_resized_crop scale")
    if high > 1:
        raise PlanError(f"random_resized_crop scale must lie in (0, 1], got {tuple(scale)!r}")
    return {
        "h": height,
        "w": width,
        "scale": (low, high),
        "ratio": float_pair(ratio, "random_resized_crop ratio"),
    }


@declare(
    "random_flip",
    "geometry",
    kernel=FUSED,
    fused=True,
    applies_to=IMAGE_ONLY,
    random=True,
    output=_same_image,
)
def random_flip(
    *, p: float = 0.5, direction: Literal["horizontal", "vertical"] = "horizontal"
) -> Params:
    """Mirror the image with probability ``p`` along ``direction``.

    Example:
        >>> dataio.transforms.random_flip(p=0.5)
        random_flip(direction='horizontal', p=0.5)
    """
    return {
        "p": probability(p, "random_flip p"),
        "direction": choice(direction, ("horizontal", "vertical"), "random_flip direction"),
    }


# -- normalize and output ------------------------------------------------------------------


@declare(
    "normalize",
    "normalize",
    kernel="dataio.udfs.image:write_pixels",
    fused=True,
    applies_to=IMAGE_ONLY,
    output=_normalized,
)
def normalize(
    preset: Literal["imagenet"] | None = None,
    *,
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    layout: Layout = "CHW",
) -> Params:
    """Scale pixels to [0, 1], subtract ``mean`` and divide by ``std`` per channel.

    The result is ``float32`` in ``layout`` (``"CHW"`` by default, like torchvision's
    ``ToTensor`` + ``Normalize``). Pass a preset name or both ``mean`` and ``std``.

    Example:
        >>> dataio.transforms.normalize("imagenet").param("layout")
        'CHW'
    """
    if preset is not None:
        if mean is not None or std is not None:
            raise PlanError("normalize takes a preset name or mean=/std=, not both")
        if preset not in NORMALIZE_PRESETS:
            raise PlanError(
                f"unknown normalize preset {preset!r}; known presets: {sorted(NORMALIZE_PRESETS)}"
            )
        mean, std = NORMALIZE_PRESETS[preset]
    if mean is None or std is None:
        raise PlanError('normalize needs a preset ("imagenet") or both mean= and std=')
    means, stds = channel_values(mean, "normalize mean"), channel_values(std, "normalize std")
    if len(means) != len(stds):
        raise PlanError(f"normalize mean and std differ in length: {means!r} vs {stds!r}")
    if any(s <= 0 for s in stds):
        raise PlanError(f"normalize std must be positive, got {stds!r}")
    return {"mean": means, "std": stds, "layout": choice(layout, LAYOUTS, "layout")}


@declare(
    "output",
    "output",
    kernel="dataio.udfs.image:write_pixels",
    fused=True,
    applies_to=IMAGE_ONLY,
    output=_output,
)
def output(*, dtype: OutputDType | None = None, layout: Layout | None = None) -> Params:
    """Choose the slot tensor's dtype and layout.

    Without ``normalize`` a decoded image leaves as ``uint8`` HWC; ask for ``"CHW"`` to
    move normalization to the GPU on a compact, channel-first tensor. Other dtypes
    without ``normalize`` keep the 0-255 pixel values (``int16``..``int64``, floats);
    after ``normalize`` only float dtypes apply (``float16``/``bfloat16`` halve the
    batch; they are computed in float32 and rounded once). ``bfloat16`` needs ml_dtypes.

    Example:
        >>> dataio.transforms.output(dtype="uint8", layout="CHW")
        output(dtype='uint8', layout='CHW')
    """
    if dtype is None and layout is None:
        raise PlanError("output needs dtype= or layout=")
    return {
        "dtype": None if dtype is None else choice(dtype, DTYPES, "output dtype"),
        "layout": None if layout is None else choice(layout, LAYOUTS, "output layout"),
    }


# -- pixel ops -----------------------------------------------------------------------------


@declare("pad", "array", kernel="dataio.udfs.arrays:pad", applies_to=IMAGE_ONLY, output=_padded)
def pad(
    *, top: int = 0, bottom: int = 0, left: int = 0, right: int = 0, value: float = 0
) -> Params:
    """Pad an image's borders with a constant ``value``.

    Example:
        >>> dataio.transforms.pad(top=4, bottom=4, left=4, right=4)
        pad(bottom=4, left=4, right=4, top=4, value=0)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"pad value must be a number, got {value!r}")
    return {
        "value": value,
        "top": non_negative_int(top, "pad top"),
        "bottom": non_negative_int(bottom, "pad bottom"),
        "left": non_negative_int(left, "pad left"),
        "right": non_negative_int(right, "pad right"),
    }


@declare(
    "rotate90",
    "array",
    kernel="dataio.udfs.arrays:rotate90",
    applies_to=IMAGE_ONLY,
    output=_rotated,
)
def rotate90(k: int = 1) -> Params:
    """Rotate an image by ``k`` quarter turns counter-clockwise.

    Example:
        >>> dataio.transforms.rotate90(2)
        rotate90(k=2)
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise PlanError(f"rotate90 k must be an integer, got {k!r}")
    return {"k": k % 4}


@declare(
    "grayscale",
    "array",
    kernel="dataio.udfs.arrays:grayscale",
    applies_to=IMAGE_ONLY,
    output=_gray,
)
def grayscale(*, channels: int = 1) -> Params:
    """Convert an RGB image to luma (ITU-R 601-2, as Pillow), with 1 or 3 channels.

    Example:
        >>> dataio.transforms.grayscale(channels=3)
        grayscale(channels=3)
    """
    if channels not in (1, 3):
        raise PlanError(f"grayscale channels must be 1 or 3, got {channels!r}")
    return {"channels": channels}


@declare(
    "color_jitter",
    "array",
    kernel="dataio.udfs.arrays:color_jitter",
    applies_to=IMAGE_ONLY,
    random=True,
    rng=True,
    output=_same_image,
)
def color_jitter(
    *, brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0, hue: float = 0.0
) -> Params:
    """Randomly change brightness, contrast, saturation and hue, per record.

    Factors are drawn like torchvision's ``ColorJitter``: uniform in
    ``[max(0, 1 - v), 1 + v]`` (hue in ``[-hue, hue]``, at most 0.5), applied in a
    random order.

    Example:
        >>> dataio.transforms.color_jitter(brightness=0.4, contrast=0.4)
        color_jitter(brightness=0.4, contrast=0.4, hue=0.0, saturation=0.0)
    """
    values: dict[str, Any] = {
        "brightness": non_negative(brightness, "color_jitter brightness"),
        "contrast": non_negative(contrast, "color_jitter contrast"),
        "saturation": non_negative(saturation, "color_jitter saturation"),
        "hue": non_negative(hue, "color_jitter hue"),
    }
    if values["hue"] > 0.5:
        raise PlanError(f"color_jitter hue must be in [0, 0.5], got {hue!r}")
    return values
