"""Transform op factories (``dataio.transforms``): geometry, normalization, output layout.

Each function returns a plan node; nothing is computed here. A slot chain fuses its
geometric ops into one resampling step of the source image (see :mod:`dataio.udfs.image`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from dataio.exceptions import PlanError
from dataio.ops import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Op,
    channel_values,
    choice,
    float_pair,
    make_op,
    positive_int,
    probability,
)

__all__ = [
    "center_crop",
    "normalize",
    "output",
    "random_crop",
    "random_flip",
    "random_resized_crop",
    "resize",
    "resize_short",
]

Layout = Literal["HWC", "CHW"]
LAYOUTS = ("HWC", "CHW")
DTYPES = ("uint8", "float32")
NORMALIZE_PRESETS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD)}


def resize(*, h: int, w: int) -> Op:
    """Resize to exactly ``h`` x ``w`` (antialiased bilinear; aspect ratio may change).

    Example:
        >>> dataio.transforms.resize(h=224, w=224)
        resize(h=224, w=224)
    """
    return make_op(
        "resize", "geometry", h=positive_int(h, "resize h"), w=positive_int(w, "resize w")
    )


def resize_short(size: int) -> Op:
    """Resize so the shorter side equals ``size``, keeping the aspect ratio.

    Example:
        >>> dataio.transforms.resize_short(256)
        resize_short(size=256)
    """
    return make_op("resize_short", "geometry", size=positive_int(size, "resize_short size"))


def center_crop(*, h: int, w: int) -> Op:
    """Crop the central ``h`` x ``w`` window (the image must be at least that large).

    Example:
        >>> dataio.transforms.center_crop(h=224, w=224)
        center_crop(h=224, w=224)
    """
    return make_op(
        "center_crop",
        "geometry",
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
        "normalize", "normalize", mean=means, std=stds, layout=choice(layout, LAYOUTS, "layout")
    )


def output(*, dtype: Literal["uint8", "float32"] | None = None, layout: Layout | None = None) -> Op:
    """Choose the slot tensor's dtype and layout.

    Without ``normalize`` a decoded image leaves as ``uint8`` HWC; ask for ``"CHW"`` to
    move normalization to the GPU on a compact, channel-first tensor. ``float32`` without
    ``normalize`` keeps the 0-255 pixel values.

    Example:
        >>> dataio.transforms.output(dtype="uint8", layout="CHW")
        output(dtype='uint8', layout='CHW')
    """
    if dtype is None and layout is None:
        raise PlanError("output needs dtype= or layout=")
    return make_op(
        "output",
        "output",
        dtype=None if dtype is None else choice(dtype, DTYPES, "output dtype"),
        layout=None if layout is None else choice(layout, LAYOUTS, "output layout"),
    )
