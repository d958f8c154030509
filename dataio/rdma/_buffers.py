"""Caller-owned memory as (address, size, device): the buffers RMA reads into or writes from.

Nothing is copied: the NIC (or the provider) reads and writes the caller's memory
directly, so buffers must be contiguous, and writable when they receive data. Accepted:
anything with the buffer protocol (``bytes`` for writes, ``bytearray``, ``memoryview``,
NumPy arrays, ``mmap``) and PyTorch tensors (CPU, pinned or CUDA) through
``data_ptr()``; torch is never imported here, only recognised when already loaded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from dataio.exceptions import DeviceError, PlanError

__all__ = ["Local", "local_buffer"]


@dataclass
class Local:
    """A pinned view of caller memory; ``release()`` drops the buffer export."""

    address: int
    nbytes: int
    cuda_device: int | None = None
    _owner: Any = None
    _export: Any = None
    _ffi: Any = field(default=None, repr=False)

    def release(self) -> None:
        if self._export is not None:
            self._ffi.release(self._export)
            self._export = None
        self._owner = None


def _tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def local_buffer(ffi: Any, obj: Any, *, writable: bool, what: str) -> Local:
    """Describe ``obj``'s memory; ``writable`` when RMA will write into it.

    Raises:
        PlanError: ``obj`` is not a contiguous (writable, when needed) buffer.
        DeviceError: a tensor lives on a device other than the CPU or CUDA.
    """
    if _tensor(obj):
        if not obj.is_contiguous():
            raise PlanError(f"{what}: the tensor is not contiguous; pass tensor.contiguous()")
        kind = obj.device.type
        if kind not in ("cpu", "cuda"):
            raise DeviceError(f"{what}: tensors on {kind!r} are not supported; use cpu or cuda")
        device = (obj.device.index or 0) if kind == "cuda" else None
        return Local(int(obj.data_ptr()), obj.numel() * obj.element_size(), device, obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise PlanError(
            f"{what} takes a buffer (bytearray, NumPy array, mmap, memoryview) or a torch "
            f"tensor, got {type(obj).__name__}"
        ) from None
    with view:
        if not view.c_contiguous:
            raise PlanError(f"{what}: the buffer is not C-contiguous; copy it into one first")
        if writable and view.readonly:
            raise PlanError(
                f"{what}: the {type(obj).__name__} is read-only; pass a writable buffer "
                "such as a bytearray or a writable NumPy array"
            )
        nbytes = view.nbytes
    export = ffi.from_buffer(obj, require_writable=writable)
    address = int(ffi.cast("uintptr_t", export))
    return Local(address, nbytes, None, obj, export, ffi)
