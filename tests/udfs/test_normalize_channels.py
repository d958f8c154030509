"""normalize after an op that changes the channel count (grayscale after an RGB decode)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dataio
from dataio.exceptions import DataioError
from dataio.testing import make_jpegs


def _images(pipe: dataio.Pipeline, paths: list[Path]) -> np.ndarray:
    with pipe.bind([{"image": str(p)} for p in paths]).run() as loader:
        return np.concatenate([batch["image"] for batch in loader])


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return make_jpegs(tmp_path_factory.mktemp("gray"), 3, min_side=32, max_side=48)


def test_one_value_normalizes_a_grayscale_channel(paths: list[Path]) -> None:
    gray = dataio.slot("image").decode_image().resize(h=8, w=8).grayscale(channels=1)
    plain = _images(dataio.pipeline(gray, dataio.batch(3)), paths)
    normed = _images(
        dataio.pipeline(gray.normalize(mean=[0.5], std=[0.25]), dataio.batch(3)), paths
    )
    assert plain.shape == (3, 8, 8, 1) and plain.dtype == np.uint8
    want = (plain.astype(np.float64) / 255.0 - 0.5) / 0.25  # the normalize formula, in NumPy
    assert normed.shape == (3, 1, 8, 8) and normed.dtype == np.float32  # normalize: CHW
    np.testing.assert_allclose(normed.transpose(0, 2, 3, 1), want, atol=1e-5)


def test_three_values_for_one_channel_are_refused(paths: list[Path]) -> None:
    gray = dataio.slot("image").decode_image().resize(h=8, w=8).grayscale(channels=1)
    pipe = dataio.pipeline(gray.normalize("imagenet"), dataio.batch(3))
    with pytest.raises(DataioError, match=r"normalize has 3 channel values .* 1 channel"):
        _images(pipe, paths)
