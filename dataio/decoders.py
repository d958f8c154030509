"""Decoder op factories (``dataio.decoders``): bytes in a record field to arrays.

These build plan nodes only; the kernels live in :mod:`dataio.udfs`. The slot methods
(``slot("x").decode_image(...)``) are shorthand for the same ops.
"""

from __future__ import annotations

from typing import Literal

from dataio.ops import Op, choice, make_op

__all__ = ["IMAGE_MODES", "image"]

ImageMode = Literal["rgb", "gray", "rgba"]
IMAGE_MODES: tuple[str, ...] = ("rgb", "gray", "rgba")


def image(*, mode: ImageMode = "rgb") -> Op:
    """Decode JPEG, PNG, WebP, BMP, GIF or TIFF bytes into an ``uint8`` HWC array.

    JPEG takes a fast path that decodes at a reduced DCT scale when the chain's later
    resize allows it, never below the size the chain needs.

    Args:
        mode: ``"rgb"`` (3 channels), ``"gray"`` (1 channel) or ``"rgba"`` (4 channels).

    Example:
        >>> dataio.decoders.image(mode="gray")
        decode_image(mode='gray')
    """
    return make_op("decode_image", "decode", mode=choice(mode, IMAGE_MODES, "decode_image mode"))
