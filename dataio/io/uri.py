"""Parse the URIs dataio accepts into (scheme, authority, key)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from dataio.exceptions import DataioError

__all__ = ["READ_ONLY", "SCHEMES", "Location", "parse", "require_writable"]

Scheme = Literal["file", "s3", "r2", "gs", "az", "hf", "http", "https"]
SCHEMES: tuple[str, ...] = ("file", "s3", "r2", "gs", "az", "hf", "http", "https")
READ_ONLY: tuple[str, ...] = ("hf",)

# Hub repository and organisation names; a revision is any non-empty text
_HF_NAME = re.compile(r"[\w.-]+")
_HF_KINDS = ("models", "datasets", "spaces")
_HF_GLOB = re.compile(r"[*?[]")
_HF_SPECIAL_REF = re.compile(r"refs/(?:convert/[\w.-]+|pr/\d+)(?=/|$)")


@dataclass(frozen=True)
class Location:
    """Where one object lives.

    ``authority`` is the bucket (``s3``, ``r2``, ``gs``), the container (``az``),
    ``host[:port]`` (``http(s)``), the repository as written (``hf``:
    ``[datasets/|spaces/][owner/]name[@revision]``; without ``@revision``,
    ``owner/name`` may still turn out to be a repository without owner and a folder,
    which :func:`dataio.io.hf.resolve` settles) or ``""`` (``file``); ``key`` is the
    path inside it, without a leading ``/`` (for ``file`` the absolute path without its
    leading ``/``). ``local_style`` remembers whether a local
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
        if self.scheme == "hf" and not key:
            # the repository itself, or a file of one without owner (hf://gpt2/config.json)
            return f"hf://{self.authority}"
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
    if scheme == "hf":
        return _parse_hf(text, rest)
    authority, _, key = rest.partition("/")
    if not authority:
        raise DataioError(f"URI {text!r} names no bucket or host: use {scheme}://NAME/key")
    return Location(scheme, authority, key, "")  # type: ignore[arg-type]


def _parse_hf(text: str, rest: str) -> Location:
    # the grammar of huggingface_hub's parse_hf_uri, plus repositories without an owner
    # (gpt2): hf://[models/|datasets/|spaces/]ID[@REVISION][/PATH], ID = [owner/]name
    parts = rest.split("/")
    kind = parts.pop(0) if parts[0] in _HF_KINDS and len(parts) > 1 and parts[1] else ""
    if len(parts) == 2 and not parts[1]:
        parts.pop()  # hf://gpt2/ lists a repository without owner
    body = "/".join(parts)
    at = body.find("@")
    if at == -1 or body[:at].count("/") > 1:  # an "@" past the repository is in a file name
        # a pattern can only follow a repository (hf://gpt2/*.json)
        owned = len(parts) > 1 and not _HF_GLOB.search(parts[1])
        split = 2 if owned else 1
        repo_id, revision, key = "/".join(parts[:split]), None, "/".join(parts[split:])
    else:
        repo_id, after = body[:at], body[at + 1 :]
        # refs/pr/N and refs/convert/NAME keep their slashes, as huggingface_hub reads
        # them; any other revision holding a "/" must be written URL-encoded (feature%2Fx)
        special = _HF_SPECIAL_REF.match(after)
        revision = special.group() if special else after.partition("/")[0]
        key = after[len(revision) :].lstrip("/")
    names = repo_id.split("/")
    valid = all(_HF_NAME.fullmatch(n) and n not in (".", "..") for n in names)
    if not body or parts[0] in _HF_KINDS or not valid:
        raise DataioError(
            f"hf URI {text!r} does not name a repository: use "
            "hf://[datasets/|spaces/][owner/]name[@revision]/path/in/repo"
        )
    if revision == "":
        raise DataioError(f"hf URI {text!r} has an empty revision after '@': name one or drop '@'")
    authority = (f"{kind}/" if kind and kind != "models" else "") + repo_id
    if revision is not None:
        authority += f"@{revision}"
    return Location("hf", authority, key, "")


def require_writable(location: Location, verb: str) -> None:
    """Raise :class:`~dataio.DataioError` when ``verb`` would change a read-only scheme.

    Example:
        >>> require_writable(parse("hf://org/model/weights.bin"), "write")
        Traceback (most recent call last):
        dataio.exceptions.DataioError: ...
    """
    if location.scheme in READ_ONLY:
        raise DataioError(
            f"cannot {verb} {str(location)!r}: hf:// is read-only (dataio reads the "
            "Hugging Face Hub but does not upload); write locally or to an object store "
            "and push with huggingface_hub"
        )


def _absolute(path: str) -> str:
    text = str(Path(path).expanduser().absolute())
    # keep a trailing separator: it marks a directory prefix for ls/glob
    if path.endswith("/") and not text.endswith("/"):
        text += "/"
    return text.lstrip("/")
