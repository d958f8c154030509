"""Per-record image array kernels (``dataio/udfs/arrays.py``).

Oracles: ``np.pad`` and ``np.rot90``; Pillow's ``convert("L")`` for grayscale and
``ImageEnhance.Brightness``; torchvision's functional tensor ops for color jitter, typed
out below in torch (torchvision is not installed here) exactly as torchvision writes them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance

from dataio.exceptions import PlanError, TransformError
from dataio.testing import photo_like
from dataio.udfs.arrays import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    color_jitter,
    grayscale,
    jitter_params,
    pad,
    rotate90,
    standardize,
    to_dtype,
)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    """A 37 (wide) x 29 (high) photo-like RGB image."""
    return photo_like(37, 29, np.random.default_rng(4))


@pytest.fixture(scope="module")
def saturated() -> np.ndarray:
    """Random pixels, so every hue sector and clamp is reached."""
    return np.random.default_rng(8).integers(0, 256, (23, 19, 3), dtype=np.uint8)


# -- torchvision's functional tensor ops (torchvision/transforms/_functional_tensor.py) --


def tv_blend(img1: torch.Tensor, img2: torch.Tensor, ratio: float) -> torch.Tensor:
    bound = 1.0 if img1.is_floating_point() else 255.0
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, bound).to(img1.dtype)


def tv_gray(img: torch.Tensor) -> torch.Tensor:
    r, g, b = img.unbind(dim=-3)
    return (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(dim=-3)


def tv_brightness(img: torch.Tensor, factor: float) -> torch.Tensor:
    return tv_blend(img, torch.zeros_like(img), factor)


def tv_contrast(img: torch.Tensor, factor: float) -> torch.Tensor:
    dtype = img.dtype if torch.is_floating_point(img) else torch.float32
    gray = tv_gray(img) if img.shape[-3] == 3 else img
    mean = torch.mean(gray.to(dtype), dim=(-3, -2, -1), keepdim=True)
    return tv_blend(img, mean, factor)


def tv_saturation(img: torch.Tensor, factor: float) -> torch.Tensor:
    if img.shape[-3] == 1:
        return img
    return tv_blend(img, tv_gray(img), factor)


def tv_rgb2hsv(img: torch.Tensor) -> torch.Tensor:
    r, g, b = img.unbind(dim=-3)
    maxc = torch.max(img, dim=-3).values
    minc = torch.min(img, dim=-3).values
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    cr_divisor = torch.where(eqc, ones, cr)
    rc = (maxc - r) / cr_divisor
    gc = (maxc - g) / cr_divisor
    bc = (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return torch.stack((h, s, maxc), dim=-3)


def tv_hsv2rgb(img: torch.Tensor) -> torch.Tensor:
    h, s, v = img.unbind(dim=-3)
    i = torch.floor(h * 6.0)
    f = (h * 6.0) - i
    i = i.to(dtype=torch.int32)
    p = torch.clamp((v * (1.0 - s)), 0.0, 1.0)
    q = torch.clamp((v * (1.0 - s * f)), 0.0, 1.0)
    t = torch.clamp((v * (1.0 - s * (1.0 - f))), 0.0, 1.0)
    i = i % 6
    mask = i.unsqueeze(dim=-3) == torch.arange(6).view(-1, 1, 1)
    a1 = torch.stack((v, q, p, p, t, v), dim=-3)
    a2 = torch.stack((t, v, v, q, p, p), dim=-3)
    a3 = torch.stack((p, p, t, v, v, q), dim=-3)
    a4 = torch.stack((a1, a2, a3), dim=-4)
    return torch.einsum("...ijk, ...xijk -> ...xjk", mask.to(dtype=img.dtype), a4)


def tv_hue(img: torch.Tensor, factor: float) -> torch.Tensor:
    if img.shape[-3] == 1:
        return img
    orig_dtype = img.dtype
    x = img.to(torch.float32) / 255.0 if orig_dtype == torch.uint8 else img
    h, s, v = tv_rgb2hsv(x).unbind(dim=-3)
    h = (h + factor) % 1.0
    out = tv_hsv2rgb(torch.stack((h, s, v), dim=-3))
    if orig_dtype == torch.uint8:
        return out.mul(255.0 + 1.0 - 1e-3).to(torch.uint8)
    return out


TV = {
    "brightness": tv_brightness,
    "contrast": tv_contrast,
    "saturation": tv_saturation,
    "hue": tv_hue,
}
OURS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "brightness": adjust_brightness,
    "contrast": adjust_contrast,
    "saturation": adjust_saturation,
    "hue": adjust_hue,
}


def torchvision(x: np.ndarray, steps: list[tuple[str, float]]) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))
    for name, factor in steps:
        t = TV[name](t, factor)
    return t.numpy().transpose(1, 2, 0)


def assert_same_image(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


# -- pad, rotate, grayscale -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize(
    ("top", "bottom", "left", "right"), [(0, 0, 0, 0), (1, 2, 3, 4), (5, 0, 0, 1)]
)
def test_pad_matches_np_pad(
    image: np.ndarray, dtype: type, top: int, bottom: int, left: int, right: int
) -> None:
    x: np.ndarray = image.astype(dtype)
    out = pad(x, top=top, bottom=bottom, left=left, right=right, value=7)
    expected = np.pad(x, ((top, bottom), (left, right), (0, 0)), constant_values=7)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, expected)


def test_pad_per_channel_value(image: np.ndarray) -> None:
    out = pad(image, top=1, bottom=0, left=0, right=2, value=(10, 20, 30))
    assert out.shape == (30, 39, 3)
    np.testing.assert_array_equal(out[0], np.broadcast_to([10, 20, 30], (39, 3)))
    np.testing.assert_array_equal(out[1:, -2:], np.broadcast_to([10, 20, 30], (29, 2, 3)))
    np.testing.assert_array_equal(out[1:, :37], image)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": 300}, TransformError, "does not fit uint8"),
        ({"value": 1.5}, TransformError, "does not fit uint8"),
        ({"value": (1, 2)}, TransformError, "one per channel"),
        ({"top": -1}, PlanError, "non-negative integer"),
    ],
)
def test_pad_rejects_bad_options(
    image: np.ndarray, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    options: dict[str, object] = {"top": 1, "bottom": 1, "left": 1, "right": 1, **kwargs}
    with pytest.raises(error, match=message):
        pad(image, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 4, 5])
def test_rotate90_matches_np_rot90(image: np.ndarray, k: int) -> None:
    out = rotate90(image, k)
    np.testing.assert_array_equal(out, np.rot90(image, k))
    assert out.flags.c_contiguous


def test_rotate90_is_counter_clockwise() -> None:
    x = np.array([[1, 2], [3, 4]], np.uint8)[..., None]
    np.testing.assert_array_equal(rotate90(x)[..., 0], [[2, 4], [1, 3]])


@pytest.mark.parametrize("fixture", ["image", "saturated"])
def test_grayscale_matches_pillow(fixture: str, request: pytest.FixtureRequest) -> None:
    x = request.getfixturevalue(fixture)
    expected = np.asarray(Image.fromarray(x).convert("L"))
    np.testing.assert_array_equal(grayscale(x)[..., 0], expected)
    three = grayscale(x, channels=3)
    assert three.shape == (*x.shape[:2], 3)
    for c in range(3):
        np.testing.assert_array_equal(three[..., c], expected)


def test_grayscale_of_rgba_ignores_alpha(saturated: np.ndarray) -> None:
    alpha = np.full(saturated.shape[:2], 9, np.uint8)
    rgba = np.dstack([saturated, alpha])
    expected = np.asarray(Image.fromarray(rgba, "RGBA").convert("L"))
    np.testing.assert_array_equal(grayscale(rgba)[..., 0], expected)


def test_grayscale_float_and_gray(image: np.ndarray) -> None:
    x = image.astype(np.float32) / 255
    expected = 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]
    out = grayscale(x)
    assert out.dtype == np.float32 and out.shape == (29, 37, 1)
    np.testing.assert_allclose(out[..., 0], expected, rtol=1e-6)
    gray = image[..., :1]
    np.testing.assert_array_equal(grayscale(gray), gray)
    with pytest.raises(TransformError, match="1, 3 or 4 channels"):
        grayscale(image[..., :2])


def test_kernels_want_hwc(image: np.ndarray) -> None:
    with pytest.raises(TransformError, match=r"\(height, width, channels\)"):
        rotate90(image[..., 0])


# -- color jitter -----------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0.0, 0.5, 1.0, 1.37, 2.0])
def test_brightness_matches_pillow(image: np.ndarray, factor: float) -> None:
    expected = np.asarray(ImageEnhance.Brightness(Image.fromarray(image)).enhance(factor))
    assert_same_image(adjust_brightness(image, factor), expected)


@pytest.mark.parametrize("name", ["brightness", "contrast", "saturation"])
@pytest.mark.parametrize("factor", [0.0, 0.6, 1.0, 1.45])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_blend_adjustments_match_torchvision(
    saturated: np.ndarray, image: np.ndarray, name: str, factor: float, dtype: str
) -> None:
    for x in (saturated, image):
        x = x if dtype == "uint8" else x.astype(np.float32) / 255
        out = OURS[name](x, factor)
        expected = torchvision(x, [(name, factor)])
        if dtype == "uint8":  # float32 arithmetic in the same order: truncation agrees
            assert_same_image(out, expected)
        else:
            assert out.dtype == np.float32
            np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("factor", [-0.5, -0.23, 0.0, 0.1, 0.37, 0.5])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_hue_matches_torchvision(
    saturated: np.ndarray, image: np.ndarray, factor: float, dtype: str
) -> None:
    for x in (saturated, image):
        x = x if dtype == "uint8" else x.astype(np.float32) / 255
        out = adjust_hue(x, factor)
        expected = torchvision(x, [("hue", factor)])
        if dtype == "uint8":
            assert_same_image(out, expected)
        else:
            np.testing.assert_allclose(out, expected, atol=1e-5)


def test_hue_turns_red_into_green_and_blue() -> None:
    red = np.zeros((1, 1, 3), np.uint8)
    red[..., 0] = 255
    np.testing.assert_array_equal(adjust_hue(red, 1 / 3)[0, 0], [0, 255, 0])
    np.testing.assert_array_equal(adjust_hue(red, -1 / 3)[0, 0], [0, 0, 255])


def test_one_channel_images(image: np.ndarray) -> None:
    gray = image[..., :1]
    np.testing.assert_array_equal(adjust_hue(gray, 0.3), gray)
    np.testing.assert_array_equal(adjust_saturation(gray, 0.3), gray)
    assert_same_image(adjust_contrast(gray, 0.5), torchvision(gray, [("contrast", 0.5)]))


SETTINGS = {"brightness": 0.4, "contrast": 0.3, "saturation": 0.5, "hue": 0.2}
NAMES = ("brightness", "contrast", "saturation", "hue")


@pytest.mark.parametrize("seed", range(6))
def test_color_jitter_is_torchvision_color_jitter(saturated: np.ndarray, seed: int) -> None:
    # ColorJitter.get_params: a random order first, then each factor in a fixed order.
    rng = np.random.default_rng(seed)
    order = rng.permutation(4)
    factors = {
        "brightness": rng.uniform(0.6, 1.4),
        "contrast": rng.uniform(0.7, 1.3),
        "saturation": rng.uniform(0.5, 1.5),
        "hue": rng.uniform(-0.2, 0.2),
    }
    expected = torchvision(saturated, [(NAMES[i], factors[NAMES[i]]) for i in order])
    out = color_jitter(saturated, np.random.default_rng(seed), **SETTINGS)
    assert_same_image(out, expected)


def test_jitter_factor_ranges_and_skipped_settings() -> None:
    rng = np.random.default_rng(0)
    seen: dict[str, list[float]] = {name: [] for name in NAMES}
    for _ in range(400):
        for name, factor in jitter_params(rng, brightness=1.5, saturation=0.25, hue=0.5):
            seen[name].append(factor)
    assert seen["contrast"] == []  # zero settings are never drawn or applied
    for name, (low, high) in {
        "brightness": (0.0, 2.5),  # max(0, 1 - 1.5)
        "saturation": (0.75, 1.25),
        "hue": (-0.5, 0.5),
    }.items():
        values = np.array(seen[name])
        assert len(values) == 400 and values.min() >= low and values.max() <= high
        assert values.min() < low + 0.1 * (high - low) and values.max() > high - 0.1 * (high - low)


def test_jitter_order_is_random() -> None:
    rng = np.random.default_rng(1)
    orders = {tuple(n for n, _ in jitter_params(rng, **SETTINGS)) for _ in range(200)}
    assert len(orders) == 24


def test_color_jitter_without_settings_is_identity(image: np.ndarray) -> None:
    np.testing.assert_array_equal(color_jitter(image, np.random.default_rng(0)), image)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"brightness": -0.1}, "brightness must be a non-negative number"),
        ({"hue": 0.6}, r"hue must be in \[0, 0.5\]"),
    ],
)
def test_color_jitter_rejects_bad_settings(
    image: np.ndarray, kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        color_jitter(image, np.random.default_rng(0), **kwargs)


def test_color_jitter_wants_rgb_or_gray(image: np.ndarray) -> None:
    rgba = np.dstack([image, image[..., :1]])
    with pytest.raises(TransformError, match="1 or 3 channels"):
        color_jitter(rgba, np.random.default_rng(0), brightness=0.2)


# -- dtype and standardize --------------------------------------------------------------


def test_to_dtype_scaling_round_trips(saturated: np.ndarray) -> None:
    floats = to_dtype(saturated, "float32", scale=True)
    assert floats.dtype == np.float32
    np.testing.assert_allclose(floats, saturated / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(to_dtype(floats, "uint8", scale=True), saturated)
    half = to_dtype(saturated, "float16", scale=True)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(to_dtype(half, "uint8", scale=True), saturated)


def test_to_dtype_without_scaling() -> None:
    x = np.array([[[-3.0, 0.4, 0.6, 254.5, 300.0]]], np.float32)
    np.testing.assert_array_equal(to_dtype(x, "uint8"), [[[0, 0, 1, 254, 255]]])
    assert to_dtype(np.array([[[7]]], np.uint8), "float32")[0, 0, 0] == 7.0
    x16 = to_dtype(x, "float16")
    assert x16.dtype == np.float16 and x16[0, 0, 1] == np.float16(0.4)
    assert to_dtype(x, "float32") is x
    with pytest.raises(PlanError, match="dtype must be one of"):
        to_dtype(x, "complex64")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_standardize_matches_torch(image: np.ndarray, dtype: type) -> None:
    x: np.ndarray = image.astype(dtype)
    t = torch.from_numpy(image.astype(np.float64))
    mean = t.mean(dim=(0, 1))
    std = t.std(dim=(0, 1), unbiased=False)
    expected = ((t - mean) / std).numpy()
    out = standardize(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-5)
    np.testing.assert_allclose(out.mean(axis=(0, 1)), 0, atol=1e-5)


def test_standardize_flat_channel_uses_eps() -> None:
    x = np.full((4, 4, 1), 5.0, np.float32)
    np.testing.assert_array_equal(standardize(x, eps=0.5), np.zeros_like(x))
