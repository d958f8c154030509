"""The capability report behind ``python -m dataio``: what this host offers, and why not."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

from dataio._native import cuda as _cuda
from dataio._native import library as _library

__all__ = ["format_report", "report"]

_PACKAGES = (
    "numpy", "pyarrow", "datafusion", "pillow", "simplejpeg", "obstore", "torch", "kvikio-cu12",
)  # fmt: skip


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _libfabric() -> dict[str, Any]:
    """libfabric through dataio.rdma's discovery: the library and the RMA providers it offers."""
    from dataio.rdma import info

    found = info()
    if not found["library"]:
        return {"found": False, "why": str(found["why"]).removeprefix("libfabric not found: ")}
    entry: dict[str, Any] = {
        "found": True,
        "library": found["library"],
        "version": found["version"],
        "providers": sorted({p["name"] for p in found["providers"]}),
    }
    if not found["available"]:
        entry["why"] = found["why"]
    return entry


def _decoders() -> dict[str, Any]:
    decoders: dict[str, Any] = {}
    if _version("simplejpeg"):
        decoders["jpeg"] = f"simplejpeg {_version('simplejpeg')} (whole images, DCT-scaled)"
    try:
        from dataio.udfs import _jpeg

        decoders["jpeg regions"] = f"{_jpeg.version()} (crops decode only their pixels)"
    except ImportError:
        decoders["jpeg regions"] = (
            "not built: install libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev) and "
            "reinstall dataio; crops decode the whole image meanwhile"
        )
    try:
        from PIL import features

        for fmt in ("jpg", "webp", "jpg_2000", "zlib", "libtiff"):
            decoders[f"pillow:{fmt}"] = bool(features.check(fmt))
    except ImportError as exc:
        decoders["pillow"] = f"unavailable: {exc}"
    return decoders


def _gds_route() -> dict[str, Any]:
    """How ``read_safetensors(device="cuda:N")`` reads here (see dataio.formats.gds)."""
    from dataio.formats._devices import gds_info

    info = gds_info()
    return {"route": info["route"], "why": info["route_why"]}


def report() -> dict[str, Any]:
    """Collect the capability report as a dict (loads optional libraries to probe them)."""
    from dataio import __version__
    from dataio.engine.pool import cpu_workers

    return {
        "dataio": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in _PACKAGES},
        "cpu_workers": cpu_workers(),
        "cpu_workers_source": "DATAIO_CPU_WORKERS"
        if os.environ.get("DATAIO_CPU_WORKERS")
        else "usable cores",
        "decoders": _decoders(),
        "cuda": _cuda(),
        "nvjpeg": _library(("libnvjpeg.so.12", "libnvjpeg.so.13", "libnvjpeg.so")),
        "gds": _library(("libcufile.so.0", "libcufile.so")),
        "gds_route": _gds_route(),
        "libfabric": _libfabric(),
    }


def format_report(info: dict[str, Any]) -> str:
    """Render :func:`report` as aligned text lines."""
    lines = [f"dataio {info['dataio']} on Python {info['python']} ({info['platform']})"]
    lines.append("packages:")
    for name, version in info["packages"].items():
        lines.append(f"  {name:<12} {version or 'not installed'}")
    lines.append(f"cpu workers:   {info['cpu_workers']} ({info['cpu_workers_source']})")
    lines.append("decoders:")
    for name, value in info["decoders"].items():
        lines.append(f"  {name:<16} {value}")
    for name in ("cuda", "nvjpeg", "gds", "libfabric"):
        entry = info[name]
        if entry["found"]:
            detail = entry.get("library", "")
            if "devices" in entry:
                detail += f", {entry['devices']} device(s)"
            if "providers" in entry:
                detail += f"; RMA providers: {', '.join(entry['providers']) or 'none'}"
                detail += f" ({entry['why']})" if entry.get("why") else ""
            lines.append(f"{name + ':':<14} found ({detail})")
        else:
            lines.append(f"{name + ':':<14} not found: {entry['why']}")
    route = info["gds_route"]
    why = f" ({route['why']})" if route["why"] else ""
    lines.append(f"{'device reads:':<14} {route['route'] or 'none'}{why}")
    return "\n".join(lines)
