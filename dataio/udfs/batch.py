"""Batch kernels: whole-batch arrays with the batch on axis 0.

``mixup`` and ``cutmix`` take their mixing weight and partner permutation from the
caller, who draws them from the batch's generator; ``cutmix`` draws only the box centre.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from dataio.exceptions import PlanError, ShapeMismatchError, TransformError

__all__ = ["batch_normalize", "cutmix", "cutmix_box", "mixup", "one_hot", "pad_batch"]


def _check_mix(x: np.ndarray, y: np.ndarray | None, lam: float, perm: np.ndarray, op: str) -> None:
    if not 0.0 <= lam <= 1.0:
        raise TransformError(f"{op} lam must be in [0, 1], got {lam!r}")
    size = x.shape[0]
    if perm.shape != (size,) or not np.issubdtype(perm.dtype, np.integer):
        raise TransformError(
            f"{op} perm must hold {size} integer row indices (one per batch row), "
            f"got {perm.dtype} of shape {perm.shape}"
        )
    if size and (perm.min() < 0 or perm.max() >= size):
        raise TransformError(f"{op} perm indices must be in [0, {size}), got {perm.tolist()}")
    if y is not None and y.shape[0] != size:
        raise ShapeMismatchError(
            f"{op} labels have {y.shape[0]} rows but the batch has {size}; "
            "pass one label row (one-hot or soft) per example"
        )


def _mix_labels(y: np.ndarray | None, lam: float, perm: np.ndarray) -> np.ndarray | None:
    if y is None:
        return None
    labels = np.asarray(y, dtype=np.float32)
    if labels.ndim < 2:
        raise TransformError(
            f"labels to mix must be one-hot or soft, shape [batch, classes], got {labels.shape}; "
            "convert class indices with one_hot first"
        )
    return np.float32(lam) * labels + np.float32(1.0 - lam) * labels[perm]


def mixup(
    x: np.ndarray, y: np.ndarray | None, lam: float, perm: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Mix each row with its partner: ``lam * x + (1 - lam) * x[perm]``, float32.

    Labels ``y`` (one-hot or soft, ``[batch, classes]``) mix with the same weight.

    Example:
        >>> mixup(np.array([[0.0], [4.0]]), None, 0.75, np.array([1, 0]))[0].ravel()
        array([1., 3.], dtype=float32)
    """
    x = np.asarray(x)
    perm = np.asarray(perm)
    _check_mix(x, y, lam, perm, "mixup")
    values = x.astype(np.float32)
    mixed = np.float32(lam) * values + np.float32(1.0 - lam) * values[perm]
    return mixed, _mix_labels(y, lam, perm)


