"""Probes for native libraries (CUDA driver, ...), loaded on first call.

Below everything that needs them (``dataio.formats``, ``dataio.rdma``) and the
capability report that lists them (``dataio._capabilities``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["cuda", "library"]


def library(names: tuple[str, ...]) -> dict[str, Any]:
    """Try to load a shared library by soname; report the one found or why none was."""
    errors = []
    for name in names:
        candidates = [name]
        found = ctypes.util.find_library(name.removeprefix("lib").split(".so")[0])
        if found:
            candidates.append(found)
        for candidate in candidates:
            try:
                ctypes.CDLL(candidate)
            except OSError as exc:
                errors.append(str(exc))
                continue
            return {"found": True, "library": candidate}
    return {"found": False, "why": f"no {' / '.join(names)} on the loader path ({errors[0]})"}


def cuda() -> dict[str, Any]:
    """Whether the CUDA driver loads and sees a device (``found``, ``devices``, ``why``)."""
    info = library(("libcuda.so.1",))
    if not info["found"]:
        info["why"] = "no NVIDIA driver (libcuda.so.1 not found)"
        return info
    cuda = ctypes.CDLL(info["library"])
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {"found": False, "why": "the driver loaded but cuInit failed (no usable GPU)"}
    return {"found": count.value > 0, "devices": count.value, "library": info["library"]}
