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
