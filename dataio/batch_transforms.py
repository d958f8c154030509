"""Batch transform factories (``dataio.batch_transforms``): ops on whole batches.

They follow the shape stage and precede Python batch maps. Random ones draw from a
generator seeded by ``(seed, epoch, the batch's first record index, transform number)``.
After ``mixup`` or ``cutmix`` rows are blends of several records, so per-row metadata
(keys, indices, sizes, passthrough values) is no longer available; ``padding``,
``shuffle`` and ``normalization`` keep it (``shuffle`` reorders it with the rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from dataio.exceptions import PlanError
from dataio.plan.ops import Op, choice, make_op, positive_int

__all__ = ["cutmix", "mixup", "normalization", "padding", "shuffle"]


def _alpha(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise PlanError(f"{what} alpha must be a positive number, got {value!r}")
    return float(value)


def _slots(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise PlanError(f"{what} needs slot names, got {value!r}")
    return names


def mixup(
    *,
    alpha: float = 0.2,
    slots: str | Sequence[str] = ("image",),
    label: str | None = None,
    num_classes: int | None = None,
) -> Op:
    """Blend each row with another row of the batch: ``lam * x + (1 - lam) * x[perm]``.

    ``lam`` is drawn from Beta(alpha, alpha) per batch. With ``label`` (integer class
    ids and ``num_classes``, or soft labels) the labels become the same blend of one-hot
    rows.

    Example:
        >>> dataio.batch_transforms.mixup(alpha=0.4, label="label", num_classes=10)
        mixup(alpha=0.4, label='label', num_classes=10, slots=('image',))
    """
    if num_classes is not None:
        positive_int(num_classes, "mixup num_classes")
    return make_op(
        "mixup",
        "batch",
        random=True,
        alpha=_alpha(alpha, "mixup"),
        slots=_slots(slots, "mixup"),
        label=label,
        num_classes=num_classes,
    )


def cutmix(
    *,
    alpha: float = 1.0,
    slots: str | Sequence[str] = ("image",),
    label: str | None = None,
    num_classes: int | None = None,
    layout: Literal["CHW", "HWC"] = "CHW",
) -> Op:
    """Paste a box of another row into each image; labels mix by the box's area.

    Example:
        >>> dataio.batch_transforms.cutmix(alpha=1.0, label="label", num_classes=10)
        cutmix(alpha=1.0, label='label', layout='CHW', num_classes=10, slots=('image',))
    """
    if num_classes is not None:
        positive_int(num_classes, "cutmix num_classes")
    return make_op(
        "cutmix",
        "batch",
        random=True,
        alpha=_alpha(alpha, "cutmix"),
        slots=_slots(slots, "cutmix"),
        label=label,
        num_classes=num_classes,
        layout=choice(layout, ("CHW", "HWC"), "cutmix layout"),
    )


def padding(slots: str | Sequence[str], *, axis: int = 0, value: float = 0) -> Op:
    """Pad variable-length rows of ``slots`` to the batch's longest along ``axis``.

    Adds a ``"<slot>_mask"`` column: bool ``[batch, length]``, True on real data.

    Example:
        >>> dataio.batch_transforms.padding("audio")
        padding(axis=0, slots=('audio',), value=0)
    """
    if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
        raise PlanError(f"padding axis must be a non-negative integer, got {axis!r}")
    return make_op("padding", "batch", slots=_slots(slots, "padding"), axis=axis, value=value)


def shuffle() -> Op:
    """Shuffle the rows within each batch (metadata moves with its row).

    Example:
        >>> dataio.batch_transforms.shuffle()
        shuffle()
    """
    return make_op("shuffle", "batch", random=True)


def normalization(
    slots: str | Sequence[str] = ("image",), *, axes: Sequence[int] | None = None, eps: float = 1e-5
) -> Op:
    """Standardize with batch statistics: ``(x - mean) / sqrt(var + eps)`` over ``axes``.

    ``axes`` index the batched array (0 is the batch); the default keeps axis 1
    (channels of a CHW image) and reduces over every other axis.

    Example:
        >>> dataio.batch_transforms.normalization("image")
        normalization(axes=None, eps=1e-05, slots=('image',))
    """
    chosen = None if axes is None else tuple(int(a) for a in axes)
    if chosen is not None and (not chosen or any(a < 0 for a in chosen)):
        raise PlanError(f"normalization axes must be non-negative integers, got {axes!r}")
    return make_op(
        "normalization", "batch", slots=_slots(slots, "normalization"), axes=chosen, eps=float(eps)
    )
