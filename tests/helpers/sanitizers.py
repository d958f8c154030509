"""Test helpers for runs under AddressSanitizer (``make asan``)."""

from __future__ import annotations

import os


def child_env() -> dict[str, str]:
    """The environment of a child that runs out of memory on purpose. Under AddressSanitizer
    (``make asan``) its shadow memory defeats an address-space limit, so large allocations
    fail through ASan's own cap instead (and return NULL rather than abort)."""
    env = dict(os.environ)
    if "libasan" in env.get("LD_PRELOAD", ""):
        extra = "allocator_may_return_null=1:max_allocation_size_mb=1024"
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), extra]))
    return env
