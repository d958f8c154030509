"""Image kernels: decode, fused geometry and normalization into a caller's buffer.

A slot chain ``decode -> resize/crop/flip... -> normalize`` runs as one kernel call:

1. the header gives the source size; the chain's geometry is composed into a single
   source box and output size (a resize followed by a crop becomes one resample of the
   cropped source region, which is what resize-then-crop computes);
2. JPEG is decoded at the smallest power-of-two DCT scale that keeps the box at least as
   large as the output, so large photos decode at 1/2, 1/4 or 1/8 of their size;
3. one antialiased bilinear resample (Pillow's, with ``box=``) produces the output pixels;
4. flips are views, and normalization is one affine per channel written straight into
   the preallocated batch row.

Chains without a resample decode JPEG with simplejpeg, measured fastest here for full
decodes into NumPy. Everything here releases the GIL for the heavy parts.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataio import limits
from dataio.exceptions import DataioError, DecodeError, LimitError, TransformError

_resample: Any
try:  # the compiled kernel; without it Pillow resamples (slower, same results within 1 level)
    from dataio.udfs import _resample
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _resample = None
_jpeg: Any
try:  # region decodes through libjpeg-turbo; without it JPEGs decode whole, then slice
    from dataio.udfs import _jpeg
except ImportError:  # pragma: no cover - built wherever libjpeg-turbo's headers are
    _jpeg = None

__all__ = [
    "Geometry",
    "ImageSpec",
    "decode_image",
    "image_size",
    "plan_geometry",
    "run_chain",
    "write_pixels",
]

_PIL_MODES = {"rgb": "RGB", "gray": "L", "rgba": "RGBA"}
_SIMPLEJPEG_SPACES = {"rgb": "RGB", "gray": "GRAY", "rgba": "RGBA"}
CHANNELS = {"rgb": 3, "gray": 1, "rgba": 4}
_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_MAGICS = ((_JPEG_MAGIC, "JPEG"), (_PNG_MAGIC, "PNG"))
# Start-of-frame markers (SOF0-SOF15 less DHT, JPG and DAC) and the progressive ones.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SOS = b"\xff\xda"
# DCT scaling keeps the decoded box at least this many times the output size, so the
# antialiased resample that follows hides the IDCT's approximation: measured here on
# photo-like JPEGs, a gap of 2 keeps every crop >= 40 dB PSNR from the full-decode
# reference (1 gave 34 dB at worst). Pillow's thumbnail() uses the same gap.
DRAFT_GAP = 2.0
# Where a resample follows, JPEG decodes with libjpeg's fast (IFAST) IDCT: ~6% faster
# decodes here, and every crop of the mixed-size test set stays >= 46 dB PSNR from the
# Pillow reference (>= 52 dB with the accurate IDCT; the bar is 40). Fast (replicating)
# chroma upsampling saves ~8% more but costs up to 6 dB when the resample shrinks little
# (40.4 dB at worst on photo-like crops shrunk 1.2x), so it is used only where the
# resample shrinks the decoded image at least FAST_UPSAMPLE_SHRINK times (45.2 dB at
# worst there). ``ImageSpec.exact`` turns both off.
FAST_UPSAMPLE_SHRINK = 2.0


@dataclass(frozen=True)
class ImageSpec:
    """A lowered image slot chain, in plain values.

    Attributes:
        mode: ``"rgb"``, ``"gray"`` or ``"rgba"``.
        steps: geometry steps as ``(name, params)`` in chain order.
        mean, std: per-channel statistics in [0, 1] units, or ``None`` without normalize.
        dtype: ``"uint8"`` or ``"float32"``.
        layout: ``"HWC"`` or ``"CHW"``.
        random: the steps draw from the record's generator.
        exact: decode JPEG with the accurate IDCT and smooth chroma upsampling even
            where a resample follows (by default the fast IDCT is used there, and fast
            upsampling where the resample shrinks 2x or more; decodes without a resample
            are always accurate).
    """

    mode: str = "rgb"
    steps: tuple[tuple[str, dict[str, Any]], ...] = ()
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    dtype: str = "uint8"
    layout: str = "HWC"
    random: bool = False
    exact: bool = False
    scale: np.ndarray | None = field(default=None, compare=False, repr=False)
    bias: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mean is not None and self.std is not None:
            channels = CHANNELS[self.mode]
            if len(self.mean) not in (1, channels):
                raise TransformError(
                    f"normalize has {len(self.mean)} channel values but mode {self.mode!r} "
                    f"gives {channels} channels; pass {channels} values or one"
                )
            mean = np.broadcast_to(np.asarray(self.mean, np.float64), (channels,))
            std = np.broadcast_to(np.asarray(self.std, np.float64), (channels,))
            object.__setattr__(self, "scale", (1.0 / (255.0 * std)).astype(np.float32))
            object.__setattr__(self, "bias", (-mean / std).astype(np.float32))

    @property
    def channels(self) -> int:
        """Number of output channels."""
        return CHANNELS[self.mode]

    def static_shape(self) -> tuple[int, ...] | None:
        """The output shape when every image gives the same one, else ``None``."""
        hw: tuple[int, int] | None = None
        for name, params in self.steps:
            if name in ("resize", "center_crop", "random_crop", "random_resized_crop"):
                hw = (params["h"], params["w"])
            elif name == "resize_short":
                hw = None
        if hw is None:
            return None
        return (self.channels, *hw) if self.layout == "CHW" else (*hw, self.channels)


@dataclass(frozen=True)
class Geometry:
    """The composed geometry of a chain for one image.

    ``box`` is the source region ``(left, top, right, bottom)`` in source pixels,
    ``size`` the output ``(width, height)``; flips apply to the output.
    """

    box: tuple[float, float, float, float]
    size: tuple[int, int]
    hflip: bool = False
    vflip: bool = False

    def is_plain_crop(self) -> bool:
        """True when the box is integral and unscaled, so no resampling is needed."""
        left, top, right, bottom = self.box
        return (
            all(float(v).is_integer() for v in self.box)
            and right - left == self.size[0]
            and bottom - top == self.size[1]
        )


def _short_side_size(width: int, height: int, size: int) -> tuple[int, int]:
    # torchvision's rule: the long side is truncated, not rounded.
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def _random_resized_window(
    width: int, height: int, params: dict[str, Any], rng: np.random.Generator
) -> tuple[int, int, int, int]:
    # torchvision's RandomResizedCrop.get_params, drawn from the record's generator.
    area = width * height
    lo, hi = params["ratio"]
    log_lo, log_hi = math.log(lo), math.log(hi)
    for _ in range(10):
        target = area * rng.uniform(*params["scale"])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, w, h
    in_ratio = width / height
    if in_ratio < lo:
        w, h = width, round(width / lo)
    elif in_ratio > hi:
        w, h = round(height * hi), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def plan_geometry(
    steps: tuple[tuple[str, dict[str, Any]], ...],
    width: int,
    height: int,
    rng: np.random.Generator | None = None,
) -> Geometry:
    """Compose a chain's geometry steps for a ``width`` x ``height`` source.

    Raises:
        TransformError: a crop is larger than the image it applies to.
    """
    x0, y0, x1, y1 = 0.0, 0.0, float(width), float(height)
    cur_w, cur_h = width, height
    hflip = vflip = False
    for name, p in steps:
        if name == "resize":
            cur_w, cur_h = p["w"], p["h"]
            continue
        if name == "resize_short":
            cur_w, cur_h = _short_side_size(cur_w, cur_h, p["size"])
            continue
        if name == "random_flip":
            assert rng is not None
            if rng.random() < p["p"]:
                if p["direction"] == "horizontal":
                    hflip = not hflip
                else:
                    vflip = not vflip
            continue
        out_w, out_h = cur_w, cur_h
        if name == "random_resized_crop":
            assert rng is not None
            left, top, cw, ch = _random_resized_window(cur_w, cur_h, p, rng)
            out_w, out_h = p["w"], p["h"]
        else:
            cw, ch = p["w"], p["h"]
            if cw > cur_w or ch > cur_h:
                raise TransformError(
                    f"{name}(h={ch}, w={cw}) is larger than the {cur_h}x{cur_w} image; "
                    "resize first (for example .resize_short(n) with n >= the crop size)"
                )
            if name == "center_crop":
                left, top = round((cur_w - cw) / 2.0), round((cur_h - ch) / 2.0)
            else:
                assert rng is not None
                top = int(rng.integers(0, cur_h - ch + 1))
                left = int(rng.integers(0, cur_w - cw + 1))
            out_w, out_h = cw, ch
        if hflip:
            left = cur_w - left - cw
        if vflip:
            top = cur_h - top - ch
        sx, sy = (x1 - x0) / cur_w, (y1 - y0) / cur_h
        x0, x1 = x0 + left * sx, x0 + (left + cw) * sx
        y0, y1 = y0 + top * sy, y0 + (top + ch) * sy
        cur_w, cur_h = out_w, out_h
    return Geometry((x0, y0, x1, y1), (cur_w, cur_h), hflip, vflip)


def _open(data: bytes | bytearray | memoryview, *, check: bool = True) -> Any:
    """Open an image with Pillow; with ``check``, refuse sizes over the limits first."""
    from PIL import Image, UnidentifiedImageError

    if len(data) == 0:
        raise DecodeError("the image is empty (0 bytes); check the file or field it came from")
    if check:
        _check_header(data)
    try:
        im = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        head = bytes(data[:8])
        known = next((name for magic, name in _MAGICS if head.startswith(magic)), None)
        if known is not None:
            raise DecodeError(
                f"the {known} header is corrupt or truncated (first bytes {head!r}); "
                "check that the file was written completely"
            ) from None
        raise DecodeError(
            f"not a recognised image format (first bytes {head!r}); "
            "expected JPEG, PNG, WebP, BMP, GIF or TIFF"
        ) from None
    # Pillow's plugins parse hostile headers in Python and fail with whatever their
    # parsing hits (OSError, struct.error, TypeError from a rational TIFF offset...), or
    # warn about corrupt metadata (an error where warnings are): all mean a bad file.
    except Exception as exc:
        raise DecodeError(f"cannot read the image header: {type(exc).__name__}: {exc}") from exc
    if check:
        # every format Pillow reads: its size is known before any pixel is decoded
        width, height = im.size
        try:
            _check_pixels(width, height, im.format or "image")
        except LimitError:
            im.close()
            raise
    return im


def _check_pixels(width: int, height: int, kind: str) -> None:
    limits.check(
        "max_image_pixels",
        width * height,
        what=f"the {kind} header declares {width}x{height} pixels",
    )


def _check_header(data: bytes | bytearray | memoryview) -> None:
    """Check the size a JPEG or PNG header declares, before Pillow or libjpeg allocate."""
    head = bytes(data[:24])
    if head.startswith(_JPEG_MAGIC):
        _jpeg_header(data)
    elif head.startswith(_PNG_MAGIC) and head[12:16] == b"IHDR":
        # Pillow's own bomb check warns (an error where warnings are) before ours could run
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        _check_pixels(width, height, "PNG")


def image_size(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """Return ``(width, height)`` from an image header without decoding pixels."""
    with _open(data, check=False) as im:
        return im.size


def _load(im: Any, mode: str) -> Any:

    try:
        im.load()
        return im if im.mode == _PIL_MODES[mode] else im.convert(_PIL_MODES[mode])
    except MemoryError as exc:
        raise DecodeError(
            f"not enough memory to decode the {im.size[0]}x{im.size[1]} image; lower "
            "dataio.limits max_image_pixels or decode fewer images at once"
        ) from exc
    except DataioError:
        raise
    except Exception as exc:  # as in _open: a hostile file fails Pillow in many ways
        raise DecodeError(
            f"the image is corrupt or truncated: {type(exc).__name__}: {exc}"
        ) from exc


def _decode_jpeg_full(
    data: bytes | bytearray | memoryview,
    mode: str,
    *,
    fast: bool = False,
    fast_upsample: bool = False,
    **min_size: int,
) -> np.ndarray:
    """simplejpeg's decode; ``min_width``/``min_height`` pick a reduced DCT scale."""
    import simplejpeg

    try:
        return simplejpeg.decode_jpeg(
            data,
            colorspace=_SIMPLEJPEG_SPACES[mode],
            fastdct=fast,
            fastupsample=fast_upsample,
            strict=True,
            **min_size,
        )
    except (ValueError, MemoryError) as exc:
        raise _jpeg_error(exc) from exc


