"""Decoder op factories (``dataio.decoders``): bytes in a record field to arrays.

These build plan nodes only; the kernels live in :mod:`dataio.udfs`. The slot methods
(``slot("x").decode_image(...)``) are shorthand for the same ops.
"""

from __future__ import annotations

from typing import Literal

from dataio.exceptions import PlanError
from dataio.ops import Op, choice, make_op, positive_int

__all__ = ["IMAGE_MODES", "audio", "bytes", "image", "json", "numpy", "pt", "safetensors", "text"]

ImageMode = Literal["rgb", "gray", "rgba"]
IMAGE_MODES: tuple[str, ...] = ("rgb", "gray", "rgba")


def image(*, mode: ImageMode = "rgb", exact: bool = False) -> Op:
    """Decode JPEG, PNG, WebP, BMP, GIF or TIFF bytes into an ``uint8`` HWC array.

    JPEG takes a fast path that decodes at a reduced DCT scale when the chain's later
    resize allows it, never below the size the chain needs. Where a resample follows,
    it also uses libjpeg-turbo's fast IDCT (and fast chroma upsampling where the
    resample shrinks 2x or more): crops stay above 40 dB PSNR of the exact result.

    Args:
        mode: ``"rgb"`` (3 channels), ``"gray"`` (1 channel) or ``"rgba"`` (4 channels).
        exact: decode JPEG with the accurate IDCT and smooth upsampling everywhere.

    Example:
        >>> dataio.decoders.image(mode="gray")
        decode_image(mode='gray')
    """
    if not isinstance(exact, bool):
        raise PlanError(f"decode_image exact must be True or False, got {exact!r}")
    checked = choice(mode, IMAGE_MODES, "decode_image mode")
    if exact:
        return make_op("decode_image", "decode", mode=checked, exact=True)
    # the default stays out of the op, so existing plan signatures keep
    return make_op("decode_image", "decode", mode=checked)


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


def audio(
    *,
    sample_rate: int | None = None,
    mono: bool = False,
    resampling: Literal["linear", "sinc"] = "linear",
) -> Op:
    """Decode WAV, FLAC or OGG bytes into float32 ``[frames, channels]`` (``[frames]`` mono).

    With ``sample_rate`` the clip is resampled: ``"linear"`` interpolation (cheap) or
    ``"sinc"``, an anti-aliased band-limited resampler.

    Example:
        >>> dataio.decoders.audio(sample_rate=16000, resampling="sinc")
        decode_audio(mono=False, resampling='sinc', sample_rate=16000)
    """
    if sample_rate is not None:
        positive_int(sample_rate, "decode_audio sample_rate")
    return make_op(
        "decode_audio",
        "decode",
        sample_rate=sample_rate,
        mono=bool(mono),
        resampling=choice(resampling, ("linear", "sinc"), "decode_audio resampling"),
    )


def json() -> Op:
    """Parse UTF-8 JSON bytes into Python values (the slot delivers a list of them).

    Example:
        >>> dataio.decoders.json()
        decode_json()
    """
    return make_op("decode_json", "decode")


def text(*, encoding: str = "utf-8") -> Op:
    """Decode bytes to ``str`` with ``encoding``.

    Example:
        >>> dataio.decoders.text(encoding="latin-1")
        decode_text(encoding='latin-1')
    """
    import codecs

    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise PlanError(
            f"unknown text encoding {encoding!r}; use a codec name such as 'utf-8'"
        ) from None
    return make_op("decode_text", "decode", encoding=encoding)


def bytes() -> Op:
    """Deliver the raw bytes (paths are read).

    Example:
        >>> dataio.decoders.bytes()
        decode_bytes()
    """
    return make_op("decode_bytes", "decode")


def pt() -> Op:
    """Load a ``torch.save`` file with ``weights_only=True``: tensors and plain
    containers only, never arbitrary pickled objects.

    Example:
        >>> dataio.decoders.pt()
        decode_pt()
    """
    return make_op("decode_pt", "decode")
