"""Decoder op factories (``dataio.decoders``): bytes in a record field to arrays.

These build plan nodes only; the kernels live in :mod:`dataio.udfs`. The slot methods
(``slot("x").decode_image(...)``) are shorthand for the same ops.
"""

from __future__ import annotations

from typing import Literal

from dataio.exceptions import PlanError
from dataio.ops import Op, choice, make_op

__all__ = ["IMAGE_MODES", "image", "numpy", "safetensors"]

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


def numpy() -> Op:
    """Decode NPY bytes (``np.save`` output) into the array they hold.

    Arrays keep their dtype and shape; foreign byte order becomes native. Files holding
    pickled Python objects are refused. Rows of a batch must share one shape.

    Example:
        >>> dataio.decoders.numpy()
        decode_numpy()
    """
    return make_op("decode_numpy", "decode")


def safetensors(*, key: str | None = None) -> Op:
    """Decode one tensor of safetensors bytes into a NumPy array.

    Args:
        key: the tensor's name; ``None`` takes the file's only tensor.

    Example:
        >>> dataio.decoders.safetensors(key="embedding")
        decode_safetensors(key='embedding')
    """
    if key is not None and (not isinstance(key, str) or not key):
        raise PlanError(f"decode_safetensors key must be a non-empty string or None, got {key!r}")
    return make_op("decode_safetensors", "decode", key=key)
