"""Discovery plus shim, for callers that need both or a clear error."""

from __future__ import annotations

from dataio.exceptions import TransportError
from dataio.rdma._build import Shim, ShimUnavailable, load
from dataio.rdma._discovery import find_library

__all__ = ["shim_or_raise"]


def shim_or_raise() -> Shim:
    """Load libfabric and the shim (building it on first use).

    Raises:
        TransportError: libfabric is missing, or the shim cannot be built or loaded;
            the message says which and what to install.
    """
    library = find_library()
    if not library.found:
        raise TransportError(f"dataio.rdma needs libfabric: {library.why}")
    try:
        return load(library)
    except ShimUnavailable as exc:
        raise TransportError(f"dataio.rdma cannot use libfabric here: {exc}") from None
