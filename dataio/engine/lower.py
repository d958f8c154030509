"""Lowering: slot chains of plan ops become kernel specs the executor can run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataio.exceptions import PlanError
from dataio.pipeline import Pipeline, Slot
from dataio.udfs.image import ImageSpec

__all__ = ["SlotKernel", "lower"]


@dataclass(frozen=True)
class SlotKernel:
    """What the executor runs for one slot: a passthrough or an image chain."""

    name: str
    field: str
    image: ImageSpec | None

    @property
    def passthrough(self) -> bool:
        """True when the slot delivers Python values unchanged."""
        return self.image is None

    @property
    def row_shape(self) -> tuple[int, ...] | None:
        """The per-row output shape when fixed by the chain, else ``None``."""
        return None if self.image is None else self.image.static_shape()

    @property
    def dtype(self) -> np.dtype:
        """The output dtype of a tensor slot."""
        assert self.image is not None
        return np.dtype(self.image.dtype)


def _lower_image(slot: Slot) -> ImageSpec:
    mode = slot.ops[0].param("mode")
    steps = tuple((op.name, dict(op.params)) for op in slot.ops if op.kind == "geometry")
    normalize = next((op for op in slot.ops if op.kind == "normalize"), None)
    output = next((op for op in slot.ops if op.kind == "output"), None)
    dtype, layout = "uint8", "HWC"
    mean = std = None
    if normalize is not None:
        dtype, layout = "float32", normalize.param("layout")
        mean, std = normalize.param("mean"), normalize.param("std")
    if output is not None:
        dtype = output.param("dtype") or dtype
        layout = output.param("layout") or layout
    return ImageSpec(
        mode=mode,
        steps=steps,
        mean=mean,
        std=std,
        dtype=dtype,
        layout=layout,
        random=any(op.random for op in slot.ops),
    )


def lower(plan: Pipeline) -> tuple[SlotKernel, ...]:
    """Lower every slot of ``plan`` into a :class:`SlotKernel`."""
    kernels = []
    for slot in plan.slots:
        if slot.passthrough_values:
            kernels.append(SlotKernel(slot.name, slot.source_field, None))
        elif slot.ops[0].name == "decode_image":
            kernels.append(SlotKernel(slot.name, slot.source_field, _lower_image(slot)))
        else:  # pragma: no cover - every decoder is handled above
            raise PlanError(f"slot {slot.name!r}: no kernel for {slot.ops[0]!r}")
    return tuple(kernels)
