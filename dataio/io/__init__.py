"""The URI surface. For now local paths; the object-store layer replaces :func:`read_bytes`."""

from dataio.io.read import read_bytes

__all__ = ["read_bytes"]
