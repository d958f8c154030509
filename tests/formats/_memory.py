"""Memory helpers for zero-copy checks: which file mapping holds a pointer, and anon RSS."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/self/maps``."""

    start: int
    end: int
    perms: str
    offset: int
    path: str


def mapping_of(address: int) -> Mapping | None:
    """The memory mapping holding ``address``, read from ``/proc/self/maps``."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if start <= address < end:
                path = parts[5].strip() if len(parts) > 5 else ""
                return Mapping(start, end, parts[1], int(parts[2], 16), path)
    return None


def file_offset(address: int, path: os.PathLike[str] | str) -> int:
    """The offset in ``path`` that ``address`` maps; fails unless it maps that file."""
    found = mapping_of(address)
    assert found is not None, f"{address:#x} is in no mapping"
    assert os.path.realpath(found.path) == os.path.realpath(path), found
    return found.offset + address - found.start


def anon_rss() -> int:
    """Resident anonymous memory of this process in bytes (copies, not file pages)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")
