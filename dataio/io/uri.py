"""Parse the URIs dataio accepts into (scheme, authority, key)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from dataio.exceptions import DataioError

__all__ = ["Location", "SCHEMES", "parse"]

Scheme = Literal["file", "s3", "r2", "http", "https"]
SCHEMES: tuple[str, ...] = ("file", "s3", "r2", "http", "https")


@dataclass(frozen=True)
class Location:
    """Where one object lives.

    ``authority`` is the bucket (``s3``, ``r2``), ``host[:port]`` (``http(s)``) or ``""``
    (``file``); ``key`` is the path inside it, without a leading ``/`` (for ``file`` the
    absolute path without its leading ``/``). ``local_style`` remembers whether a local
    location was written as a plain path, so listings answer in the same form.
    """

    scheme: Scheme
    authority: str
    key: str
    local_style: Literal["path", "uri", ""] = ""

    def child(self, key: str) -> str:
        """The URI of another key in the same bucket / host / filesystem, in this style."""
        if self.scheme == "file":
            return "/" + key if self.local_style == "path" else "file:///" + key
        return f"{self.scheme}://{self.authority}/{key}"

    @property
    def path(self) -> str:
        """The local filesystem path (``file`` locations only)."""
        return "/" + self.key

    def __str__(self) -> str:
        return self.child(self.key)


def parse(uri: str | os.PathLike[str]) -> Location:
    """Split ``uri`` into a :class:`Location`; a plain path is a local file.

    Example:
        >>> parse("s3://bucket/a/b.jpg")
        Location(scheme='s3', authority='bucket', key='a/b.jpg', local_style='')
    """
    text = os.fspath(uri)
    if "://" not in text:
        return Location("file", "", _absolute(text), "path")
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme == "file":
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        if not rest.startswith("/"):
            raise DataioError(f"file URI {text!r} must be absolute: file:///path/to/file")
        return Location("file", "", _absolute(unquote(rest)), "uri")
    if scheme not in SCHEMES:
        supported = ", ".join(f"{s}://" for s in SCHEMES)
        raise DataioError(
            f"cannot open {text!r}: the {scheme}:// scheme is not supported yet; "
            f"use a local path or one of {supported}"
        )
    authority, _, key = rest.partition("/")
    if not authority:
        raise DataioError(f"URI {text!r} names no bucket or host: use {scheme}://NAME/key")
    return Location(scheme, authority, key, "")  # type: ignore[arg-type]


def _absolute(path: str) -> str:
    text = str(Path(path).expanduser().absolute())
    # keep a trailing separator: it marks a directory prefix for ls/glob
    if path.endswith("/") and not text.endswith("/"):
        text += "/"
    return text.lstrip("/")