def _jpeg_error(exc: Exception) -> DecodeError:
    """libjpeg reports running out of memory like corrupt data; say which it was."""
    if isinstance(exc, MemoryError) or "memory" in str(exc).lower():
        return DecodeError(
            f"not enough memory to decode the JPEG ({exc or 'out of memory'}); lower "
            "dataio.limits max_image_pixels or decode fewer images at once"
        )
    return DecodeError(f"the JPEG is corrupt or truncated: {exc}")


def decode_image(data: bytes | bytearray | memoryview, mode: str = "rgb") -> np.ndarray:
    """Decode image bytes into a ``uint8`` ``(height, width, channels)`` array.

    Raises:
        DecodeError: the bytes are empty, truncated, corrupt or not an image.
    """
    if bytes(data[:3]) == _JPEG_MAGIC:
        _jpeg_header(data)
        return _decode_jpeg_full(data, mode)
    with _open(data) as im:
        pixels = np.asarray(_load(im, mode))
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _decode_geometry(
    data: bytes | bytearray | memoryview, spec: ImageSpec, rng: np.random.Generator | None
) -> tuple[np.ndarray, tuple[int, int]]:
    from PIL import Image

    im = _open(data)
    with im:
        width, height = im.size
        geo = plan_geometry(spec.steps, width, height, rng)
        if geo.is_plain_crop() and im.format == "JPEG":
            pixels = _decode_jpeg_full(data, spec.mode)
            x0, y0, x1, y1 = (int(v) for v in geo.box)
            pixels = pixels[y0:y1, x0:x1]
        else:
            left, top, right, bottom = geo.box
            # The source extent in decoded pixels. A DCT-scaled decode maps source x to
            # exactly x / scale, while its pixel size is rounded up, so the scale comes
            # from the extent draft() reports, not from the decoded size.
            extent: tuple[float, float] = (width, height)
            if im.format == "JPEG":
                factor = min((right - left) / geo.size[0], (bottom - top) / geo.size[1])
                if factor >= 2 * DRAFT_GAP:
                    want = (
                        math.ceil(width * DRAFT_GAP / factor),
                        math.ceil(height * DRAFT_GAP / factor),
                    )
                    drafted = im.draft(_PIL_MODES[spec.mode], want)
                    if drafted is not None:
                        extent = drafted[1][2], drafted[1][3]
            loaded = _load(im, spec.mode)
            sx, sy = extent[0] / width, extent[1] / height
            box = (left * sx, top * sy, right * sx, bottom * sy)
            if geo.is_plain_crop() and (sx, sy) == (1.0, 1.0):
                out = loaded.crop(tuple(int(v) for v in box))
            else:
                out = loaded.resize(geo.size, Image.Resampling.BILINEAR, box=box)
            pixels = np.asarray(out)
            if pixels.ndim == 2:
                pixels = pixels[..., None]
    if geo.hflip:
        pixels = pixels[:, ::-1]
    if geo.vflip:
        pixels = pixels[::-1]
    return pixels, (height, width)


