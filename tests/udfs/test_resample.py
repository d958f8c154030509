"""The compiled resampler (``dataio/udfs/_resample.c``): its SIMD passes against its
portable ones.

The image tests check both against Pillow; here the two compiled paths are compared
directly over every channel count, layout, dtype and flip, at shapes that exercise the
vector loops' tails (widths that are not multiples of 8) and every tap width (up to 4
taps, up to 8, and more for downscales of 3.5x and beyond).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dataio.udfs.image import native_available

pytestmark = pytest.mark.skipif(not native_available(), reason="the C kernel was not built")

MEAN, STD = (0.485, 0.456, 0.406, 0.5), (0.229, 0.224, 0.225, 0.25)
# (source height, width, box as fractions of the source, output height, width)
CASES = [
    (243, 317, (0.0, 0.0, 1.0, 1.0), 224, 224),  # mild downscale: up to 4 taps
    (480, 640, (0.0, 0.0, 1.0, 1.0), 192, 256),  # 2.5x: up to 8 taps
    (480, 640, (0.1, 0.05, 0.9, 0.95), 67, 93),  # >4x: more than 8 taps, odd widths
    (31, 45, (0.0, 0.0, 1.0, 1.0), 70, 101),  # upscale
    (200, 150, (0.25, 0.3, 0.7, 0.8), 13, 5),  # narrower than one vector
]


def resample(
    native: Any, src: np.ndarray, box: tuple[float, ...], out_hw: tuple[int, int], **opts: bool
) -> np.ndarray:
    height, width, channels = src.shape
    out_h, out_w = out_hw
    chw, out_float = opts["chw"], opts["out_float"]
    out = np.empty(
        (channels, out_h, out_w) if chw else (out_h, out_w, channels),
        np.float32 if out_float else np.uint8,
    )
    mean, std = np.array(MEAN[:channels]), np.array(STD[:channels])
    scale, bias = (1 / (255 * std)).tolist(), (-mean / std).tolist()
    native.resample_into(
        src, height, width, channels, box, out, out_h, out_w, chw, out_float,
        scale if out_float else None, bias if out_float else None,
        opts["hflip"], opts["vflip"],
    )  # fmt: skip
    return out


@pytest.fixture
def native() -> Iterator[Any]:
    from dataio.udfs import _resample

    previous = _resample.simd() != "portable"
    try:
        yield _resample
    finally:
        _resample.set_simd(previous)


def test_set_simd_names_the_passes(native: Any) -> None:
    assert native.set_simd(False) == "portable"
    assert native.simd() == "portable"
    assert native.set_simd(True) in ("avx2", "portable")


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_simd_matches_portable(native: Any, channels: int, case: int) -> None:
    if native.set_simd(True) == "portable":
        pytest.skip("this CPU has no SIMD passes (the portable ones ran everywhere else)")
    height, width, fractions, out_h, out_w = CASES[case]
    src = np.random.default_rng(case).integers(0, 256, (height, width, channels), np.uint8)
    left, top, right, bottom = fractions
    box = (left * width, top * height, right * width, bottom * height)
    for chw, out_float, hflip, vflip in itertools.product([False, True], repeat=4):
        opts = {"chw": chw, "out_float": out_float, "hflip": hflip, "vflip": vflip}
        native.set_simd(True)
        simd = resample(native, src, box, (out_h, out_w), **opts)
        native.set_simd(False)
        portable = resample(native, src, box, (out_h, out_w), **opts)
        if out_float:  # the same sums in another order (and fused multiply-adds)
            np.testing.assert_allclose(simd, portable, rtol=0, atol=1e-5, err_msg=str(opts))
        else:  # a value on a rounding boundary may land one level apart
            difference = np.abs(simd.astype(np.int16) - portable.astype(np.int16))
            assert difference.max() <= 1, opts
            assert np.count_nonzero(difference) <= max(1, difference.size // 1000), opts
