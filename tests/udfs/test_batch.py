"""Batch kernels (``dataio/udfs/batch.py``).

Oracles: mixup and cutmix results worked out by hand on tiny arrays, torchvision's
CutMix box rule, ``torch.nn.functional.batch_norm`` and ``one_hot``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataio.exceptions import PlanError, ShapeMismatchError, TransformError
from dataio.udfs.batch import batch_normalize, cutmix, mixup, one_hot, pad_batch

# -- mixup ------------------------------------------------------------------------------


def test_mixup_by_hand() -> None:
    x = np.array([[0, 0], [4, 8], [2, 2]], np.uint8)
    y = np.eye(3, dtype=np.float32)
    mixed, labels = mixup(x, y, 0.25, np.array([2, 0, 1]))
    # 0.25 * row + 0.75 * partner, with partners rows 2, 0, 1
    assert mixed.dtype == np.float32
    np.testing.assert_allclose(mixed, [[1.5, 1.5], [1.0, 2.0], [3.5, 6.5]])
    assert labels is not None and labels.dtype == np.float32
    np.testing.assert_allclose(labels, [[0.25, 0, 0.75], [0.75, 0.25, 0], [0, 0.75, 0.25]])


def test_mixup_without_labels_and_extremes() -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    perm = np.array([1, 2, 0])
    same, labels = mixup(x, None, 1.0, perm)
    assert labels is None
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(mixup(x, None, 0.0, perm)[0], x[perm])


@pytest.mark.parametrize(
    ("y", "perm", "lam", "error", "message"),
    [
        (None, np.array([0, 1]), 0.5, TransformError, "perm must hold 3 integer row indices"),
        (None, np.array([0, 1, 3]), 0.5, TransformError, r"perm indices must be in \[0, 3\)"),
        (None, np.array([0.0, 1.0, 2.0]), 0.5, TransformError, "integer row indices"),
        (None, np.array([0, 1, 2]), 1.5, TransformError, r"lam must be in \[0, 1\]"),
        (np.eye(2), np.array([0, 1, 2]), 0.5, ShapeMismatchError, "labels have 2 rows"),
        (np.arange(3), np.array([0, 1, 2]), 0.5, TransformError, "convert class indices"),
    ],
)
def test_mixup_rejects_bad_arguments(
    y: np.ndarray | None, perm: np.ndarray, lam: float, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        mixup(np.zeros((3, 2)), y, lam, perm)


# -- cutmix -----------------------------------------------------------------------------


def two_images() -> np.ndarray:
    """Two 1x4x4 (CHW) uint8 images: all 0 and all 9."""
    return np.stack([np.zeros((1, 4, 4)), np.full((1, 4, 4), 9)]).astype(np.uint8)


def test_cutmix_by_hand() -> None:
    x = two_images()
    # seed 8 draws the centre x=2, y=1; lam 0.75 gives half-sides int(0.5 * 0.5 * 4) = 1
    assert np.random.default_rng(8).integers(0, 4, 2).tolist() == [2, 1]
    out, labels, box = cutmix(
        x, np.eye(2), 0.75, np.array([1, 0]), layout="CHW", rng=np.random.default_rng(8)
    )
    assert box == (1, 0, 3, 2)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(
        out[0, 0], [[0, 9, 9, 0], [0, 9, 9, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        out[1, 0], [[9, 0, 0, 9], [9, 0, 0, 9], [9, 9, 9, 9], [9, 9, 9, 9]]
    )
    # the box covers 4 of 16 pixels: labels mix 0.75 / 0.25
    assert labels is not None
    np.testing.assert_allclose(labels, [[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_array_equal(x, two_images())  # the input is not modified


def test_cutmix_box_is_clipped_at_the_edge() -> None:
    # seed 11 draws the centre (0, 0): the box (-1, -1, 1, 1) clips to one pixel
    assert np.random.default_rng(11).integers(0, 4, 2).tolist() == [0, 0]
    out, labels, box = cutmix(
        two_images(), np.eye(2), 0.75, np.array([1, 0]), rng=np.random.default_rng(11)
    )
    assert box == (0, 0, 1, 1)
    assert out[0, 0].sum() == 9 and out[0, 0, 0, 0] == 9
    assert labels is not None
    np.testing.assert_allclose(labels, [[15 / 16, 1 / 16], [1 / 16, 15 / 16]])


def tv_box(height: int, width: int, lam: float, seed: int) -> tuple[int, int, int, int]:
    """torchvision v2 CutMix's box, with its two randint draws taken from NumPy."""
    rng = np.random.default_rng(seed)
    r_x, r_y = int(rng.integers(width)), int(rng.integers(height))
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * width), int(r * height)
    x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
    x2, y2 = min(r_x + r_w_half, width), min(r_y + r_h_half, height)
    return x1, y1, x2, y2


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("lam", [0.0, 0.3, 0.9])
def test_cutmix_follows_torchvision_in_both_layouts(seed: int, lam: float) -> None:
    rng = np.random.default_rng(100 + seed)
    chw = rng.integers(0, 256, (4, 3, 10, 14), dtype=np.uint8)
    perm = rng.permutation(4)
    y = rng.dirichlet(np.ones(5), 4).astype(np.float32)
    x1, y1, x2, y2 = tv_box(10, 14, lam, seed)
    expected = chw.copy()
    expected[:, :, y1:y2, x1:x2] = chw[perm][:, :, y1:y2, x1:x2]
    mixed_lam = 1.0 - (x2 - x1) * (y2 - y1) / 140
    expected_y = mixed_lam * y + (1 - mixed_lam) * y[perm]

    out, labels, box = cutmix(chw, y, lam, perm, layout="CHW", rng=np.random.default_rng(seed))
    assert box == (x1, y1, x2, y2) and labels is not None
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(labels, expected_y, rtol=1e-6)

    hwc = np.ascontiguousarray(chw.transpose(0, 2, 3, 1))
    out_hwc, labels_hwc, box_hwc = cutmix(
        hwc, y, lam, perm, layout="HWC", rng=np.random.default_rng(seed)
    )
    assert box_hwc == box
    np.testing.assert_array_equal(out_hwc, expected.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(labels_hwc, labels)


def test_cutmix_with_lam_one_changes_nothing() -> None:
    out, labels, box = cutmix(
        two_images(), None, 1.0, np.array([1, 0]), rng=np.random.default_rng(0)
    )
    assert labels is None and box[0] == box[2]
    np.testing.assert_array_equal(out, two_images())


def test_cutmix_rejects_bad_arguments() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(TransformError, match="batch of images"):
        cutmix(np.zeros((2, 4, 4)), None, 0.5, np.array([1, 0]), rng=rng)
    with pytest.raises(PlanError, match="layout"):
        cutmix(two_images(), None, 0.5, np.array([1, 0]), layout="NCHW", rng=rng)  # type: ignore[arg-type]


# -- padding ----------------------------------------------------------------------------


def test_pad_batch_by_hand() -> None:
    padded, mask = pad_batch(
        [np.array([1, 2], np.int32), np.array([3, 4, 5], np.int32), np.array([], np.int32)],
        value=-1,
    )
    assert padded.dtype == np.int32
    np.testing.assert_array_equal(padded, [[1, 2, -1], [3, 4, 5], [-1, -1, -1]])
    np.testing.assert_array_equal(
        mask, [[True, True, False], [True, True, True], [False, False, False]]
    )


def test_pad_batch_along_a_later_axis() -> None:
    rows = [np.ones((2, 3), np.float32), np.full((2, 5), 2, np.float32)]
    padded, mask = pad_batch(rows, axis=-1)
    assert padded.shape == (2, 2, 5)
    np.testing.assert_array_equal(padded[0], np.pad(rows[0], ((0, 0), (0, 2))))
    np.testing.assert_array_equal(padded[1], rows[1])
    np.testing.assert_array_equal(mask.sum(axis=1), [3, 5])


def test_pad_batch_rejects_mismatched_rows() -> None:
    with pytest.raises(ShapeMismatchError, match="along axis 0 only"):
        pad_batch([np.zeros((2, 3)), np.zeros((4, 2))])
    with pytest.raises(PlanError, match="out of range"):
        pad_batch([np.zeros(3)], axis=1)
    with pytest.raises(TransformError, match="at least one"):
        pad_batch([])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=8), st.integers(1, 3))
