"""Transform op factories (``dataio.transforms``): geometry, normalization, output layout.

Each function returns a plan node; nothing is computed here. A slot chain fuses its
geometric ops into one resampling step of the source image (see :mod:`dataio.udfs.image`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from dataio.exceptions import PlanError
from dataio.ops import (
    ARRAYS,
    AUDIO_ONLY,
    IMAGE_ONLY,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Op,
    channel_values,
    choice,
    float_pair,
    make_op,
    non_negative,
    non_negative_int,
    positive_int,
    probability,
)

__all__ = [
    "center_crop",
    "color_jitter",
    "fix_length",
    "gain",
    "grayscale",
    "normalize",
    "output",
    "pad",
    "random_crop",
    "random_flip",
    "random_resized_crop",
    "resize",
    "resize_short",
    "rotate90",
    "standardize",
    "to_dtype",
]

Layout = Literal["HWC", "CHW"]
LAYOUTS = ("HWC", "CHW")
#: image output dtypes: uint8 and wider integers hold pixels, floats also normalized ones
DTYPES = ("uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
#: array cast targets of :func:`to_dtype`
CAST_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", *DTYPES[4:])
OutputDType = Literal[
    "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"
]
CastDType = Literal[
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
]  # fmt: skip
NORMALIZE_PRESETS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD)}


def resize(*, h: int, w: int) -> Op:
    """Resize to exactly ``h`` x ``w`` (antialiased bilinear; aspect ratio may change).

    Example:
        >>> dataio.transforms.resize(h=224, w=224)
        resize(h=224, w=224)
    """
    return make_op(
        "resize",
        "geometry",
        applies_to=IMAGE_ONLY,
        h=positive_int(h, "resize h"),
        w=positive_int(w, "resize w"),
    )


def resize_short(size: int) -> Op:
    """Resize so the shorter side equals ``size``, keeping the aspect ratio.

    Example:
        >>> dataio.transforms.resize_short(256)
        resize_short(size=256)
    """
    return make_op(
        "resize_short",
        "geometry",
        applies_to=IMAGE_ONLY,
        size=positive_int(size, "resize_short size"),
    )


def center_crop(*, h: int, w: int) -> Op:
    """Crop the central ``h`` x ``w`` window (the image must be at least that large).

    Example:
        >>> dataio.transforms.center_crop(h=224, w=224)
        center_crop(h=224, w=224)
    """
    return make_op(
        "center_crop",
        "geometry",
        applies_to=IMAGE_ONLY,
        h=positive_int(h, "center_crop h"),
        w=positive_int(w, "center_crop w"),
    )


def random_crop(*, h: int, w: int) -> Op:
    """Crop an ``h`` x ``w`` window at a position drawn per record.

    Example:
        >>> dataio.transforms.random_crop(h=32, w=32)
        random_crop(h=32, w=32)
    """
    return make_op(
        "random_crop",
        "geometry",
        applies_to=IMAGE_ONLY,
        random=True,
        h=positive_int(h, "random_crop h"),
        w=positive_int(w, "random_crop w"),
    )


def random_resized_crop(
    *,
    h: int,
    w: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
) -> Op:
    """Crop a random area fraction ``scale`` with aspect ``ratio``, resized to ``h`` x ``w``.

    The window is drawn like torchvision's ``RandomResizedCrop`` (ten tries, then a
    central crop clamped to ``ratio``), from the per-record generator.

    Example:
        >>> dataio.transforms.random_resized_crop(h=224, w=224, scale=(0.5, 1.0))
        random_resized_crop(h=224, ratio=(0.75, 1.3333333333333333), scale=(0.5, 1.0), w=224)
    """
    low, high = float_pair(scale, "random_resized_crop scale")
    if high > 1:
        raise PlanError(f"random_resized_crop scale must lie in (0, 1], got {tuple(scale)!r}")
    return make_op(
        "random_resized_crop",
        "geometry",
        applies_to=IMAGE_ONLY,
        random=True,
        h=positive_int(h, "random_resized_crop h"),
        w=positive_int(w, "random_resized_crop w"),
        scale=(low, high),
        ratio=float_pair(ratio, "random_resized_crop ratio"),
    )


def random_flip(
    *, p: float = 0.5, direction: Literal["horizontal", "vertical"] = "horizontal"
) -> Op:
    """Mirror the image with probability ``p`` along ``direction``.

    Example:
        >>> dataio.transforms.random_flip(p=0.5)
        random_flip(direction='horizontal', p=0.5)
    """
    return make_op(
        "random_flip",
        "geometry",
        applies_to=IMAGE_ONLY,
        random=True,
        p=probability(p, "random_flip p"),
        direction=choice(direction, ("horizontal", "vertical"), "random_flip direction"),
    )


def normalize(
    preset: Literal["imagenet"] | None = None,
    *,
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    layout: Layout = "CHW",
) -> Op:
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
    return make_op(
        "normalize",
        "normalize",
        applies_to=IMAGE_ONLY,
        mean=means,
        std=stds,
        layout=choice(layout, LAYOUTS, "layout"),
    )


def output(*, dtype: OutputDType | None = None, layout: Layout | None = None) -> Op:
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
    return make_op(
        "output",
        "output",
        applies_to=IMAGE_ONLY,
        dtype=None if dtype is None else choice(dtype, DTYPES, "output dtype"),
        layout=None if layout is None else choice(layout, LAYOUTS, "output layout"),
    )


def pad(*, top: int = 0, bottom: int = 0, left: int = 0, right: int = 0, value: float = 0) -> Op:
    """Pad an image's borders with a constant ``value``.

    Example:
        >>> dataio.transforms.pad(top=4, bottom=4, left=4, right=4)
        pad(bottom=4, left=4, right=4, top=4, value=0)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"pad value must be a number, got {value!r}")
    return make_op(
        "pad",
        "array",
        applies_to=IMAGE_ONLY,
        value=value,
        top=non_negative_int(top, "pad top"),
        bottom=non_negative_int(bottom, "pad bottom"),
        left=non_negative_int(left, "pad left"),
        right=non_negative_int(right, "pad right"),
    )


