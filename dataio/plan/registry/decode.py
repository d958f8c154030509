"""Decoder ops: bytes (or a path) in a record field to a value.

Each is exposed as ``dataio.decoders.<factory>``, ``slot(...).<method>`` and a method of
an expression namespace (``col("x").image.decode()``).
"""

from __future__ import annotations

import codecs
from typing import Literal

from dataio.exceptions import PlanError
from dataio.plan.ops import choice, flag, positive_int
from dataio.plan.registry._spec import Params, ValueType, declare

ImageMode = Literal["rgb", "gray", "rgba"]
IMAGE_MODES: tuple[str, ...] = ("rgb", "gray", "rgba")
CHANNELS = {"rgb": 3, "gray": 1, "rgba": 4}


def _image_type(value: ValueType, p: Params) -> ValueType:
    return ValueType("uint8", (None, None, CHANNELS[p["mode"]]), "HWC")


def _audio_type(value: ValueType, p: Params) -> ValueType:
    return ValueType("float32", (None,) if p["mono"] else (None, None))


def _array_type(value: ValueType, p: Params) -> ValueType:
    return ValueType()


def _object_type(value: ValueType, p: Params) -> ValueType:
    return ValueType(objects=True)


@declare(
    "decode_image",
    "decode",
    factory="image",
    kernel="dataio.udfs.image:run_chain",
    fused=True,
    output=_image_type,
    expr=("image", "decode"),
)
def decode_image(*, mode: ImageMode = "rgb", exact: bool = False) -> Params:
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
    flag(exact, "decode_image exact")
    checked = choice(mode, IMAGE_MODES, "decode_image mode")
    # the default stays out of the op, so existing plan signatures keep
    return {"mode": checked, "exact": True} if exact else {"mode": checked}


@declare(
    "decode_numpy",
    "decode",
    factory="numpy",
    kernel="dataio.udfs.tensor:decode_npy",
    output=_array_type,
    expr=("tensor", "decode_numpy"),
)
def decode_numpy() -> Params:
    """Decode NPY bytes (``np.save`` output) into the array they hold.

    Arrays keep their dtype and shape; foreign byte order becomes native. Files holding
    pickled Python objects are refused. Rows of a batch must share one shape.

    Example:
        >>> dataio.decoders.numpy()
        decode_numpy()
    """
    return {}


@declare(
    "decode_safetensors",
    "decode",
    factory="safetensors",
    kernel="dataio.udfs.tensor:decode_safetensors",
    output=_array_type,
    expr=("tensor", "decode_safetensors"),
)
def decode_safetensors(*, key: str | None = None) -> Params:
    """Decode one tensor of safetensors bytes into a NumPy array.

    Args:
        key: the tensor's name; ``None`` takes the file's only tensor.

    Example:
        >>> dataio.decoders.safetensors(key="embedding")
        decode_safetensors(key='embedding')
    """
    if key is not None and (not isinstance(key, str) or not key):
        raise PlanError(f"decode_safetensors key must be a non-empty string or None, got {key!r}")
    return {"key": key}


@declare(
    "decode_audio",
    "decode",
    factory="audio",
    kernel="dataio.udfs.audio:decode_audio",
    rate=True,
    output=_audio_type,
    expr=("audio", "decode"),
)
def decode_audio(
    *,
    sample_rate: int | None = None,
    mono: bool = False,
    resampling: Literal["linear", "sinc"] = "linear",
) -> Params:
    """Decode WAV, FLAC or OGG bytes into float32 ``[frames, channels]`` (``[frames]`` mono).

    With ``sample_rate`` the clip is resampled: ``"linear"`` interpolation (cheap) or
    ``"sinc"``, an anti-aliased band-limited resampler.

    Example:
        >>> dataio.decoders.audio(sample_rate=16000, resampling="sinc")
        decode_audio(mono=False, resampling='sinc', sample_rate=16000)
    """
    if sample_rate is not None:
        positive_int(sample_rate, "decode_audio sample_rate")
    return {
        "sample_rate": sample_rate,
        "mono": flag(mono, "decode_audio mono"),
        "resampling": choice(resampling, ("linear", "sinc"), "decode_audio resampling"),
    }


@declare(
    "decode_json",
    "decode",
    factory="json",
    kernel="dataio.udfs.text:decode_json",
    objects=True,
    output=_object_type,
    expr=("bin", "decode_json"),
)
def decode_json() -> Params:
    """Parse UTF-8 JSON bytes into Python values (the slot delivers a list of them).

    Example:
        >>> dataio.decoders.json()
        decode_json()
    """
    return {}


@declare(
    "decode_text",
    "decode",
    factory="text",
    kernel="dataio.udfs.text:decode_text",
    objects=True,
    output=_object_type,
    expr=("bin", "decode_text"),
)
def decode_text(*, encoding: str = "utf-8") -> Params:
    """Decode bytes to ``str`` with ``encoding``.

    Example:
        >>> dataio.decoders.text(encoding="latin-1")
        decode_text(encoding='latin-1')
    """
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise PlanError(
            f"unknown text encoding {encoding!r}; use a codec name such as 'utf-8'"
        ) from None
    return {"encoding": encoding}


@declare(
    "decode_bytes",
    "decode",
    factory="bytes",
    kernel="dataio.udfs.text:decode_bytes",
    objects=True,
    output=_object_type,
    expr=("bin", "decode_bytes"),
)
def decode_bytes() -> Params:
    """Deliver the raw bytes (paths are read).

    Example:
        >>> dataio.decoders.bytes()
        decode_bytes()
    """
    return {}


@declare(
    "decode_pt",
    "decode",
    factory="pt",
    kernel="dataio.udfs.text:decode_pt",
    objects=True,
    output=_object_type,
    expr=("tensor", "decode_pt"),
)
def decode_pt() -> Params:
    """Load a ``torch.save`` file with ``weights_only=True``: tensors and plain
    containers only, never arbitrary pickled objects.

    Example:
        >>> dataio.decoders.pt()
        decode_pt()
    """
    return {}
