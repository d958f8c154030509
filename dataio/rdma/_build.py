"""Build the libfabric shim at first use, into a per-user cache, and load it.

The extension is compiled with cffi against the libfabric headers (``libfabric-dev``)
in a child process, so compiler output and setuptools warnings stay out of the caller,
then moved atomically into ``$DATAIO_CACHE_DIR/rdma`` (default
``$XDG_CACHE_HOME/dataio/rdma``, else ``~/.cache/dataio/rdma``). Its name carries a
digest of the shim source, cffi's version and the interpreter tag, then the header
version, so a change to any of them builds a fresh copy and stale ones are ignored. A file
lock keeps concurrent first uses from building twice. ``python -m dataio.rdma --build``
builds ahead of time (for example in an image); a host without the headers then uses
the newest shim already in the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataio.rdma._discovery import Library
from dataio.rdma._shim import CDEF, SOURCE

__all__ = ["Shim", "ShimUnavailable", "cache_dir", "find_headers", "load"]

ENV_CACHE = "DATAIO_CACHE_DIR"
ENV_INCLUDE = "DATAIO_LIBFABRIC_INCLUDE"

_BUILD_SCRIPT = """
import json, sys
import cffi
spec = json.load(sys.stdin)
ffi = cffi.FFI()
ffi.cdef(spec["cdef"])
ffi.set_source(spec["name"], spec["source"], include_dirs=spec["include_dirs"],
               extra_link_args=spec["link_args"], extra_compile_args=["-O2"])
print(ffi.compile(tmpdir=spec["tmpdir"], verbose=False))
"""


class ShimUnavailable(Exception):
    """The shim cannot be built or loaded here; ``str()`` says why and what to install."""


@dataclass(frozen=True)
class Shim:
    """The loaded extension: its ``ffi`` and ``lib`` plus where it came from.

    ``headers`` is the include directory it was built against, or ``""`` when it came
    from the cache on a host without the headers.
    """

    ffi: Any
    lib: Any
    path: str
    headers: str
    header_version: str


_loaded: dict[str, Shim] = {}


def cache_dir() -> Path:
    """Where built shims live (``$DATAIO_CACHE_DIR/rdma`` or the XDG cache)."""
    root = os.environ.get(ENV_CACHE)
    if root:
        return Path(root) / "rdma"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "dataio" / "rdma"


def _pkg_config_includes() -> list[str]:
    if not shutil.which("pkg-config"):
        return []
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags-only-I", "libfabric"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [flag[2:] for flag in out.stdout.split() if flag.startswith("-I")]


def find_headers(library: Library) -> tuple[str, str]:
    """Return the include directory holding ``rdma/fabric.h`` and its ``major.minor``.

    Raises:
        ShimUnavailable: no headers were found (libfabric-dev is not installed).
    """
    candidates = [os.environ.get(ENV_INCLUDE, "")]
    candidates += _pkg_config_includes()
    if library.path:
        candidates.append(str(Path(library.path).resolve().parent.parent / "include"))
    candidates += ["/usr/include", "/usr/local/include"]
    for directory in filter(None, candidates):
        header = Path(directory) / "rdma" / "fabric.h"
        if header.is_file():
            text = header.read_text(errors="replace")
            major = re.search(r"#define\s+FI_MAJOR_VERSION\s+(\d+)", text)
            minor = re.search(r"#define\s+FI_MINOR_VERSION\s+(\d+)", text)
            version = f"{major.group(1)}.{minor.group(1)}" if major and minor else "unknown"
            return directory, version
    raise ShimUnavailable(
        "the libfabric headers (rdma/fabric.h) are missing, so the shim cannot be built: "
        f"install libfabric-dev (Debian/Ubuntu) or set {ENV_INCLUDE}; looked in "
        f"{[c for c in candidates if c]}"
    )


def _module_prefix() -> str:
    import cffi

    digest = hashlib.sha256(
        "\0".join((CDEF, SOURCE, cffi.__version__, sys.implementation.cache_tag)).encode()
    ).hexdigest()[:16]
    return f"_dataio_fabric_{digest}_fi"


def _module_name(header_version: str) -> str:
    return _module_prefix() + header_version.replace(".", "_")


def _cached_without_headers() -> tuple[str, Path, str] | None:
    """The newest shim already built for this source, whatever headers it used."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    prefix = _module_prefix()
    built = sorted(cache_dir().glob(f"{prefix}*{suffix}"), key=lambda p: p.stat().st_mtime)
    if not built:
        return None
    name = built[-1].name.removesuffix(suffix)
    return name, built[-1], name.removeprefix(prefix).replace("_", ".")


def _compile(name: str, headers: str, library: Library, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        spec = {
            "cdef": CDEF,
            "source": SOURCE,
            "name": name,
            "include_dirs": [headers],
            "link_args": [library.path or "-lfabric"],
            "tmpdir": tmp,
        }
        done = subprocess.run(
            [sys.executable, "-c", _BUILD_SCRIPT],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-12:]
            raise ShimUnavailable(
                "building the libfabric shim failed (needs a C compiler, cffi and "
                "libfabric-dev):\n" + "\n".join(tail)
            )
        built = Path(done.stdout.strip().splitlines()[-1])
        os.replace(built, target)


def _import(name: str, path: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ShimUnavailable(f"cannot import the shim at {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load(library: Library) -> Shim:
    """Return the shim for ``library``, building it into the cache on first use.

    Raises:
        ShimUnavailable: cffi, the headers or the compiler are missing, or the build failed.
    """
    if importlib.util.find_spec("cffi") is None:
        raise ShimUnavailable("cffi is not installed (pip install cffi); it builds the shim")
    try:
        headers, header_version = find_headers(library)
    except ShimUnavailable:
        # A shim built earlier (say by ``python -m dataio.rdma --build`` in an image that
        # had libfabric-dev) still works on a host that only has libfabric1.
        cached = _cached_without_headers()
        if cached is None:
            raise
        name, target, header_version = cached
        headers = ""
    else:
        name = _module_name(header_version)
        target = cache_dir() / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    if name in _loaded:
        return _loaded[name]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                _compile(name, headers, library, target)
    try:
        module = _import(name, target)
    except ImportError as exc:
        raise ShimUnavailable(f"the built shim at {str(target)!r} does not load: {exc}") from exc
    shim = Shim(module.ffi, module.lib, str(target), headers, header_version)
    _loaded[name] = shim
    return shim
