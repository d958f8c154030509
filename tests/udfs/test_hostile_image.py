"""Hostile images: headers that ask for more pixels, scans or memory than dataio allows.

Each hostile file is built here from a real encode with one field changed, so the test
shows what is hostile about it. Sizes are checked against ``dataio.limits`` before any
decoder allocates; Pillow's own bomb warning is not relied on (warnings are errors here).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
from helpers.sanitizers import child_env
from PIL import Image

import dataio
from dataio.engine.lower import image_spec
from dataio.exceptions import DataioError, DecodeError, LimitError
from dataio.udfs import image as image_module
from dataio.udfs.image import decode_image, run_chain

SOF_MARKERS = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def encode(pixels: np.ndarray, fmt: str = "JPEG", **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of each marker segment up to the first scan's header."""
    found, pos = [], 2
    while True:
        marker = data[pos + 1]
        end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        found.append((marker, pos, end))
        if marker == 0xDA:
            return found
        pos = end


def with_frame_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` with its start-of-frame header declaring ``width`` x ``height``."""
    _, start, _ = next(s for s in segments(data) if s[0] in SOF_MARKERS)
    out = bytearray(data)
    out[start + 5 : start + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(out)


def scan_count(data: bytes) -> int:
    """Scans in a JPEG, by walking every marker segment and skipping entropy-coded data."""
    count, pos = 0, 2
    while pos < len(data):
        marker = data[pos + 1]
        if marker == 0xD9:
            return count
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker == 0xDA:
            count += 1
            while not (data[pos] == 0xFF and data[pos + 1] not in (0x00, *range(0xD0, 0xD8))):
                pos += 1
    return count


def many_scans(data: bytes, copies: int) -> bytes:
    """A progressive JPEG with its last scan (header and data) repeated ``copies`` times."""
    last = data.rindex(b"\xff\xda")
    scan = data[last:-2]  # up to the EOI marker
    return data[:-2] + scan * copies + b"\xff\xd9"


def bomb() -> bytes:
    """A ~500-byte progressive JPEG whose frame header says 65500 x 65500: libjpeg would
    allocate its 12 GiB coefficient buffer before reading a single scan."""
    small = encode(np.zeros((16, 16, 3), np.uint8), progressive=True)
    return with_frame_size(small, 65500, 65500)


def zeros_20000() -> bytes:
    """A baseline JPEG that declares 20000 x 20000 (an all-zero one decodes to 1.2 GB)."""
    return with_frame_size(encode(np.zeros((16, 16, 3), np.uint8)), 20000, 20000)


def png_with_size(width: int, height: int) -> bytes:
    """A valid-looking PNG header declaring ``width`` x ``height`` over one tiny IDAT."""
    small = encode(np.zeros((1, 1, 3), np.uint8), "PNG")
    ihdr = b"IHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + small[24:29]
    chunk = len(ihdr[4:]).to_bytes(4, "big") + ihdr + zlib.crc32(ihdr).to_bytes(4, "big")
    return small[:8] + chunk + small[33:]


def chain(mode: str = "rgb") -> image_module.ImageSpec:
    slot = dataio.slot("image").decode_image(mode=mode).resize_short(64).center_crop(h=56, w=56)
    return image_spec(slot)


def all_paths(data: bytes) -> dict[str, object]:
    """Every public decode path for ``data``: full decode, the fused native chain (region
    decoder), the Pillow chain (rgba) and the Pillow-only full decode."""
    return {
        "decode": lambda: decode_image(data, "rgb"),
        "decode-gray": lambda: decode_image(data, "gray"),
        "native-chain": lambda: run_chain(data, chain("rgb")),
        "pillow-chain": lambda: run_chain(data, chain("rgba")),
    }


@pytest.mark.parametrize("path", ["decode", "decode-gray", "native-chain", "pillow-chain"])
@pytest.mark.parametrize(("build", "pixels"), [(bomb, 65500 * 65500), (zeros_20000, 20000 * 20000)])
def test_jpeg_frame_size_over_the_limit_is_refused_before_decoding(
    build: object, pixels: int, path: str
) -> None:
    data = build()  # type: ignore[operator]
    assert len(data) < 1024
    with pytest.raises(LimitError, match="max_image_pixels") as info:
        all_paths(data)[path]()  # type: ignore[operator]
    assert info.value.name == "max_image_pixels" and info.value.value == pixels


def test_pixel_limit_is_read_where_it_is_used() -> None:
    pixels = np.random.default_rng(1).integers(0, 256, (48, 64, 3), np.uint8)
    for fmt, options in (("JPEG", {"quality": 95}), ("PNG", {}), ("BMP", {}), ("GIF", {})):
        data = encode(pixels, fmt, **options)
        with dataio.limits.scoped(max_image_pixels=48 * 64 - 1):
            with pytest.raises(LimitError) as info:
                decode_image(data, "rgb")
            assert info.value.value == 48 * 64
        with dataio.limits.scoped(max_image_pixels=48 * 64):
            expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            np.testing.assert_array_equal(decode_image(data, "rgb"), expected)


def test_png_header_size_is_checked_before_pillow_opens_it() -> None:
    data = png_with_size(20000, 20000)
    assert Image.open(io.BytesIO(png_with_size(7, 5))).size == (7, 5)  # the header is sound
    for path in ("decode", "native-chain", "pillow-chain"):
        with pytest.raises(LimitError, match="max_image_pixels"):
            all_paths(data)[path]()  # type: ignore[operator]


def test_progressive_scans_over_the_limit_are_refused() -> None:
    pixels = np.random.default_rng(2).integers(0, 256, (32, 32, 3), np.uint8)
    normal = encode(pixels, quality=90, progressive=True)
    scans = scan_count(normal)
    assert 2 < scans < 20
    hostile = many_scans(normal, 150)
    assert scan_count(hostile) == scans + 150
    for path in all_paths(hostile).values():
        with pytest.raises(LimitError, match="max_jpeg_scans") as info:
            path()  # type: ignore[operator]
        assert info.value.value == scans + 150
    # the count is exact: one under the file's scans refuses it, its scans decode it
    with dataio.limits.scoped(max_jpeg_scans=scans - 1), pytest.raises(LimitError):
        decode_image(normal, "rgb")
    with dataio.limits.scoped(max_jpeg_scans=scans):
        expected = np.asarray(Image.open(io.BytesIO(normal)).convert("RGB"))
        assert np.abs(decode_image(normal, "rgb").astype(int) - expected).max() <= 1


def test_baseline_jpeg_scans_are_not_counted() -> None:
    # one interleaved scan: no scan search, even under a limit of one
    data = encode(np.zeros((16, 16, 3), np.uint8))
    with dataio.limits.scoped(max_jpeg_scans=1):
        assert decode_image(data, "rgb").shape == (16, 16, 3)


def test_out_of_memory_is_reported_as_memory_not_corruption() -> None:
    # With the pixel limit raised past the bomb, the decoders run out of a 3 GiB address
    # space: simplejpeg (its output array) and the region decoder (libjpeg's own
    # allocation, which libjpeg reports like corrupt data).
    script = textwrap.dedent(
        f"""
        import os
        import resource
        import dataio
        from dataio.exceptions import DecodeError
        from dataio.udfs import image
        data = {bomb()!r}
        dataio.limits.set(max_image_pixels=2**40)
        if "libasan" not in os.environ.get("LD_PRELOAD", ""):
            resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        paths = [lambda: image.decode_image(data, "rgb")]
        if image._jpeg is not None:
            paths.append(
                lambda: image._decode_jpeg_region(data, "rgb", (65500, 65500), 1, (0, 0, 9, 9))
            )
        for path in paths:
            try:
                path()
            except DecodeError as exc:
                print("DecodeError:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=child_env()
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == (2 if image_module._jpeg is not None else 1), done.stdout
    for i, line in enumerate(lines):
        if i == 1 and "libasan" in os.environ.get("LD_PRELOAD", ""):
            # libjpeg allocates in strips under 1 GB, which ASan's per-allocation cap
            # lets through: it decodes until the data runs out
            assert line.startswith("DecodeError: "), line
        else:
            assert line.startswith("DecodeError: not enough memory"), line


@pytest.mark.skipif(image_module._jpeg is None, reason="the region decoder was not built")
@pytest.mark.parametrize(("source", "pil_mode"), [("gray", "L"), ("cmyk", "CMYK"), ("rgb", "RGB")])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_region_decoder_output_matches_the_asked_channels(
    source: str, pil_mode: str, channels: int
) -> None:
    # A frame whose components differ from the asked channels is converted or left to
    # the whole-image decoder (None); a buffer is always height x width x channels.
    rng = np.random.default_rng(3)
    shape = {"L": (40, 56), "CMYK": (40, 56, 4), "RGB": (40, 56, 3)}[pil_mode]
    img = Image.fromarray(rng.integers(0, 256, shape, np.uint8), pil_mode)
    buffer = io.BytesIO()
    img.save(buffer, "JPEG", quality=95)
    data = buffer.getvalue()
    found = image_module._jpeg.decode_region(data, channels, 1, 0, 0, 56, 40, False, False)
    if found is None:
        assert source == "cmyk"
    else:
        pixels, x, y, width, height = found
        assert len(pixels) == width * height * channels and (x, y) == (0, 0)
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        reference = Image.open(io.BytesIO(data))
        if mode == "L":
            reference.draft("L", reference.size)  # libjpeg's own gray: Y, not Pillow's mix
        expected = np.asarray(reference.convert(mode)).reshape(40, 56, -1)
        got = np.frombuffer(pixels, np.uint8).reshape(height, width, channels)
        assert np.abs(got.astype(int) - expected).max() <= 2
    # every mode decodes through the chains, whatever the source's components
    for mode in ("rgb", "gray", "rgba"):
        out, _ = run_chain(data, chain(mode))
        assert out.shape == (56, 56, {"rgb": 3, "gray": 1, "rgba": 4}[mode])


@pytest.mark.parametrize("progressive", [False, True])
def test_truncated_scans_are_decode_errors_on_every_path(progressive: bool) -> None:
    pixels = np.random.default_rng(4).integers(0, 256, (96, 128, 3), np.uint8)
    data = encode(pixels, quality=90, progressive=progressive)
    first_scan = data.index(b"\xff\xda")
    for cut in (first_scan + 12, first_scan + 200, (first_scan + len(data)) // 2, len(data) - 3):
        for path in all_paths(data[:cut]).values():
            with pytest.raises(DecodeError):
                path()  # type: ignore[operator]


def test_mutated_headers_raise_only_dataio_errors() -> None:
    rng = np.random.default_rng(5)
    base = encode(rng.integers(0, 256, (24, 40, 3), np.uint8), quality=80, progressive=True)
    header_end = segments(base)[-1][2]
    for _ in range(150):
        data = bytearray(base)
        for at in rng.integers(2, header_end, 3):
            data[at] = int(rng.integers(0, 256))
        for path in all_paths(bytes(data)).values():
            with contextlib.suppress(DataioError):  # success or a DataioError, nothing else
                path()  # type: ignore[operator]
