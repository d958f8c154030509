"""Find ``libfabric.so.1`` at first use, and say why when it is not there.

``DATAIO_LIBFABRIC`` names a library file to use instead of the loader's
``libfabric.so.1``; pointing it at a missing path simulates a host without libfabric.
The library is loaded ``RTLD_GLOBAL`` so the shim extension, which needs
``libfabric.so.1``, binds to this very copy.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_LIBRARY", "Library", "find_library", "format_version"]

ENV_LIBRARY = "DATAIO_LIBFABRIC"
SONAME = "libfabric.so.1"


@dataclass(frozen=True)
class Library:
    """The outcome of discovery: a loaded library (``path``, ``version``) or ``why`` not."""

    path: str | None = None
    version: int | None = None
    why: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def version_text(self) -> str | None:
        return None if self.version is None else format_version(self.version)


def format_version(version: int) -> str:
    """Render a packed ``FI_VERSION(major, minor)`` as ``"major.minor"``."""
    return f"{version >> 16}.{version & 0xFFFF}"


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _file_of(symbol: Any, fallback: str) -> str:
    """The file a loaded symbol lives in (glibc ``dladdr``), so reports show a real path."""
    try:
        libc = ctypes.CDLL(None)
        info = _DlInfo()
        if libc.dladdr(ctypes.cast(symbol, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    except (AttributeError, OSError):
        pass
    return fallback


def find_library() -> Library:
    """Load libfabric (``$DATAIO_LIBFABRIC`` or ``libfabric.so.1``) and read its version.

    Never raises: a missing or broken library comes back as ``Library(why=...)``.
    """
    explicit = os.environ.get(ENV_LIBRARY)
    name = explicit or SONAME
    try:
        handle = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        fi_version = handle.fi_version
    except (OSError, AttributeError) as exc:
        if explicit:
            why = f"{ENV_LIBRARY}={explicit!r} could not be loaded ({exc})"
        else:
            why = (
                f"{SONAME} is not on the loader path ({exc}); install it "
                "(Debian/Ubuntu: apt-get install libfabric1) or set "
                f"{ENV_LIBRARY} to its path"
            )
        return Library(why=why)
    fi_version.restype = ctypes.c_uint32
    fi_version.argtypes = []
    return Library(path=_file_of(fi_version, name), version=int(fi_version()))
