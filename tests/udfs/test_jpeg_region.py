"""The region JPEG decoder (``dataio.udfs._jpeg``) against simplejpeg's whole-image decode.

A region decode must give exactly the pixels a full decode gives inside the asked
region (one pixel in from a cropped column edge, where smooth chroma upsampling lacks a
neighbour), at every DCT scale, chroma subsampling and output mode the chains use.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import simplejpeg
from PIL import Image

import dataio
from dataio.engine.lower import image_spec
from dataio.exceptions import DecodeError
from dataio.udfs import image as image_module
from dataio.udfs.image import CHANNELS, region_decoder, run_chain


def test_region_decoder_is_built() -> None:
    # make test installs libjpeg62-turbo-dev before building the package; a missing
    # module there means the optional extension failed to build.
    assert region_decoder() is not None, "dataio.udfs._jpeg was not built"
    assert "libjpeg" in str(region_decoder())


def smooth_photo(height: int, width: int, seed: int) -> np.ndarray:
    """A photo-like RGB image: smooth gradients, a few edges, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    planes = [
        128
        + 90 * np.sin(x / (11 + 7 * c) + c) * np.cos(y / (13 + 5 * c))
        + rng.normal(0, 6, x.shape)
        for c in range(3)
    ]
    pixels = np.stack(planes, axis=-1)
    pixels[height // 3 : height // 2, width // 4 : width // 2] += 60  # a sharp-edged block
    return np.clip(pixels, 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, *, subsampling: int = 2, progressive: bool = False) -> bytes:
    out = io.BytesIO()
    mode = "L" if pixels.ndim == 2 else "RGB"
    Image.fromarray(pixels, mode).save(
        out, "JPEG", quality=88, subsampling=subsampling, progressive=progressive
    )
    return out.getvalue()


def whole(data: bytes, mode: str, scale: int, *, fast: bool = False) -> np.ndarray:
    """simplejpeg's decode of the whole image at 1/scale (the oracle); ``fast``: its fast
    IDCT and fast upsampling."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    size = {}
    if scale > 1:
        size = {"min_width": math.ceil(width / scale), "min_height": math.ceil(height / scale)}
    colorspace = {"rgb": "RGB", "gray": "GRAY", "rgba": "RGBA"}[mode]
    return simplejpeg.decode_jpeg(
        data, colorspace=colorspace, fastdct=fast, fastupsample=fast, **size
    )


ENCODINGS = {
    "420": {"subsampling": 2},
    "422": {"subsampling": 1},
    "444": {"subsampling": 0},
    "progressive-420": {"subsampling": 2, "progressive": True},
}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("mode", ["rgb", "gray", "rgba"])
@pytest.mark.parametrize("scale", [1, 2, 4, 8])
@pytest.mark.parametrize("fast", [False, True], ids=["accurate", "fast"])
def test_region_equals_whole_decode_inside_the_region(
    encoding: str, mode: str, scale: int, fast: bool
) -> None:
    """``fast``: the fast IDCT and fast (merged) upsampling, against simplejpeg's
    decode with the same two options."""
    data = encode(smooth_photo(333, 517, seed=scale), **ENCODINGS[encoding])  # type: ignore[arg-type]
    reference = whole(data, mode, scale, fast=fast)
    full_h, full_w = reference.shape[:2]
    rng = np.random.default_rng(len(encoding) * 10 + scale)
    for _ in range(8):
        x0, x1 = sorted(int(v) for v in rng.integers(0, full_w + 1, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, full_h + 1, 2))
        if x1 - x0 < 3 or y1 - y0 < 1:
            continue
        found = image_module._jpeg.decode_region(
            data, CHANNELS[mode], scale, x0, y0, x1, y1, fast, fast
        )
        buffer, x, y, width, height = found
        pixels = np.frombuffer(buffer, np.uint8).reshape(height, width, CHANNELS[mode])
        # the region holds what was asked: columns and the first row widened to an iMCU
        # boundary (at most 16 pixels), the last row exact
        assert x <= x0 and x0 - x < 16 and x + width >= x1
        assert y <= y0 and y0 - y < 16 and y + height == y1
        inner_x0 = x0 + 1 if x0 > 0 else 0
        inner_x1 = x1 - 1 if x1 < full_w else x1
        got = pixels[:, inner_x0 - x : inner_x1 - x]
        expected = reference[y:y1, inner_x0:inner_x1]
        np.testing.assert_array_equal(got, expected)


def test_odd_row_offsets_with_fast_upsampling_get_their_own_rows() -> None:
    """Skips that end inside a 4:2:0 row group gave rows from before the skip in
    libjpeg-turbo (its issue 915); the decoder skips whole iMCU rows only."""
    data = encode(smooth_photo(240, 64, seed=11), subsampling=2)
    reference = whole(data, "rgb", 1, fast=True)
    for y0 in range(1, 40):
        buffer, _, y, width, height = image_module._jpeg.decode_region(
            data, 3, 1, 0, y0, 64, y0 + 5, True, True
        )
        pixels = np.frombuffer(buffer, np.uint8).reshape(height, width, 3)
        np.testing.assert_array_equal(pixels, reference[y : y0 + 5], err_msg=f"y0={y0}")


def test_grayscale_jpeg_decodes_to_rgb_and_gray() -> None:
    gray = smooth_photo(120, 160, seed=3)[..., 0]
    data = encode(gray)
    for mode in ("rgb", "gray"):
        buffer, _, _, width, height = image_module._jpeg.decode_region(
            data, CHANNELS[mode], 1, 0, 0, 160, 120, False, False
        )
        pixels = np.frombuffer(buffer, np.uint8).reshape(height, width, CHANNELS[mode])
        np.testing.assert_array_equal(pixels, whole(data, mode, 1))


def test_cmyk_is_left_to_the_whole_image_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    Image.fromarray(smooth_photo(100, 140, seed=5)).convert("CMYK").save(out, "JPEG")
    data = out.getvalue()
    assert image_module._jpeg.decode_region(data, 3, 1, 0, 0, 140, 100, False, False) is None
    spec = image_spec(
        dataio.slot("image").decode_image(mode="rgb").resize_short(64).center_crop(h=60, w=60)
    )
    pixels, source = run_chain(data, spec)
    assert source == (100, 140) and pixels.shape == (60, 60, 3)
    monkeypatch.setattr(image_module, "_jpeg", None)  # simplejpeg converts CMYK itself
    expected, _ = run_chain(data, spec)
    np.testing.assert_array_equal(pixels, expected)


@pytest.mark.parametrize(
    "damage",
    ["truncated", "corrupt-scan", "empty-scan"],
)
def test_damaged_jpeg_inside_the_region_is_a_decode_error(damage: str) -> None:
    data = encode(smooth_photo(256, 256, seed=9))
    start = data.index(b"\xff\xda")  # start of scan
    if damage == "truncated":
        data = data[: start + (len(data) - start) // 3]
    elif damage == "corrupt-scan":
        middle = start + (len(data) - start) // 2
        data = data[:middle] + b"\xff\xd9" + bytes(64) + data[middle + 66 :]
    else:
        data = data[: start + 20]
    with pytest.raises(ValueError):
        image_module._jpeg.decode_region(data, 3, 1, 0, 0, 256, 256, False, False)
    spec = image_spec(
        dataio.slot("image").decode_image(mode="rgb").resize_short(128).center_crop(h=112, w=112)
    )
    with pytest.raises(DecodeError, match="corrupt or truncated"):
        run_chain(data, spec)


def test_garbage_and_bad_arguments_are_value_errors() -> None:
    decode = image_module._jpeg.decode_region
    with pytest.raises(ValueError):
        decode(b"\xff\xd8\xff" + bytes(40), 3, 1, 0, 0, 8, 8, False, False)
    small = encode(smooth_photo(16, 16, 1))
    with pytest.raises(ValueError, match="unsupported"):
        decode(small, 2, 1, 0, 0, 8, 8, False, False)  # two channels
    with pytest.raises(ValueError, match="unsupported"):
        decode(small, 3, 3, 0, 0, 8, 8, False, False)  # scale 1/3


@pytest.mark.parametrize(
    "ops",
    [
        ("resize_short", "center_crop"),
        ("center_crop",),
        ("resize",),
    ],
)
def test_chains_give_the_same_pixels_with_and_without_region_decodes(
    ops: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The region decode changes what is decoded, not the result (float rounding aside)."""
    slot = dataio.slot("image").decode_image(mode="rgb")
    for op in ops:
        if op == "resize_short":
            slot = slot.resize_short(200)
        elif op == "center_crop":
            slot = slot.center_crop(h=150, w=170)
        else:
            slot = slot.resize(h=90, w=110)
    spec = image_spec(slot.normalize("imagenet"))
    for seed, (height, width) in enumerate([(300, 450), (480, 260), (1100, 900)]):
        data = encode(smooth_photo(height, width, seed))
        with_regions, _ = run_chain(data, spec)
        monkeypatch.setattr(image_module, "_jpeg", None)
        whole_images, _ = run_chain(data, spec)
        monkeypatch.undo()
        np.testing.assert_allclose(with_regions, whole_images, rtol=0, atol=1e-5)


def test_region_decode_reads_fewer_pixels_than_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """The imagenet-style chain decodes only the crop's neighbourhood of a 640x480 JPEG."""
    data = encode(smooth_photo(480, 640, seed=2))
    spec = image_spec(
        dataio.slot("image").decode_image(mode="rgb").resize_short(256).center_crop(h=224, w=224)
    )
    seen: list[tuple[int, int]] = []
    decoder = image_module._jpeg

    class Spy:
        def decode_region(self, *args: object) -> object:
            found = decoder.decode_region(*args)
            seen.append((found[3], found[4]))
            return found

    monkeypatch.setattr(image_module, "_jpeg", Spy())
    run_chain(data, spec)
    ((width, height),) = seen
    # the crop covers 420x420 source pixels; the decode adds the filter's reach and
    # rounds the first column and row out to 16-pixel iMCUs
    assert 420 <= height <= 446 and 420 <= width <= 460
