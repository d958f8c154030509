"""GPUDirect RDMA's prerequisites, checked by clients and servers alike.

Both use the discovery behind the capability report (:mod:`dataio._native`): the CUDA
driver and its device count, then libfabric's API version (``FI_HMEM`` needs 1.9).
"""

from __future__ import annotations

from typing import Any

from dataio.exceptions import DeviceError, PlanError

__all__ = ["HMEM_VERSION", "device_buffer", "require_cuda"]

HMEM_VERSION = 1 << 16 | 9  # FI_VERSION(1, 9)


def require_cuda(what: str, shim_version: int, *, instead: str) -> int:
    """The CUDA device count, or a :class:`DeviceError` naming the missing piece.

    ``what`` names the call (``"connect(..., cuda=True)"``); ``instead`` says what to do.
    """
    from dataio._native import cuda as _cuda

    cuda = _cuda()
    if not cuda["found"]:
        raise DeviceError(f"{what} needs a CUDA GPU: {cuda.get('why', 'none found')}; {instead}")
    if shim_version < HMEM_VERSION:
        raise DeviceError(f"{what} needs libfabric >= 1.9 for FI_HMEM")
    return int(cuda.get("devices", 0))


def device_buffer(size: int, cuda: bool | int, shim_version: int) -> tuple[Any, int]:
    """A zero-filled ``uint8`` CUDA tensor of ``size`` bytes and its device index."""
    what = "serve(..., cuda=True)"
    index = 0 if cuda is True else cuda
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise PlanError(f"cuda= takes True or a device index, got {cuda!r}")
    count = require_cuda(what, shim_version, instead="serve without cuda= to serve host memory")
    if index >= count:
        raise DeviceError(f"{what}: cuda:{index} does not exist; this host has {count} GPU(s)")
    try:
        import torch
    except ImportError as exc:
        raise DeviceError(
            f"{what} allocates its buffer with torch, which is missing: {exc}"
        ) from None
    if not torch.cuda.is_available():
        from dataio.formats._devices import cuda_why

        raise DeviceError(f"{what}: torch {torch.__version__} sees no GPU ({cuda_why(torch)})")
    return torch.zeros(size, dtype=torch.uint8, device=f"cuda:{index}"), index