def test_pad_batch_keeps_every_row(lengths: list[int], width: int) -> None:
    rows = [np.arange(n * width).reshape(n, width) + 1 for n in lengths]
    padded, mask = pad_batch(rows)
    assert padded.shape == (len(rows), max(lengths), width)
    for i, row in enumerate(rows):
        np.testing.assert_array_equal(padded[i, : len(row)], row)
        assert (padded[i, len(row) :] == 0).all()
    np.testing.assert_array_equal(mask.sum(axis=1), lengths)
    assert all(mask[i, : lengths[i]].all() for i in range(len(rows)))


# -- normalization and one-hot ----------------------------------------------------------


def test_batch_normalize_matches_torch_batch_norm() -> None:
    x = np.random.default_rng(2).normal(3.0, 2.0, (6, 3, 5, 4)).astype(np.float32)
    expected = torch.nn.functional.batch_norm(
        torch.from_numpy(x), None, None, training=True, eps=1e-5
    ).numpy()
    out = batch_normalize(x, axes=(0, 2, 3))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_batch_normalize_by_hand_and_bad_axes() -> None:
    x = np.array([[1.0, 10.0], [3.0, 10.0]])
    np.testing.assert_allclose(batch_normalize(x[:, :1], axes=(0,), eps=0.0)[:, 0], [-1.0, 1.0])
    np.testing.assert_array_equal(batch_normalize(x, axes=(0,))[:, 1], [0.0, 0.0])
    with pytest.raises(PlanError, match="do not fit shape"):
        batch_normalize(x, axes=(2,))


def test_one_hot_matches_torch() -> None:
    labels = np.array([3, 0, 2, 3])
    expected = torch.nn.functional.one_hot(torch.from_numpy(labels), 5).numpy()
    out = one_hot(labels, 5)
    assert out.dtype == np.float32 and out.shape == (4, 5)
    np.testing.assert_array_equal(out, expected)
    assert one_hot([], 3).shape == (0, 3)


@pytest.mark.parametrize(
    ("labels", "classes", "error", "message"),
    [
        ([0, 5], 5, TransformError, r"labels must be in \[0, 5\), got \[5\]"),
        ([-1], 5, TransformError, r"got \[-1\]"),
        ([0.5], 5, TransformError, "integer class indices"),
        ([0], 0, PlanError, "num_classes"),
    ],
)
def test_one_hot_rejects_bad_labels(
    labels: list[float], classes: int, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        one_hot(np.array(labels), classes)
