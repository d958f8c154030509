"""Decoder op factories (``dataio/decoders.py``): parameters, reprs and validation."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

import dataio
from dataio import decoders
from dataio.udfs.image import decode_image


@pytest.mark.parametrize("mode", ["rgb", "gray", "rgba"])
def test_image_op(mode: str) -> None:
    op = decoders.image(mode=mode)
    assert (op.name, op.kind, op.random) == ("decode_image", "decode", False)
    assert op.params == (("mode", mode),)
    assert repr(op) == f"decode_image(mode={mode!r})"
    assert op.describe() == {"op": "decode_image", "mode": mode}


def test_image_defaults_to_rgb() -> None:
    assert decoders.image() == decoders.image(mode="rgb")


def test_image_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        decoders.image("rgb")


@pytest.mark.parametrize("mode", ["RGB", "grey", "cmyk", "", None, 3])
def test_unknown_mode_raises_plan_error(mode: Any) -> None:
    message = rf"decode_image mode must be one of \['rgb', 'gray', 'rgba'\], got {mode!r}"
    with pytest.raises(dataio.PlanError, match=message) as caught:
        decoders.image(mode=mode)
    assert isinstance(caught.value, ValueError)


def test_image_modes_lists_every_mode() -> None:
    assert decoders.IMAGE_MODES == ("rgb", "gray", "rgba")


@pytest.mark.parametrize(("mode", "channels"), [("rgb", 3), ("gray", 1), ("rgba", 4)])
def test_every_mode_runs_in_the_kernel(mode: str, channels: int) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 4), (200, 100, 50)).save(buffer, format="PNG")
    pixels = decode_image(buffer.getvalue(), decoders.image(mode=mode).param("mode"))
    assert pixels.shape == (4, 6, channels) and pixels.dtype == np.uint8


@pytest.mark.parametrize("mode", ["rgb", "gray", "rgba"])
def test_slot_shorthand_builds_the_same_op(mode: str) -> None:
    assert dataio.slot("image").decode_image(mode=mode).ops == (decoders.image(mode=mode),)


def _photo_jpeg() -> bytes:
    """A smooth 300x400 photo-like JPEG (gradients and a few edges)."""
    yy, xx = np.mgrid[0:300, 0:400].astype(np.float32)
    pixels = np.stack(
        [xx * 0.6, yy * 0.8, (xx + yy) * 0.3 + 40 * ((xx // 50 + yy // 50) % 2)], axis=-1
    )
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=92)
    return buffer.getvalue()


def test_exact_decoding_matches_pillow_and_the_fast_default_keeps_40_db() -> None:
    data = _photo_jpeg()
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((150, 110)))

    def crop(exact: bool) -> np.ndarray:
        slot = dataio.slot("image").decode_image(exact=exact).resize(h=110, w=150)
        pipe = dataio.pipeline(slot, dataio.batch(1))
        with pipe.bind([{"image": data}]).run("numpy") as loader:
            return np.asarray(next(iter(loader))["image"][0])

    def psnr(pixels: np.ndarray) -> float:
        mse = np.mean((pixels.astype(np.float64) - reference) ** 2)
        return float(10 * np.log10(255**2 / max(mse, 1e-12)))

    exact, fast = crop(True), crop(False)
    assert not np.array_equal(exact, fast)  # the option reaches the decoder
    assert psnr(exact) >= 50 and psnr(exact) > psnr(fast) >= 40
    assert repr(decoders.image(exact=True)) == "decode_image(exact=True, mode='rgb')"
    assert repr(decoders.image()) == "decode_image(mode='rgb')"  # default stays out of plans
    with pytest.raises(dataio.PlanError, match="exact"):
        decoders.image(exact="yes")  # type: ignore[arg-type]
