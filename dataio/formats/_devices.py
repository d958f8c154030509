"""Devices for tensor reads: CUDA targets, the pinned-memory copy, the GDS probe.

Capabilities are discovered on first use; importing this module loads nothing.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from dataio.exceptions import DeviceError, PlanError

__all__ = [
    "STAGING_BYTES",
    "cuda_target",
    "compat_preferred",
    "cuda_why",
    "gds_available",
    "gds_info",
    "load_kvikio",
    "to_device",
]

# Pinned staging for device copies: two buffers of this size alternate.
STAGING_BYTES = 64 << 20


def cuda_target(device: str | None, framework: str) -> Any:
    """The ``torch.device`` to copy to, or ``None`` for the CPU; refuses what cannot be."""
    if device is None or device == "cpu":
        return None
    if framework != "torch":
        raise PlanError(f"device={device!r} needs framework='torch'; NumPy arrays live on the CPU")
    import torch

    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise PlanError(f"device={device!r} is not a device name such as 'cuda:0': {exc}") from None
    if target.type == "cpu":
        return None
    if target.type != "cuda":
        raise DeviceError(f"device={device!r}: dataio reads to 'cpu' or 'cuda:N' only")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"device={device!r} needs CUDA, but this host has none usable by torch "
            f"{torch.__version__} ({cuda_why(torch)}); read with device=None (CPU) instead"
        )
    index = 0 if target.index is None else target.index
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"device={device!r} does not exist; this host has {count} GPU(s)")
    return torch.device("cuda", index)


def cuda_why(torch: Any) -> str:
    """Why torch sees no GPU, in the capability report's words (``python -m dataio``)."""
    from dataio._native import cuda as _cuda

    found = _cuda()
    if not found["found"]:
        return f"cuda: not found: {found.get('why', 'no CUDA device')}"
    if torch.version.cuda is None:
        return f"cuda: found, but torch {torch.__version__} was built without CUDA"
    return f"cuda: found ({found.get('devices', 0)} device(s)), but torch cannot initialize it"


def to_device(tensors: dict[str, Any], target: Any) -> dict[str, Any]:
    """Copy CPU tensors to ``target`` through two alternating pinned staging buffers.

    The host copies one chunk into a pinned buffer while the GPU copies the previous
    one out of the other; an event per buffer says when it may be refilled. Everything
    runs on the target's current stream, which is synchronized before returning.
    """
    import torch

    size = STAGING_BYTES
    out: dict[str, Any] = {}
    with torch.cuda.device(target):
        staging = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        ready = [torch.cuda.Event(), torch.cuda.Event()]
        used = [False, False]
        turn = 0
        for name, tensor in tensors.items():
            if tensor.numel() == 0:
                out[name] = torch.empty(tensor.shape, dtype=tensor.dtype, device=target)
                continue
            source = tensor.reshape(-1).view(torch.uint8)
            dest = torch.empty(source.numel(), dtype=torch.uint8, device=target)
            for start in range(0, source.numel(), size):
                n = min(size, source.numel() - start)
                if used[turn]:
                    ready[turn].synchronize()  # the GPU has finished reading this buffer
                staging[turn][:n].copy_(source[start : start + n])
                dest[start : start + n].copy_(staging[turn][:n], non_blocking=True)
                ready[turn].record()
                used[turn] = True
                turn ^= 1
            out[name] = dest.view(tensor.dtype).reshape(tensor.shape)
        torch.cuda.current_stream().synchronize()
    return out


@cache
def gds_info() -> dict[str, Any]:
    """Report whether GPUDirect Storage (cuFile) could be used here, and why not.

    Probes lazily on first call and never raises: the keys are ``available``,
    ``cufile`` (the library loaded, or ``None``), ``cuda_devices``, ``why``,
    ``kvikio`` (its version, or ``None``) and ``route``: how a device read goes here
    (``"gds"``, ``"compat"``: kvikio's POSIX mode, ``"pinned"``: dataio's bounce
    buffers; ``None`` without a GPU), with ``route_why`` saying why not a better one.

    Example:
        >>> dataio.gds_info()["available"]  # doctest: +SKIP
        False
    """
    info: dict[str, Any] = {"available": False, "cufile": None, "cuda_devices": 0, "why": ""}
    info.update(_probe_cufile(info))
    info["kvikio"] = _kvikio_version()
    info["route"], info["route_why"] = None, "no CUDA device"
    if info["cuda_devices"]:
        info["route"], info["route_why"] = _route(info)
    return info