def write_pixels(pixels: np.ndarray, spec: ImageSpec, out: np.ndarray | None = None) -> np.ndarray:
    """Write ``uint8`` HWC ``pixels`` in the spec's dtype and layout, normalized if asked.

    ``out`` is the destination row (for example a slice of a batch buffer); a new array
    is allocated when it is ``None``.
    """
    src = pixels.transpose(2, 0, 1) if spec.layout == "CHW" else pixels
    if out is None:
        out = np.empty(src.shape, np.float32 if spec.dtype == "float32" else np.uint8)
    elif out.shape != src.shape:
        raise TransformError(
            f"the image gives shape {src.shape} but the batch holds {out.shape}; "
            "end the chain with a fixed-size op such as center_crop or resize"
        )
    if spec.scale is not None and spec.bias is not None:
        shape = (-1, 1, 1) if spec.layout == "CHW" else (1, 1, -1)
        scale, bias = _per_channel(spec, src.shape[0 if spec.layout == "CHW" else -1])
        np.multiply(src, scale.reshape(shape), out=out)
        np.add(out, bias.reshape(shape), out=out)
    else:
        np.copyto(out, src, casting="unsafe")
    return out


def _per_channel(spec: ImageSpec, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """The normalize factors for an image of ``channels`` channels: an op after the
    decoder may change the count (``grayscale(channels=1)`` after an RGB decode)."""
    assert spec.scale is not None and spec.bias is not None
    scale, bias = spec.scale, spec.bias
    if scale.size in (1, channels):
        return scale, bias
    if channels == 1 and (scale == scale[0]).all() and (bias == bias[0]).all():
        return scale[:1], bias[:1]  # one mean/std given, broadcast to the decoder's mode
    raise TransformError(
        f"normalize has {scale.size} channel values but the image reaching it has "
        f"{channels} channel(s); pass one value, or {channels}"
    )


def _jpeg_header(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(width, height)`` from a JPEG's frame header, checked against the limits.

    Reads the marker segments up to the first scan (O(header)); a file that decodes in
    more than one scan (progressive, or components in separate scans) also has its scan
    markers counted, a byte search over the rest (entropy-coded data cannot hold
    ``FF DA``).

    Raises:
        DecodeError: the header is corrupt or truncated.
        LimitError: the frame has more pixels than ``max_image_pixels`` or the file more
            scans than ``max_jpeg_scans``.
    """
    width, height, multiscan, scan_end = _jpeg_frame(data)
    _check_pixels(width, height, "JPEG frame")
    if multiscan:
        whole = data if isinstance(data, bytes | bytearray) else bytes(data)
        count = 1 + whole.count(_SOS, scan_end)
        limits.check("max_jpeg_scans", count, what=f"the {width}x{height} JPEG has {count} scans")
    return width, height


def _jpeg_frame(data: bytes | bytearray | memoryview) -> tuple[int, int, bool, int]:
    """Walk a JPEG's marker segments to the first scan header.

    Returns ``(width, height, multiscan, end of the first scan header)``; ``multiscan``
    is true for progressive frames and for scans that hold fewer components than the
    frame (the others follow in more scans).
    """
    n = len(data)
    pos = 2
    frame: tuple[int, int, int, bool] | None = None
    while pos + 4 <= n:
        if data[pos] != 0xFF or data[pos + 1] == 0xFF:
            pos += 1  # fill bytes or garbage between segments, as libjpeg skips them
            continue
        marker = data[pos + 1]
        if marker == 0x01 or 0xD0 <= marker <= 0xD7 or marker == 0x00:
            pos += 2  # segments without a length
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if marker in _SOF and length >= 8 and pos + 10 <= n:
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            frame = (width, height, data[pos + 9], marker in _PROGRESSIVE)
        elif marker == 0xDA and frame is not None and pos + 5 <= n:
            width, height, components, progressive = frame
            return width, height, progressive or data[pos + 4] < components, pos + 2 + length
        elif marker in (0xDA, 0xD9) or length < 2:
            break
        pos += 2 + length
    raise DecodeError(
        "the JPEG header is corrupt or truncated: no frame and scan header "
        f"in its {n} bytes; check that the file was written completely"
    )


def _shrink(geo: Geometry) -> float:
    """How many times the resample shrinks the source box (the smaller of both axes)."""
    left, top, right, bottom = geo.box
    return min((right - left) / geo.size[0], (bottom - top) / geo.size[1])


def _dct_scale(geo: Geometry) -> int:
    """The power-of-two JPEG downscale (1, 2, 4 or 8) this geometry allows."""
    factor = _shrink(geo) / DRAFT_GAP
    scale = 1
    while scale < 8 and scale * 2 <= factor:
        scale *= 2
    return scale


def _native_chain(
    data: bytes | bytearray | memoryview,
    spec: ImageSpec,
    rng: np.random.Generator | None,
    out: np.ndarray | None,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode (JPEG at a DCT scale, via simplejpeg) and resample in the C kernel."""
    assert _resample is not None
    jpeg = bytes(data[:3]) == _JPEG_MAGIC
    if jpeg:
        width, height = _jpeg_header(data)
    else:
        with _open(data) as im:
            width, height = im.size
            pixels = np.asarray(_load(im, spec.mode))
        if pixels.ndim == 2:
            pixels = pixels[..., None]
    geo = plan_geometry(spec.steps, width, height, rng)
    plain = geo.is_plain_crop()
    scale = 1
    origin = (0, 0)  # where the decoded pixels start, in the decoded image's coordinates
    if jpeg:
        if not plain:
            scale = _dct_scale(geo)
        fast = not (plain or spec.exact)
        upsample = fast and _shrink(geo) / scale >= FAST_UPSAMPLE_SHRINK
        pixels, origin = _decode_jpeg_region(
            data,
            spec.mode,
            (width, height),
            scale,
            _decode_region(geo, scale),
            fast=fast,
            fast_upsample=upsample,
        )
    if plain:
        x0, y0, x1, y1 = (int(v) for v in geo.box)
        x0, x1 = x0 - origin[0], x1 - origin[0]
        y0, y1 = y0 - origin[1], y1 - origin[1]
        cropped = pixels[y0:y1, x0:x1]
        if geo.hflip:
            cropped = cropped[:, ::-1]
        if geo.vflip:
            cropped = cropped[::-1]
        return write_pixels(cropped, spec, out), (height, width)
    out_w, out_h = geo.size
    if out is None:
        shape = (
            (spec.channels, out_h, out_w) if spec.layout == "CHW" else (out_h, out_w, spec.channels)
        )
        out = np.empty(shape, np.float32 if spec.dtype == "float32" else np.uint8)
    elif out.shape != (
        (spec.channels, out_h, out_w) if spec.layout == "CHW" else (out_h, out_w, spec.channels)
    ):
        raise TransformError(
            f"the image gives {out_h}x{out_w} but the batch holds {out.shape}; "
            "end the chain with a fixed-size op such as center_crop or resize"
        )
    src = np.ascontiguousarray(pixels)
    # a 1/scale DCT decode maps x to exactly x / scale; clamp float rounding at the edges
    left, top, right, bottom = (v / scale for v in geo.box)
    left, right = left - origin[0], right - origin[0]
    top, bottom = top - origin[1], bottom - origin[1]
    box = (max(left, 0.0), max(top, 0.0), min(right, src.shape[1]), min(bottom, src.shape[0]))
    _resample.resample_into(
        src,
        src.shape[0],
        src.shape[1],
        src.shape[2],
        box,
        out,
        out_h,
        out_w,
        spec.layout == "CHW",
        spec.dtype == "float32",
        None if spec.scale is None else spec.scale.tolist(),
        None if spec.bias is None else spec.bias.tolist(),
        geo.hflip,
        geo.vflip,
    )
    return out, (height, width)


def _decode_region(geo: Geometry, scale: int) -> tuple[int, int, int, int]:
    """The decoded pixels (at 1/``scale``) a geometry reads: its box plus the resample's
    reach (the filter's support, as wide as the shrink factor, and one pixel to round),
    plus one pixel that a region decode may get wrong at its edges."""
    left, top, right, bottom = (v / scale for v in geo.box)
    if geo.is_plain_crop():
        reach_x = reach_y = 1
    else:
        out_w, out_h = geo.size
        reach_x = math.ceil(max(1.0, (right - left) / out_w)) + 2
        reach_y = math.ceil(max(1.0, (bottom - top) / out_h)) + 2
    return (
        math.floor(left) - reach_x,
        math.floor(top) - reach_y,
        math.ceil(right) + reach_x,
        math.ceil(bottom) + reach_y,
    )


def _decode_jpeg_region(
    data: bytes | bytearray | memoryview,
    mode: str,
    size: tuple[int, int],
    scale: int,
    region: tuple[int, int, int, int],
    *,
    fast: bool = False,
    fast_upsample: bool = False,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode at 1/``scale`` the pixels of ``region`` (x0, y0, x1, y1 in the decoded
    image's coordinates; clamped to it) and perhaps more around it.

    Returns the ``uint8`` HWC pixels and the decoded coordinates of their top-left
    pixel. Without the region decoder (or for CMYK JPEGs, which it does not convert),
    the whole image is decoded and the origin is ``(0, 0)``.
    """
    if _jpeg is not None:
        try:
            found = _jpeg.decode_region(data, CHANNELS[mode], scale, *region, fast, fast_upsample)
        except (ValueError, MemoryError) as exc:
            raise _jpeg_error(exc) from exc
        if found is not None:
            buffer, x, y, width, height = found
            pixels = np.frombuffer(buffer, np.uint8).reshape(height, width, CHANNELS[mode])
            return pixels, (x, y)
    pixels = _decode_jpeg_scaled(
        data, mode, size[0], size[1], scale, fast=fast, fast_upsample=fast_upsample
    )
    return pixels, (0, 0)


def region_decoder() -> str | None:
    """The libjpeg-turbo build region decodes use, or ``None`` when it was not built."""
    return None if _jpeg is None else str(_jpeg.version())


def _decode_jpeg_scaled(
    data: bytes | bytearray | memoryview,
    mode: str,
    width: int,
    height: int,
    scale: int,
    *,
    fast: bool = False,
    fast_upsample: bool = False,
) -> np.ndarray:
    """Decode at 1/``scale`` of the size; ``fast`` picks the fast IDCT (full scale only:
    libjpeg's reduced-size IDCTs have one variant), ``fast_upsample`` replicating chroma
    upsampling."""
    reduced = {"min_width": math.ceil(width / scale), "min_height": math.ceil(height / scale)}
    size = reduced if scale > 1 else {}
    return _decode_jpeg_full(data, mode, fast=fast, fast_upsample=fast_upsample, **size)


def transform_pixels(
    pixels: np.ndarray,
    steps: tuple[tuple[str, dict[str, Any]], ...],
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Apply geometry steps to a decoded HWC array (one resample, as the fused path).

    Used for geometry that follows other transforms or sits in a ``when`` branch.
    """
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    height, width, channels = pixels.shape
    geo = plan_geometry(steps, width, height, rng)
    if geo.is_plain_crop():
        x0, y0, x1, y1 = (int(v) for v in geo.box)
        out = pixels[y0:y1, x0:x1]
    else:
        out_w, out_h = geo.size
        if _resample is not None and pixels.dtype == np.uint8:
            out = np.empty((out_h, out_w, channels), np.uint8)
            src = np.ascontiguousarray(pixels)
            left, top, right, bottom = geo.box
            box = (max(left, 0.0), max(top, 0.0), min(right, width), min(bottom, height))
            _resample.resample_into(
                src, height, width, channels, box, out, out_h, out_w,
                False, False, None, None, False, False,
            )  # fmt: skip
        else:
            out = _pillow_resample(pixels, geo)
    if geo.hflip:
        out = out[:, ::-1]
    if geo.vflip:
        out = out[::-1]
    return out


def _pillow_resample(pixels: np.ndarray, geo: Geometry) -> np.ndarray:
    from PIL import Image

    channels = pixels.shape[2]
    if pixels.dtype == np.uint8:
        planes = [pixels[..., 0]] if channels == 1 else None
        image = Image.fromarray(planes[0] if planes else pixels)
        out = np.asarray(image.resize(geo.size, Image.Resampling.BILINEAR, box=geo.box))
        return out[..., None] if out.ndim == 2 else out
    # float data: resample each channel as a 32-bit float image
    resized = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(pixels[..., c], np.float32), mode="F").resize(
                geo.size, Image.Resampling.BILINEAR, box=geo.box
            )
        )
        for c in range(channels)
    ]
    return np.stack(resized, axis=-1)


def native_available() -> bool:
    """True when the compiled resampling kernel is importable (else Pillow resamples)."""
    return _resample is not None


def run_chain(
    data: bytes | bytearray | memoryview,
    spec: ImageSpec,
    rng: np.random.Generator | None = None,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Run a whole image chain on one encoded image.

    Returns the output array (``out`` itself when given) and the source ``(height, width)``.
    """
    if spec.random and rng is None:
        raise TransformError("this chain has random ops; pass the record's generator")
    if not spec.steps:
        pixels = decode_image(data, spec.mode)
        return write_pixels(pixels, spec, out), (pixels.shape[0], pixels.shape[1])
    if _resample is not None and spec.mode != "rgba":  # Pillow resamples RGBA premultiplied
        return _native_chain(data, spec, rng, out)
    pixels, source_hw = _decode_geometry(data, spec, rng)
    return write_pixels(pixels, spec, out), source_hw
