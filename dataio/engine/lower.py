"""Lowering: slot chains of plan ops become kernels the executor can run.

Each decoder op name maps to a lowering function in :data:`LOWERINGS` that builds a
:class:`SlotKernel` for the whole chain. A kernel is a plain function
``run(data, rng, out) -> (array, source_size)``: ``data`` is the field's bytes,
``rng`` the record's generator (``None`` unless the chain is random), ``out`` the
preallocated batch row or ``None``; ``source_size`` is the input's ``(height, width)``
or ``None`` when that means nothing for the kind of data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio.exceptions import PlanError
from dataio.pipeline import Pipeline, Slot
from dataio.udfs.image import ImageSpec, run_chain
from dataio.udfs.tensor import decode_npy, decode_safetensors

__all__ = ["LOWERINGS", "KernelFn", "SlotKernel", "lower"]

KernelFn = Callable[[Any, Any, Any], tuple[np.ndarray, tuple[int, ...] | None]]


@dataclass(frozen=True)
class SlotKernel:
    """What the executor runs for one slot.

    Attributes:
        name: the slot (batch column) name.
        field: the record field it reads.
        run: the fused kernel, or ``None`` for a passthrough slot.
        row_shape: the per-row output shape when fixed by the chain, else ``None``.
        dtype: the output dtype of a tensor slot.
        random: whether ``run`` needs the record's generator.
    """

    name: str
    field: str
    run: KernelFn | None = None
    row_shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    random: bool = False

    @property
    def passthrough(self) -> bool:
        """True when the slot delivers Python values unchanged."""
        return self.run is None


def image_spec(slot: Slot) -> ImageSpec:
    """Lower an image chain (``decode_image`` first) into an :class:`ImageSpec`."""
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


def _lower_image(slot: Slot) -> SlotKernel:
    spec = image_spec(slot)

    def run(data: Any, rng: Any, out: Any) -> tuple[np.ndarray, tuple[int, ...] | None]:
        return run_chain(data, spec, rng, out)

    return SlotKernel(
        slot.name, slot.source_field, run, spec.static_shape(), np.dtype(spec.dtype), spec.random
    )


def _only_decoder(slot: Slot) -> None:
    if len(slot.ops) > 1:
        raise PlanError(
            f"slot {slot.name!r}: {slot.ops[0].name} takes no further ops, got {slot.ops[1]!r}; "
            "reshape or cast tensors in a batch map"
        )


def _lower_numpy(slot: Slot) -> SlotKernel:
    _only_decoder(slot)

    def run(data: Any, rng: Any, out: Any) -> tuple[np.ndarray, tuple[int, ...] | None]:
        return decode_npy(data), None

    return SlotKernel(slot.name, slot.source_field, run)


def _lower_safetensors(slot: Slot) -> SlotKernel:
    _only_decoder(slot)
    key = slot.ops[0].param("key")

    def run(data: Any, rng: Any, out: Any) -> tuple[np.ndarray, tuple[int, ...] | None]:
        return decode_safetensors(data, key), None

    return SlotKernel(slot.name, slot.source_field, run)


#: decoder op name -> lowering of the whole chain it starts
LOWERINGS: dict[str, Callable[[Slot], SlotKernel]] = {
    "decode_image": _lower_image,
    "decode_numpy": _lower_numpy,
    "decode_safetensors": _lower_safetensors,
}


def lower(plan: Pipeline) -> tuple[SlotKernel, ...]:
    """Lower every slot of ``plan`` into a :class:`SlotKernel`."""
    kernels = []
    for slot in plan.slots:
        if slot.passthrough_values:
            kernels.append(SlotKernel(slot.name, slot.source_field))
            continue
        lowering = LOWERINGS.get(slot.ops[0].name)
        if lowering is None:
            raise PlanError(f"slot {slot.name!r}: no kernel for {slot.ops[0]!r}")
        kernels.append(lowering(slot))
    return tuple(kernels)