def load_kvikio() -> tuple[Any, Any, str]:
    """``(kvikio, kvikio.defaults, "")``, or ``(None, None, why)`` where it cannot be used.

    ``import kvikio`` leaves its ``defaults`` submodule out, so it is imported by name.
    Besides an ``ImportError`` (not installed), kvikio's own libraries can fail to load
    (``libkvikio.so``, or ``libcufile.so.0`` which it finds through ``cuda.pathfinder``:
    a ``RuntimeError``/``OSError`` at import); either is reported, never raised.
    """
    import importlib

    try:
        kvikio = importlib.import_module("kvikio")
        defaults = importlib.import_module("kvikio.defaults")
    except ImportError as exc:
        return None, None, f"kvikio is not installed ({exc}); pip install 'dataio[gds]'"
    except (OSError, RuntimeError) as exc:
        why = (
            f"kvikio is installed but does not load ({type(exc).__name__}: {exc}); install "
            "the kvikio wheel of this host's CUDA major (kvikio-cu12 or kvikio-cu13) with "
            "its libkvikio and nvidia-cufile wheels"
        )
        return None, None, why
    return kvikio, defaults, ""


def _kvikio_version() -> str | None:
    kvikio, _, _ = load_kvikio()
    if kvikio is None:
        return None
    return str(getattr(kvikio, "__version__", "unknown"))


def _route(info: dict[str, Any]) -> tuple[str, str]:
    """The route of dataio.formats.gds.choose_route("auto"), from this probe."""
    kvikio, defaults, why = load_kvikio()
    if kvikio is None:
        return "pinned", why
    if not info["available"]:
        return "compat", f"gds: {info['why']}"
    try:
        if compat_preferred(defaults):
            return "compat", "kvikio is set to its compatibility mode (KVIKIO_COMPAT_MODE)"
    except Exception as exc:  # a probe must never break the caller
        return "compat", f"kvikio probe failed: {type(exc).__name__}: {exc}"
    return "gds", ""


def compat_preferred(defaults: Any) -> bool:
    """Whether kvikio would read in its POSIX compatibility mode (its AUTO decided, or
    ``KVIKIO_COMPAT_MODE=ON``); ``defaults`` is the ``kvikio.defaults`` module."""
    if hasattr(defaults, "is_compat_mode_preferred"):
        return bool(defaults.is_compat_mode_preferred())
    return bool(defaults.compat_mode())  # kvikio < 25.04: a CompatMode or a bool


def _nvfs_loaded() -> tuple[bool, str] | None:
    """kvikio's answer to whether the GDS kernel driver (nvidia-fs) is loaded, or
    ``None`` where kvikio cannot say. Only asked with a CUDA driver present: kvikio
    reads the nvfs version through cuFile's driver properties (0.0: not loaded)."""
    kvikio, _, _ = load_kvikio()
    if kvikio is None:
        return None
    try:
        import importlib

        driver = importlib.import_module("kvikio.cufile_driver")
        loaded = bool(driver.get("is_gds_available"))
    except Exception:  # an older kvikio, or cuFile refused: keep dataio's own probe
        return None
    why = "" if loaded else "the nvidia-fs driver is not loaded (kvikio reads its version as 0.0)"
    return loaded, why


def _probe_cufile(info: dict[str, Any]) -> dict[str, Any]:
    info = dict(info)
    try:
        from dataio._native import cuda as _cuda
        from dataio._native import library as _library

        cuda = _cuda()
        info["cuda_devices"] = int(cuda.get("devices", 0))
        if not cuda["found"]:
            info["why"] = str(cuda.get("why", "no CUDA device"))
            return info
        cufile = _library(("libcufile.so.0", "libcufile.so"))
        if cufile["found"]:
            info["cufile"] = cufile["library"]
            status = _cufile_driver_status(cufile["library"])
            info["available"] = status == 0
            info["why"] = "" if status == 0 else f"cuFileDriverOpen failed (error {status})"
        else:
            info["why"] = str(cufile["why"])
        # kvikio loads its own libcufile (a pip wheel's, off the loader path) and can tell
        # whether nvidia-fs is loaded: cuFileDriverOpen alone succeeds without it, in
        # cuFile's own compatibility mode, where no storage DMA reaches the GPU
        nvfs = _nvfs_loaded()
        if nvfs is not None:
            info["available"], info["why"] = nvfs
    except Exception as exc:  # a probe must never break the caller
        info["why"] = f"probe failed: {type(exc).__name__}: {exc}"
    return info


def _cufile_driver_status(library: str) -> int:
    import ctypes

    class _CUfileError(ctypes.Structure):
        _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]

    lib = ctypes.CDLL(library)
    lib.cuFileDriverOpen.restype = _CUfileError
    result = lib.cuFileDriverOpen()
    if result.err == 0:
        lib.cuFileDriverClose.restype = _CUfileError
        lib.cuFileDriverClose()
    return int(result.err)


def gds_available() -> bool:
    """True when GPUDirect Storage's driver opens on this host; see :func:`gds_info`.

    Example:
        >>> dataio.gds_available()  # doctest: +SKIP
        False
    """
    return bool(gds_info()["available"])
