"""The network environment of remote requests: HTTP proxies and custom TLS roots.

:func:`client_options` turns the process environment into obstore client options for
one origin. It is called once per store, when the store is built.
"""

from __future__ import annotations

from typing import Any

__all__ = ["client_options"]


def client_options(origin: str) -> dict[str, Any]:
    """Extra obstore client options for requests to ``origin`` (``scheme://host[:port]``)."""
    return {}
