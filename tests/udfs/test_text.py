"""Text and object kernels (``dataio/udfs/text.py``).

Oracles: ``json.dumps`` / ``str.encode`` write the inputs; ``torch.save`` writes the
``.pt`` files, and the malicious ones carry a payload that would leave a file behind.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from dataio.exceptions import DecodeError, PlanError
from dataio.udfs.text import check_encoding, decode_bytes, decode_json, decode_pt, decode_text

# -- json -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [{"label": 3, "tags": ["a", "é"], "box": [0.5, 1e-3]}, [1, 2, None], "text", 0, None],
)
def test_decode_json_round_trips(value: Any) -> None:
    import json

    blob = json.dumps(value, ensure_ascii=False).encode()
    assert decode_json(blob) == value
    assert decode_json(memoryview(blob)) == value
    assert decode_json(b"\xef\xbb\xbf" + blob) == value  # a UTF-8 byte-order mark


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b'{"a": 1,\n  "b": }', r"invalid JSON at line 2 column 8: Expecting value"),
        (b'{"a": 1} trailing', r"line 1 column 10: Extra data"),
        (b"", "the JSON is empty"),
        (b"  \n", "the JSON is empty"),
        (b'{"a": "\xff"}', r"not valid utf-8: invalid start byte at byte offset 7 \(b'\\xff'\)"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_decode_json_errors(blob: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message) as info:
        decode_json(blob)
    assert isinstance(info.value, ValueError)


# -- text and bytes ---------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16", "cp1252", "shift_jis", "UTF8"])
def test_decode_text_round_trips(encoding: str) -> None:
    text = "naïve café" if encoding not in ("shift_jis",) else "日本語のテキスト"
    assert decode_text(text.encode(encoding), encoding=encoding) == text


def test_decode_text_names_the_encoding_and_offset() -> None:
    with pytest.raises(
        DecodeError,
        match=r"not valid utf-8: invalid continuation byte at byte offset 3 \(b'\\xc3'\)",
    ):
        decode_text(b"caf\xc3\xe9 au lait")
    with pytest.raises(DecodeError, match=r"not valid ascii: .*byte offset 3"):
        decode_text("café".encode(), encoding="ascii")


@pytest.mark.parametrize("encoding", ["utf-9", "no such codec", "rot13", "base64"])
def test_unknown_or_non_text_encoding_is_a_plan_error(encoding: str) -> None:
    with pytest.raises(PlanError, match=repr(encoding)):
        decode_text(b"abc", encoding=encoding)
    with pytest.raises(PlanError):
        check_encoding(encoding)


def test_check_encoding_canonicalizes() -> None:
    assert check_encoding("UTF8") == "utf-8"
    assert check_encoding("Latin-1") == "iso8859-1"


def test_decode_bytes() -> None:
    data = bytearray(b"\x00\x01raw")
    out = decode_bytes(memoryview(data))
    assert out == b"\x00\x01raw" and type(out) is bytes
    data[0] = 9
    assert out[0] == 0  # a copy, not a view of the caller's buffer


# -- torch .pt --------------------------------------------------------------------------


def saved(obj: Any, *, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=not legacy)
    return buffer.getvalue()


@pytest.mark.parametrize("legacy", [False, True])
def test_decode_pt_loads_tensors_and_containers(legacy: bool) -> None:
    state: dict[str, Any] = {
        "weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "bias": torch.zeros(3, dtype=torch.bfloat16),
        "meta": {"step": 7, "names": ["a", "b"], "lr": 0.1},
    }
    out = decode_pt(saved(state, legacy=legacy))
    assert out.keys() == state.keys()
    assert torch.equal(out["weight"], state["weight"])
    assert out["bias"].dtype == torch.bfloat16
    assert out["meta"] == state["meta"]


class Payload:
    """Unpickling this runs ``os.system`` and leaves a marker file behind."""

    marker = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy", [False, True])
def test_decode_pt_refuses_arbitrary_objects(tmp_path: Path, legacy: bool) -> None:
    marker = tmp_path / "pwned"
    payload = Payload()
    payload.marker = str(marker)
    blob = saved({"weight": torch.ones(2), "evil": payload}, legacy=legacy)
    with pytest.raises(DecodeError, match=r"refusing to load.*GLOBAL \w+\.system") as info:
        decode_pt(blob)
    assert isinstance(info.value, ValueError)
    assert not marker.exists()


def test_decode_pt_refuses_a_plain_pickle(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = Payload()
    payload.marker = str(marker)
    with pytest.raises(DecodeError, match=r"not a torch\.save file"):
        decode_pt(pickle.dumps(payload))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda blob: b"", "empty"),
        (
            lambda blob: b"definitely not torch",
            r"not a torch.save file \(first bytes b'definite'\)",
        ),
        (lambda blob: blob[: len(blob) // 2], "corrupt or truncated"),
        (lambda blob: blob[:4] + bytes(len(blob) - 4), "corrupt or truncated"),
    ],
    ids=["empty", "garbage", "truncated", "zeroed"],
)
def test_decode_pt_bad_files(make: Any, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_pt(make(saved({"weight": torch.ones(4)})))
