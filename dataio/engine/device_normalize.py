"""Normalize on the GPU: image slots cross the bus as ``uint8`` and become floats there.

A ``run("torch", device="cuda:N")`` whose image slot ends in ``normalize`` would copy
``float32`` rows (4 bytes a pixel channel) to the device. Instead the host kernels stop
at ``uint8`` in the same layout, the batch is copied (a quarter of the bytes), and the
device computes ``x * scale + bias`` per channel with the constants of the host kernel,
in two rounded ``float32`` steps like the host's, then casts to the slot's dtype.

Slots qualify when nothing on the host needs the floats: no batch transforms (they run
before the copy), no custom ops, not optional or conditional.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.plan.ops import Op
from dataio.plan.pipeline import Pipeline, Slot

__all__ = ["DeviceConstants", "DeviceNormalize", "apply_on_device", "on_device", "split_normalize"]


@dataclass(frozen=True)
class DeviceNormalize:
    """The normalize a slot's host kernel leaves to the device.

    Attributes:
        slot: the slot (batch column).
        scale, bias: per-channel ``float32`` constants, as the host kernel computes them.
        layout: ``"CHW"`` or ``"HWC"`` of the rows.
        dtype: the slot's output dtype name (computed in ``float32``, cast once).
    """

    slot: str
    scale: tuple[float, ...]
    bias: tuple[float, ...]
    layout: str
    dtype: str


def _normalize_of(slot: Slot) -> tuple[tuple[Op, ...], DeviceNormalize] | None:
    """The slot's ops ending in ``uint8`` and the device step, or ``None`` if it does
    not qualify."""
    ops = slot.ops
    if slot.passthrough_values or slot.optional or slot.active is not None:
        return None
    if not ops or ops[0].name != "decode_image" or any(op.kind == "custom" for op in ops):
        return None
    normalize = next((op for op in ops if op.kind == "normalize"), None)
    if normalize is None:
        return None
    out = next((op for op in ops if op.kind == "output"), None)
    layout = normalize.param("layout")
    dtype = "float32"
    if out is not None:
        layout = out.param("layout") or layout
        dtype = out.param("dtype") or dtype
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        return None
    mean = np.asarray(normalize.param("mean"), np.float64)
    std = np.asarray(normalize.param("std"), np.float64)
    # the host kernel's constants (dataio.udfs.image.ImageSpec), bit for bit
    scale = (1.0 / (255.0 * std)).astype(np.float32)
    bias = (-mean / std).astype(np.float32)
    host = tuple(op for op in ops if op.kind not in ("normalize", "output"))
    host += (Op("output", "output", (("dtype", "uint8"), ("layout", layout)), applies_to=()),)
    step = DeviceNormalize(
        slot.name, tuple(scale.tolist()), tuple(bias.tolist()), layout, dtype
    )  # fmt: skip
    return host, step


def split_normalize(plan: Pipeline) -> tuple[Pipeline, tuple[DeviceNormalize, ...]]:
    """``plan`` with qualifying image slots ending in ``uint8``, and their device steps.

    Plans with batch transforms (which read the host floats) are returned unchanged.
    """
    if plan.batch_ops:
        return plan, ()
    slots: list[Slot] = []
    steps: list[DeviceNormalize] = []
    for slot in plan.slots:
        found = _normalize_of(slot)
        if found is None:
            slots.append(slot)
            continue
        ops, step = found
        slots.append(replace(slot, ops=ops))
        steps.append(step)
    if not steps:
        return plan, ()
    return replace(plan, slots=tuple(slots)), tuple(steps)


def on_device(output: str, device: Any) -> bool:
    """Whether a loader delivering ``output`` to ``device`` normalizes there (CUDA)."""
    if output != "torch" or device is None:
        return False
    import torch

    return bool(torch.device(device).type == "cuda")


class DeviceConstants:
    """Per-(slot, device) scale and bias tensors, made once."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, Any, int], tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def get(self, step: DeviceNormalize, device: Any, ndim: int) -> tuple[Any, Any]:
        key = (step.slot, device, ndim)
        with self._lock:
            found = self._made.get(key)
            if found is None:
                import torch

                # rows are (C, H, W) or (H, W, C) after the batch axis
                row = (-1, 1, 1) if step.layout == "CHW" else (1, 1, -1)
                shape = (1,) * (ndim - 3) + row
                scale = torch.tensor(step.scale, dtype=torch.float32, device=device)
                bias = torch.tensor(step.bias, dtype=torch.float32, device=device)
                found = self._made[key] = (scale.reshape(shape), bias.reshape(shape))
        return found


def apply_on_device(
    batch: Batch, steps: tuple[DeviceNormalize, ...], constants: DeviceConstants | None = None
) -> Batch:
    """Normalize the ``uint8`` image columns of a torch ``batch`` where they live."""
    import torch

    constants = constants or DeviceConstants()
    columns = dict(batch._columns)
    changed = False
    for step in steps:
        pixels = batch._columns.get(step.slot)
        if not isinstance(pixels, torch.Tensor) or pixels.dtype != torch.uint8:
            continue  # an empty batch of a skipped slot: nothing to do
        scale, bias = constants.get(step, pixels.device, pixels.dim())
        out = torch.empty(pixels.shape, dtype=torch.float32, device=pixels.device)
        torch.mul(pixels, scale, out=out)  # uint8 promotes to float32 exactly
        out.add_(bias)
        if step.dtype != "float32":
            out = out.to(getattr(torch, step.dtype))
        columns[step.slot], changed = out, True
    return batch.with_columns(columns) if changed else batch
