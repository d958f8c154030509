"""``dataio.read(uri, format=...)``: a whole object decoded by dataio's own decoders,
checked against the libraries that wrote it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from PIL import Image
from safetensors.numpy import save as save_safetensors

import dataio.io as dio
from dataio.exceptions import DataioError, DecodeError
from dataio.io.read import FORMATS

RNG = np.random.default_rng(5)
TABLE = pa.table({"key": ["a", "b", "c"], "value": [1.5, 2.5, None], "n": [1, 2, 3]})
RECORDS = [{"key": "a", "n": 1}, {"key": "b", "tags": [1, 2]}, {}]


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def npz(compressed: bool, **arrays: np.ndarray) -> bytes:
    out = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(out, **arrays)
    return out.getvalue()


def ipc(stream: bool) -> bytes:
    sink = pa.BufferOutputStream()
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(sink, TABLE.schema) as w:
        w.write_table(TABLE)
    return sink.getvalue().to_pybytes()


def parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(TABLE, sink)
    return sink.getvalue().to_pybytes()


def feather_v2() -> bytes:
    sink = pa.BufferOutputStream()
    feather.write_feather(TABLE, sink)
    return sink.getvalue().to_pybytes()


PIXELS = RNG.integers(0, 256, (12, 17, 3), dtype=np.uint8)


def png() -> bytes:
    out = io.BytesIO()
    Image.fromarray(PIXELS).save(out, format="PNG")
    return out.getvalue()


TENSORS: dict[str, np.ndarray] = {
    "w": RNG.standard_normal((3, 4)).astype(np.float32),
    "b": np.arange(5, dtype=np.int64),
}
ARRAY = RNG.standard_normal((4, 6)).astype(">f8")  # foreign byte order on purpose
X, Y = RNG.integers(0, 9, (3, 3), dtype=np.int16), np.linspace(0, 1, 7)


def same_arrays(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(got[name], array)
        assert got[name].dtype == array.dtype.newbyteorder("=")


def same_table(got: Any, expected: pa.Table = TABLE) -> None:
    assert isinstance(got, pa.Table) and got.equals(expected)


def equals(expected: Any) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        assert got == expected

    return check


# format -> (the object's bytes, written by an independent library; a check of the result)
CASES: dict[str, tuple[Callable[[], bytes], Callable[[Any], None]]] = {
    "bytes": (lambda: b"\x00raw\xff", equals(b"\x00raw\xff")),
    "text": (lambda: "héllo\nwörld".encode(), equals("héllo\nwörld")),
    "json": (lambda: json.dumps(RECORDS).encode(), equals(RECORDS)),
    "jsonl": (
        lambda: ("\n".join(json.dumps(r) for r in RECORDS) + "\n\n").encode(),
        equals(RECORDS),
    ),
    "npy": (lambda: npy(ARRAY), lambda got: same_arrays({"a": got}, {"a": ARRAY})),
    "npz": (lambda: npz(False, x=X, y=Y), lambda got: same_arrays(got, {"x": X, "y": Y})),
    "parquet": (parquet, same_table),
    "feather": (feather_v2, same_table),
    "arrow": (lambda: ipc(stream=False), same_table),
    "ipc": (lambda: ipc(stream=True), same_table),
    "image": (png, lambda got: np.testing.assert_array_equal(got, PIXELS)),
    "safetensors": (lambda: save_safetensors(TENSORS), lambda got: same_arrays(got, TENSORS)),
}


def test_every_format_has_a_case() -> None:
    assert sorted(CASES) == sorted(FORMATS)


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_read_decodes_each_format_like_the_writer_library(base: str, fmt: str) -> None:
    make, check = CASES[fmt]
    uri = f"{base}/object.{fmt}"
    dio.write(uri, make())
    check(dio.read(uri, format=fmt))  # type: ignore[call-overload]


def test_image_modes_and_compressed_npz(base: str) -> None:
    dio.write(f"{base}/img.png", png())
    gray = np.asarray(Image.open(io.BytesIO(png())).convert("L"))[..., None]
    np.testing.assert_array_equal(dio.read(f"{base}/img.png", format="image", mode="gray"), gray)
    rgba = dio.read(f"{base}/img.png", format="image", mode="rgba")
    assert rgba.shape == (12, 17, 4) and (rgba[..., 3] == 255).all()
    dio.write(f"{base}/packed.npz", npz(True, x=X, y=Y))
    same_arrays(dio.read(f"{base}/packed.npz", format="npz"), {"x": X, "y": Y})


@pytest.mark.parametrize("fmt", [f for f in sorted(CASES) if f not in ("bytes",)])
def test_bytes_of_another_format_are_a_decode_error_naming_the_uri(tmp_path: Any, fmt: str) -> None:
    uri = str(tmp_path / f"wrong.{fmt}")
    garbage = b"\xff\xfe this is not " + fmt.encode() + b" \x00\x01" * 40
    dio.write(uri, garbage if fmt != "text" else b"\xff\xfe\xfa")
    with pytest.raises(DecodeError) as info:
        dio.read(uri, format=fmt)  # type: ignore[call-overload]
    assert uri in str(info.value)


def test_misuse_is_a_clear_error(tmp_path: Any) -> None:
    uri = str(tmp_path / "x.json")
    dio.write(uri, b"{}")
    with pytest.raises(DataioError, match=r"unknown read format 'yaml'.*'jsonl'.*'safetensors'"):
        dio.read(uri, format="yaml")  # type: ignore[call-overload]
    with pytest.raises(DataioError, match="cannot take offset= or size="):
        dio.read(uri, format="json", offset=0, size=1)
    with pytest.raises(DataioError, match="format='image' only"):
        dio.read(uri, format="json", mode="rgb")
    with pytest.raises(DataioError, match="image mode must be one of"):
        dio.read(uri, format="image", mode="cmyk")
    assert dio.read(uri, format="bytes", offset=1) == b"}"


def test_reading_bytes_loads_no_decoder_library(tmp_path: Any) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"abc")
    code = (
        "import sys, json, dataio.io as d;"
        f"d.read({str(path)!r}); d.read({str(path)!r}, format='text');"
        "print(json.dumps([m for m in ('pyarrow', 'PIL', 'torch', 'datafusion')"
        " if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
