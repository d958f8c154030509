"""Local files opened for reading: regular files only, and never blocking on open.

A record path may name a FIFO (opening it blocks until a writer comes), ``/dev/zero``
(reads never end) or a directory. Files open with ``O_NONBLOCK`` so a FIFO cannot block
the open, and anything ``fstat`` does not call a regular file is refused by name.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from dataio import limits
from dataio.exceptions import FormatError

__all__ = ["FLAGS", "check_regular", "open_file", "open_regular", "read_bounded"]

# O_NONBLOCK changes nothing for regular files; it keeps a FIFO from blocking the open
FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(path: str, mode: int, verb: str) -> None:
    """Raise :class:`FormatError` naming ``path`` unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise FormatError(
        f"{verb} {path!r}: it is {kind}, not a regular file; "
        "dataio reads only regular files from local paths"
    )


def open_regular(path: str, verb: str) -> tuple[int, int]:
    """Open ``path`` for reading; return its descriptor and size. Refuses non-regular
    files. OS errors propagate for :func:`dataio.io.errors.call` to translate."""
    fd = os.open(path, FLAGS)
    try:
        st = os.fstat(fd)
        check_regular(path, st.st_mode, verb)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def open_file(path: str, verb: str) -> BinaryIO:
    """Open the regular local file ``path`` as an unbuffered binary file object, with
    every failure a :class:`DataioError` naming it (missing, denied, a NUL byte, a FIFO
    or device or directory)."""
    from dataio.io.errors import call

    fd, _ = call(lambda: open_regular(path, verb), path, verb)
    return os.fdopen(fd, "rb", buffering=0)


def read_bounded(fd: int, path: str, first: bytes) -> bytes:
    """Drain ``fd`` after ``first`` (a file whose size ``stat`` does not know, such as
    one in ``/proc``), refusing to hold more than ``max_decoded_bytes``."""
    parts, total = [first], len(first)
    cap = limits.get().max_decoded_bytes
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > cap:
            limits.check("max_decoded_bytes", total, what=f"reading {path!r}")
        parts.append(chunk)
    return b"".join(parts)