def rotate90(k: int = 1) -> Op:
    """Rotate an image by ``k`` quarter turns counter-clockwise.

    Example:
        >>> dataio.transforms.rotate90(2)
        rotate90(k=2)
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise PlanError(f"rotate90 k must be an integer, got {k!r}")
    return make_op("rotate90", "array", applies_to=IMAGE_ONLY, k=k % 4)


def grayscale(*, channels: int = 1) -> Op:
    """Convert an RGB image to luma (ITU-R 601-2, as Pillow), with 1 or 3 channels.

    Example:
        >>> dataio.transforms.grayscale(channels=3)
        grayscale(channels=3)
    """
    if channels not in (1, 3):
        raise PlanError(f"grayscale channels must be 1 or 3, got {channels!r}")
    return make_op("grayscale", "array", applies_to=IMAGE_ONLY, channels=channels)


def color_jitter(
    *, brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0, hue: float = 0.0
) -> Op:
    """Randomly change brightness, contrast, saturation and hue, per record.

    Factors are drawn like torchvision's ``ColorJitter``: uniform in
    ``[max(0, 1 - v), 1 + v]`` (hue in ``[-hue, hue]``, at most 0.5), applied in a
    random order.

    Example:
        >>> dataio.transforms.color_jitter(brightness=0.4, contrast=0.4)
        color_jitter(brightness=0.4, contrast=0.4, hue=0.0, saturation=0.0)
    """
    values = {
        "brightness": non_negative(brightness, "color_jitter brightness"),
        "contrast": non_negative(contrast, "color_jitter contrast"),
        "saturation": non_negative(saturation, "color_jitter saturation"),
        "hue": non_negative(hue, "color_jitter hue"),
    }
    if values["hue"] > 0.5:
        raise PlanError(f"color_jitter hue must be in [0, 0.5], got {hue!r}")
    return make_op("color_jitter", "array", random=True, applies_to=IMAGE_ONLY, **values)


def to_dtype(dtype: CastDType, *, scale: bool = False) -> Op:
    """Cast the decoded array; ``scale=True`` maps uint8 0..255 to and from float 0..1.

    Targets: ``bool``, ``uint8`` (clipped and rounded, as for pixels), ``int8`` to
    ``int64`` (floats truncate toward zero as in NumPy and torch; values that do not fit
    raise instead of wrapping), ``float16``, ``bfloat16`` (needs ml_dtypes), ``float32``
    and ``float64``.

    Example:
        >>> dataio.transforms.to_dtype("float32", scale=True)
        to_dtype(dtype='float32', scale=True)
    """
    return make_op(
        "to_dtype",
        "array",
        applies_to=ARRAYS,
        dtype=choice(dtype, CAST_DTYPES, "to_dtype dtype"),
        scale=bool(scale),
    )


def standardize(*, eps: float = 1e-6) -> Op:
    """Per-sample normalization: subtract each channel's mean, divide by its std.

    Example:
        >>> dataio.transforms.standardize()
        standardize(eps=1e-06)
    """
    return make_op("standardize", "array", applies_to=ARRAYS, eps=non_negative(eps, "eps"))


def fix_length(length: int, *, random_crop: bool = False, pad_value: float = 0.0) -> Op:
    """Crop or pad audio (axis 0) to exactly ``length`` samples.

    Longer clips are cropped in the middle, or at a per-record random offset with
    ``random_crop=True``; shorter ones are padded at the end with ``pad_value``.

    Example:
        >>> dataio.transforms.fix_length(16000)
        fix_length(length=16000, pad_value=0.0, random_crop=False)
    """
    return make_op(
        "fix_length",
        "array",
        random=bool(random_crop),
        applies_to=AUDIO_ONLY,
        length=positive_int(length, "fix_length length"),
        random_crop=bool(random_crop),
        pad_value=float(pad_value),
    )


def gain(db: float) -> Op:
    """Scale audio by ``db`` decibels.

    Example:
        >>> dataio.transforms.gain(-6.0)
        gain(db=-6.0)
    """
    if isinstance(db, bool) or not isinstance(db, int | float):
        raise PlanError(f"gain db must be a number, got {db!r}")
    return make_op("gain", "array", applies_to=AUDIO_ONLY, db=float(db))
