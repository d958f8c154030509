"""Synthetic data for demos, tests and benchmarks: photo-like JPEGs of mixed sizes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np

from dataio.progress import iterate

__all__ = ["make_jpegs", "photo_like"]


def photo_like(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Draw a ``uint8`` RGB image with gradients, blurred shapes and fine texture.

    Flat noise would be unlike photographs (and compress and decode unlike them); this
    keeps large smooth regions, hard edges and low-amplitude detail.
    """
    from PIL import Image, ImageDraw, ImageFilter

    start, end = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3)
    ramp = np.add.outer(
        np.arange(height, dtype=np.float32) * np.float32(rng.uniform(-1, 1)),
        np.arange(width, dtype=np.float32) * np.float32(rng.uniform(-1, 1)),
    )
    ramp -= ramp.min()
    ramp /= ramp.max() + 1e-6
    base = start + (end - start).astype(np.float32) * ramp[..., None]
    image = Image.fromarray(base.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(8, 30))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.02, 0.3) * min(width, height)
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape([cx - r, cy - r, cx + r, cy + r], fill=fill)
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0))))
    texture = rng.normal(128, 6, (height // 3 + 1, width // 3 + 1, 3)).clip(0, 255)
    texture_image = Image.fromarray(texture.astype(np.uint8)).resize(
        (width, height), Image.Resampling.BICUBIC
    )
    detail = np.asarray(texture_image, np.int16) - 128
    return np.clip(np.asarray(image, np.int16) + detail, 0, 255).astype(np.uint8)


def make_jpegs(
    directory: str | os.PathLike[str],
    count: int,
    *,
    min_side: int = 300,
    max_side: int = 1600,
    seed: int = 0,
    quality: int = 90,
    progress: bool | Literal["auto"] | None = None,
) -> list[Path]:
    """Write ``count`` photo-like JPEGs with sides drawn from ``[min_side, max_side]``.

    Files that already exist with the expected name are kept, so repeated calls are cheap.
    ``progress`` shows a bar (see :mod:`dataio.progress`; by default only in a terminal
    or notebook).

    Example:
        >>> paths = dataio.testing.make_jpegs("/tmp/jpegs", 8)  # doctest: +SKIP
    """
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(count):
        width, height = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
        path = root / f"{seed}-{i:05d}-{width}x{height}.jpg"
        jobs.append((path, width, height, int(rng.integers(1 << 31))))

    def write(job: tuple[Path, int, int, int]) -> Path:
        path, width, height, image_seed = job
        if not path.exists():
            pixels = photo_like(width, height, np.random.default_rng(image_seed))
            partial = path.with_suffix(".tmp")
            Image.fromarray(pixels).save(partial, format="JPEG", quality=quality)
            partial.replace(path)
        return path

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        written = pool.map(write, jobs)
        return list(iterate(written, total=count, desc="make_jpegs", unit="img", enabled=progress))
