"""Shared fixtures: small photo-like image sets written once per test session."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from dataio.testing import make_jpegs, photo_like


@pytest.fixture(scope="session")
def jpeg_paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Twenty mixed-size JPEGs (sides 240..900)."""
    return make_jpegs(tmp_path_factory.mktemp("jpegs"), 20, min_side=240, max_side=900, seed=7)


@pytest.fixture(scope="session")
def png_bytes() -> bytes:
    """One 300x260 photo-like PNG, as bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(photo_like(300, 260, np.random.default_rng(3))).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def records(jpeg_paths: list[Path]) -> list[dict[str, object]]:
    """Records with a path, a label and a key for each JPEG."""
    return [{"image": str(p), "label": i, "key": p.stem} for i, p in enumerate(jpeg_paths)]


@pytest.fixture(scope="session")
def tiny_images() -> list[bytes]:
    """Eight small JPEGs (20..40 px) as bytes, cheap to decode in property tests."""
    from PIL import Image

    rng = np.random.default_rng(11)
    out = []
    for _ in range(8):
        w, h = (int(v) for v in rng.integers(20, 41, 2))
        buffer = io.BytesIO()
        Image.fromarray(photo_like(w, h, rng)).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out