def cutmix_box(
    height: int, width: int, lam: float, rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """torchvision's CutMix box ``(x1, y1, x2, y2)`` for mixing weight ``lam``.

    The box has sides ``sqrt(1 - lam)`` times the image's, centred at a point drawn
    uniformly (x, then y) from ``rng``, and is clipped to the image.
    """
    center_x = int(rng.integers(0, width))
    center_y = int(rng.integers(0, height))
    ratio = 0.5 * math.sqrt(1.0 - lam)
    half_w, half_h = int(ratio * width), int(ratio * height)
    x1, y1 = max(center_x - half_w, 0), max(center_y - half_h, 0)
    x2, y2 = min(center_x + half_w, width), min(center_y + half_h, height)
    return x1, y1, x2, y2


def cutmix(
    x: np.ndarray,
    y: np.ndarray | None,
    lam: float,
    perm: np.ndarray,
    *,
    layout: Literal["CHW", "HWC"] = "CHW",
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray | None, tuple[int, int, int, int]]:
    """Paste a box of each row's partner ``x[perm]`` into it, as torchvision's CutMix.

    ``x`` is ``[batch, C, H, W]`` (``layout="CHW"``) or ``[batch, H, W, C]``; it keeps
    its dtype. Labels mix by the box's actual area: ``lam' = 1 - box area / image area``.

    Returns:
        ``(x', y', (x1, y1, x2, y2))``; ``y'`` is ``None`` without labels.

    Example:
        >>> cutmix(images, labels, 0.7, np.array([1, 0]), rng=np.random.default_rng(0))
    """
    if layout not in ("CHW", "HWC"):
        raise PlanError(f"cutmix layout must be 'CHW' or 'HWC', got {layout!r}")
    x = np.asarray(x)
    perm = np.asarray(perm)
    if x.ndim != 4:
        raise TransformError(
            f"cutmix takes a batch of images [batch, {', '.join(layout)}], got shape {x.shape}"
        )
    _check_mix(x, y, lam, perm, "cutmix")
    height, width = (x.shape[2], x.shape[3]) if layout == "CHW" else (x.shape[1], x.shape[2])
    x1, y1, x2, y2 = cutmix_box(height, width, lam, rng)
    out = x.copy()
    if layout == "CHW":
        out[:, :, y1:y2, x1:x2] = x[perm, :, y1:y2, x1:x2]
    else:
        out[:, y1:y2, x1:x2] = x[perm, y1:y2, x1:x2]
    actual = 1.0 - (x2 - x1) * (y2 - y1) / (width * height)
    return out, _mix_labels(y, actual, perm), (x1, y1, x2, y2)


def pad_batch(
    arrays: Sequence[np.ndarray], *, axis: int = 0, value: float = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Pad variable-length arrays to the longest along ``axis`` and stack them.

    Returns:
        ``(padded, mask)``: ``padded`` is ``[batch, ...]`` with the padded axis at
        ``axis + 1``; ``mask`` is bool ``[batch, longest]``, True where data is real.

    Raises:
        ShapeMismatchError: the arrays differ in a dimension other than ``axis``.

    Example:
        >>> padded, mask = pad_batch([np.ones(2), np.ones(3)])
        >>> mask.tolist()
        [[True, True, False], [True, True, True]]
    """
    if not arrays:
        raise TransformError("pad_batch needs at least one array")
    arrays = [np.asarray(a) for a in arrays]
    ndim = arrays[0].ndim
    if not -ndim <= axis < ndim:
        raise PlanError(f"pad axis {axis} is out of range for {ndim}-dimensional rows")
    axis %= ndim
    rest = [a.shape[:axis] + a.shape[axis + 1 :] for a in arrays]
    if any(a.ndim != ndim for a in arrays) or len(set(rest)) > 1:
        shapes = sorted({a.shape for a in arrays})
        raise ShapeMismatchError(
            f"rows can be padded along axis {axis} only; they differ elsewhere: {shapes}"
        )
    lengths = np.array([a.shape[axis] for a in arrays])
    longest = int(lengths.max())
    shape = list(arrays[0].shape)
    shape[axis] = longest
    out = np.full((len(arrays), *shape), value, dtype=np.result_type(*arrays))
    for row, a in zip(out, arrays, strict=True):
        index = [slice(None)] * ndim
        index[axis] = slice(0, a.shape[axis])
        row[tuple(index)] = a
    mask = np.arange(longest)[None, :] < lengths[:, None]
    return out, mask


def batch_normalize(x: np.ndarray, *, axes: tuple[int, ...], eps: float = 1e-5) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` with mean and variance over ``axes``; float32.

    ``axes=(0, 2, 3)`` on ``[batch, C, H, W]`` normalizes each channel with batch
    statistics, as batch norm does in training.

    Example:
        >>> batch_normalize(np.array([[1.0], [3.0]]), axes=(0,), eps=0.0).ravel()
        array([-1.,  1.], dtype=float32)
    """
    values = np.asarray(x, dtype=np.float64)
    try:
        mean = values.mean(axis=axes, keepdims=True)
        var = values.var(axis=axes, keepdims=True)
    except np.exceptions.AxisError as exc:
        raise PlanError(f"normalization axes {axes!r} do not fit shape {values.shape}") from exc
    return ((values - mean) / np.sqrt(var + eps)).astype(np.float32)


def one_hot(labels: np.ndarray | Sequence[int], num_classes: int) -> np.ndarray:
    """Class indices ``[batch]`` to float32 one-hot rows ``[batch, num_classes]``.

    Example:
        >>> one_hot([2, 0], 3)
        array([[0., 0., 1.],
               [1., 0., 0.]], dtype=float32)
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0:
        raise PlanError(f"num_classes must be a positive integer, got {num_classes!r}")
    indices = np.asarray(labels)
    if indices.ndim != 1 or not (indices.size == 0 or np.issubdtype(indices.dtype, np.integer)):
        raise TransformError(
            f"one_hot takes integer class indices of shape [batch], got {indices.dtype} "
            f"of shape {indices.shape}"
        )
    if indices.size and (indices.min() < 0 or indices.max() >= num_classes):
        bad = indices[(indices < 0) | (indices >= num_classes)]
        raise TransformError(
            f"labels must be in [0, {num_classes}), got {bad[:5].tolist()}; check num_classes"
        )
    out = np.zeros((indices.shape[0], num_classes), np.float32)
    out[np.arange(indices.shape[0]), indices.astype(np.intp)] = 1.0
    return out
