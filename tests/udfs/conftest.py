"""Fixtures for the kernel tests: photo-like images, encoded once per session."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from dataio.testing import make_jpegs, photo_like


def _encode(pixels: np.ndarray, fmt: str, **options: object) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **options)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def photo() -> np.ndarray:
    """A 317 (wide) x 243 (high) photo-like RGB image; odd sides catch rounding slips."""
    return photo_like(317, 243, np.random.default_rng(11))


@pytest.fixture(scope="session")
def photo_png(photo: np.ndarray) -> bytes:
    """``photo`` as a PNG: lossless, so kernels and Pillow see the same pixels."""
    return _encode(photo, "PNG")


@pytest.fixture(scope="session")
def photo_jpeg(photo: np.ndarray) -> bytes:
    """``photo`` as a quality-95 JPEG."""
    return _encode(photo, "JPEG", quality=95)


@pytest.fixture(scope="session")
def rgba_png(photo: np.ndarray) -> bytes:
    """``photo`` with an alpha ramp (0 on the left to 255 on the right), as a PNG."""
    alpha = np.broadcast_to(np.linspace(0, 255, photo.shape[1]).astype(np.uint8), photo.shape[:2])
    return _encode(np.dstack([photo, alpha]), "PNG")


@pytest.fixture(scope="session")
def encoded(photo: np.ndarray, photo_png: bytes, photo_jpeg: bytes) -> dict[str, bytes]:
    """``photo`` in every format the kernels read: name -> bytes."""
    return {
        "png": photo_png,
        "jpeg": photo_jpeg,
        "progressive-jpeg": _encode(photo, "JPEG", quality=95, progressive=True),
        "gray-jpeg": _encode(photo[..., 0], "JPEG", quality=95),
        "bmp": _encode(photo, "BMP"),
        "webp": _encode(photo, "WEBP", lossless=True),
        "tiff": _encode(photo, "TIFF"),
        "gif": _encode(photo, "GIF"),
    }


@pytest.fixture(scope="session")
def small_blobs() -> dict[str, bytes]:
    """A 40x30 image in each format, for fuzzing with truncations and byte flips."""
    pixels = photo_like(40, 30, np.random.default_rng(5))
    formats = {"jpeg": "JPEG", "png": "PNG", "gif": "GIF", "bmp": "BMP"}
    blobs = {name: _encode(pixels, fmt) for name, fmt in formats.items()}
    blobs["webp"] = _encode(pixels, "WEBP")
    blobs["tiff"] = _encode(pixels, "TIFF")
    blobs["progressive-jpeg"] = _encode(pixels, "JPEG", progressive=True)
    return blobs


@pytest.fixture(scope="session")
def mixed_jpegs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """24 photo-like JPEGs with sides 300..2400: many are large enough for DCT scaling."""
    root = tmp_path_factory.mktemp("mixed-jpegs")
    return make_jpegs(root, 24, min_side=300, max_side=2400, seed=1)
