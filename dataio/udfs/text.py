"""Text and object kernels: JSON, text in a named encoding, raw bytes, torch ``.pt`` files.

``.pt`` files are loaded with ``torch.load(..., weights_only=True)``, which rebuilds only
tensors and plain containers; any other pickled object is refused, never constructed.
"""

from __future__ import annotations

import codecs
import io
import json
import pickle
from typing import Any

from dataio.exceptions import DecodeError, PlanError

__all__ = ["check_encoding", "decode_bytes", "decode_json", "decode_pt", "decode_text"]

_UTF8_BOM = b"\xef\xbb\xbf"
# torch.save writes a zip archive; before PyTorch 1.6 (or with
# _use_new_zipfile_serialization=False) a pickle that starts with this magic number.
_PT_ZIP = b"PK\x03\x04"
_PT_LEGACY = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19."


def check_encoding(encoding: str) -> str:
    """Return the canonical name of a Python text encoding.

    Raises:
        PlanError: Python has no codec of that name, or it is not a text encoding.

    Example:
        >>> check_encoding("UTF8")
        'utf-8'
    """
    try:
        info = codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise PlanError(
            f"unknown text encoding {encoding!r}; use a Python codec name such as "
            "'utf-8', 'latin-1' or 'utf-16'"
        ) from None
    if not getattr(info, "_is_text_encoding", True):
        raise PlanError(f"{encoding!r} is not a text encoding; use one such as 'utf-8'")
    return info.name


def _text(data: bytes | bytearray | memoryview, encoding: str, what: str) -> str:
    raw = bytes(data)
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.end]
        raise DecodeError(
            f"the {what} is not valid {encoding}: {exc.reason} at byte offset {exc.start} "
            f"({bad!r}); check the encoding the data was written with"
        ) from None
    except (UnicodeError, ValueError, TypeError, LookupError) as exc:
        # Some codecs fail without a byte offset: idna and punycode raise a bare
        # UnicodeError ("label empty or too long"), others ValueError or TypeError.
        raise DecodeError(
            f"the {what} is not valid {encoding}: {exc}; check the encoding the data was "
            "written with"
        ) from exc


def decode_text(data: bytes | bytearray | memoryview, encoding: str = "utf-8") -> str:
    """Decode bytes to a string in ``encoding``.

    Raises:
        PlanError: the encoding is unknown.
        DecodeError: the bytes are not valid in that encoding (the message gives the
            byte offset).

    Example:
        >>> decode_text(b"caf\\xe9", encoding="latin-1")
        'café'
    """
    return _text(data, check_encoding(encoding), "text")


def decode_json(data: bytes | bytearray | memoryview) -> Any:
    """Parse UTF-8 JSON bytes (a leading byte-order mark is allowed).

    Raises:
        DecodeError: the bytes are empty, not UTF-8, or not JSON (with line and column).

    Example:
        >>> decode_json(b'{"label": 3}')
        {'label': 3}
    """
    raw = bytes(data)
    if raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM) :]
    text = _text(raw, "utf-8", "JSON")
    if not text.strip():
        raise DecodeError("the JSON is empty; expected a JSON value such as {} or []")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecodeError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} "
            f"(near {exc.doc[max(exc.pos - 20, 0) : exc.pos + 20]!r})"
        ) from None
    except RecursionError:
        raise DecodeError("the JSON is nested too deeply to parse") from None
    except ValueError as exc:  # an integer over Python's int_max_str_digits (4,300)
        raise DecodeError(f"the JSON holds a value Python cannot read: {exc}") from None


def decode_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """Return the field's bytes unchanged, as ``bytes``.

    Example:
        >>> decode_bytes(memoryview(b"abc"))
        b'abc'
    """
    return bytes(data)


def decode_pt(data: bytes | bytearray | memoryview) -> Any:
    """Load a ``torch.save`` file holding tensors and plain containers (dicts, lists...).

    Only ``torch.load(..., weights_only=True)`` is used: pickled classes, functions and
    other objects are refused without being constructed.

    Raises:
        DecodeError: the file is empty, corrupt, or holds objects other than tensors.

    Example:
        >>> state = decode_pt(pt_bytes)  # e.g. {"weight": tensor([...])}
    """
    import torch

    if len(data) == 0:
        raise DecodeError("the .pt file is empty (0 bytes); check the file or field it came from")
    raw = bytes(data)
    if not (raw.startswith(_PT_ZIP) or raw.startswith(_PT_LEGACY)):
        raise DecodeError(
            f"not a torch.save file (first bytes {raw[:8]!r}); expected the zip archive "
            "torch.save writes, or its legacy format"
        )
    try:
        return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except MemoryError:
        raise DecodeError("the .pt file asks for more memory than there is") from None
    except pickle.UnpicklingError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        detail = next((line for line in lines if line.startswith("Trying to load")), "")
        raise DecodeError(
            "refusing to load the .pt file: it holds pickled objects other than tensors and "
            f"plain containers, and dataio never unpickles arbitrary objects. {detail}".rstrip()
        ) from None
    # Hostile bytes trip torch's zip reader and restricted unpickler in many ways (seen by
    # fuzzing: RuntimeError, AssertionError, IndexError, TypeError, struct.error,
    # UnicodeDecodeError, OverflowError, RecursionError...), none of them a stable
    # interface; where warnings are errors, torch's warnings about odd files arrive too.
    except Exception as exc:
        raise DecodeError(
            f"the .pt file is corrupt or truncated: {type(exc).__name__}: {exc}"
        ) from exc
