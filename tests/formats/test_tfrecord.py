"""TFRecord reading (``dataio/formats/tfrecord.py``) against an independent writer.

The writer below follows the TFRecord and protobuf specifications directly — length,
masked CRC32C of the length, data, masked CRC32C of the data; ``tf.train.Example``
messages encoded field by field — with the ``crc32c`` package as the checksum oracle.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import crc32c as crc_oracle
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataio import col
from dataio.exceptions import FormatError, NotFoundError, PlanError
from dataio.formats.tfrecord import compression_of, crc32c, iter_tfrecord, masked_crc32c
from dataio.frame import scan_tfrecord

# -- an independent encoder -----------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64: two's complement, ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    key = varint((number << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def feature(value: list[bytes] | list[float] | list[int], kind: str, packed: bool = True) -> bytes:
    if kind == "bytes":
        body = b"".join(field(1, 2, v) for v in value)  # type: ignore[arg-type]
        return field(1, 2, body)
    if kind == "float":
        if packed:
            body = field(1, 2, struct.pack(f"<{len(value)}f", *value))
        else:
            body = b"".join(field(1, 5, struct.pack("<f", v)) for v in value)
        return field(2, 2, body)
    if packed:
        body = field(1, 2, b"".join(varint(v) for v in value))  # type: ignore[arg-type]
    else:
        body = b"".join(field(1, 0, varint(v)) for v in value)  # type: ignore[arg-type]
    return field(3, 2, body)


def example(features: dict[str, tuple[str, list, bool]]) -> bytes:
    entries = b""
    for name, (kind, values, packed) in features.items():
        entry = field(1, 2, name.encode()) + field(2, 2, feature(values, kind, packed))
        entries += field(1, 2, entry)
    return field(1, 2, entries)


def masked(data: bytes) -> int:
    crc = crc_oracle.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


def write(path: Path, records: list[bytes]) -> Path:
    path.write_bytes(b"".join(frame_record(r) for r in records))
    return path


def rows(n: int) -> list[dict[str, tuple[str, list, bool]]]:
    out = []
    for i in range(n):
        out.append(
            {
                "image": ("bytes", [bytes([i]) * (i + 1)], True),
                "label": ("int64", [i - 3], i % 2 == 0),
                "bbox": ("float", [0.5 * i, 1.25, -2.0, float(i)], i % 3 != 0),
                "tags": ("bytes", [f"t{j}".encode() for j in range(i % 3)], True),
                "big": ("int64", [2**62 + i, -(2**63)], True),
            }
        )
    return out


# -- tests -----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=6000))
def test_crc32c_matches_the_crc32c_package(data: bytes) -> None:
    assert crc32c(data) == crc_oracle.crc32c(data)
    assert masked_crc32c(data) == masked(data)


def test_large_buffers_take_the_vectorized_path() -> None:
    data = np.random.default_rng(1).integers(0, 256, 300_001, np.uint8).tobytes()
    assert crc32c(data) == crc_oracle.crc32c(data)
    assert crc32c(b"123456789") == 0xE3069283  # the check value of the CRC-32C spec


def test_examples_written_independently_read_back_exactly(tmp_path: Path) -> None:
    written = rows(7)
    path = write(tmp_path / "train.tfrecord", [example(r) for r in written])
    got = list(iter_tfrecord(path))
    assert len(got) == len(written)
    for read, expected in zip(got, written, strict=True):
        assert set(read) == set(expected)
        for name, (kind, values, _) in expected.items():
            if kind == "bytes":
                assert read[name] == values
            elif kind == "float":
                assert read[name].dtype == np.float32
                assert np.array_equal(read[name], np.array(values, np.float32))
            else:
                assert read[name].dtype == np.int64 and read[name].tolist() == values
    raw = list(iter_tfrecord(path, raw=True))
    assert raw == [example(r) for r in written]


def test_scan_tfrecord_makes_a_frame(tmp_path: Path) -> None:
    written = rows(9)
    write(tmp_path / "a.tfrecord", [example(r) for r in written[:5]])
    write(tmp_path / "b.tfrecord", [example(r) for r in written[5:]])
    frame = scan_tfrecord(tmp_path / "*.tfrecord")
    assert frame.schema.field("label").type == pa.int64()
    assert frame.schema.field("image").type == pa.binary()
    assert frame.schema.field("bbox").type == pa.list_(pa.float32())
    assert frame.schema.field("tags").type == pa.list_(pa.binary())
    got = frame.filter(col("label") >= 0).select("label", "image", "tags").collect().to_pylist()
    expected = [
        {"label": r["label"][1][0], "image": r["image"][1][0], "tags": r["tags"][1]}
        for r in written
        if r["label"][1][0] >= 0
    ]
    assert got == expected
    bbox = frame.select("bbox").collect().column("bbox").to_pylist()
    assert bbox == [np.array(r["bbox"][1], np.float32).tolist() for r in written]


@pytest.mark.parametrize("where", ["length", "length_crc", "data", "data_crc"])
def test_a_flipped_byte_is_reported_with_file_and_offset(tmp_path: Path, where: str) -> None:
    records = [example(r) for r in rows(3)]
    path = write(tmp_path / "bad.tfrecord", records)
    second = 16 + len(records[0])  # byte offset of record 1
    position = (
        second
        + {"length": 2, "length_crc": 9, "data": 12 + 5, "data_crc": 12 + len(records[1]) + 1}[
            where
        ]
    )
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x01
    path.write_bytes(raw)
    reader = iter_tfrecord(path)
    assert next(reader)  # record 0 is intact
    message = "checksum mismatch" if where != "length" else "(checksum mismatch|truncated)"
    with pytest.raises(
        FormatError, match=rf"bad\.tfrecord.*record 1 at byte offset {second}.*{message}"
    ):
        next(reader)


def test_truncation_and_garbage_are_reported(tmp_path: Path) -> None:
    records = [example(r) for r in rows(2)]
    path = write(tmp_path / "cut.tfrecord", records)
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(FormatError, match=r"record 1 at byte offset \d+: truncated"):
        list(iter_tfrecord(path))
    not_example = write(tmp_path / "junk.tfrecord", [b"\x0f\xff\xff"])
    with pytest.raises(FormatError, match=r"record 0 at byte offset 0 is not a tf\.train\.Example"):
        list(iter_tfrecord(not_example))
    assert list(iter_tfrecord(not_example, raw=True)) == [b"\x0f\xff\xff"]
    with pytest.raises(NotFoundError):
        list(iter_tfrecord(tmp_path / "missing.tfrecord"))


def test_a_scalar_feature_with_more_values_later_needs_a_schema(tmp_path: Path) -> None:
    first = [example({"x": ("int64", [i], True)}) for i in range(70)]
    path = write(tmp_path / "x.tfrecord", [*first, example({"x": ("int64", [1, 2], True)})])
    with pytest.raises(FormatError, match=r"'x' has 2 values.*pass schema="):
        scan_tfrecord(path).collect()
    schema = pa.schema([("x", pa.list_(pa.int64()))])
    got = scan_tfrecord(path, schema=schema).collect().to_pylist()
    assert got[-1] == {"x": [1, 2]} and got[0] == {"x": [0]}


# -- compressed files (TensorFlow's GZIP / ZLIB options) --------------------------------------


def framed(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


@pytest.mark.parametrize("kind", ["gzip", "zlib"])
@pytest.mark.parametrize("given", [None, "explicit", "tensorflow"])
def test_compressed_files_read_back_exactly(tmp_path: Path, kind: str, given: str | None) -> None:
    records = [example(r) for r in rows(40)]
    body = framed(records)
    packed = gzip.compress(body) if kind == "gzip" else zlib.compress(body, 9)
    path = tmp_path / f"train.tfrecord{'.gz' if kind == 'gzip' else ''}"
    path.write_bytes(packed)
    option = {None: None, "explicit": kind, "tensorflow": kind.upper()}[given]
    assert list(iter_tfrecord(path, raw=True, compression=option)) == records
    got = list(iter_tfrecord(path, compression=option))
    assert [g["label"].tolist() for g in got] == [r["label"][1] for r in rows(40)]
    assert compression_of(packed[:12]) == kind


def test_scans_mix_compressed_and_plain_files(tmp_path: Path) -> None:
    written = rows(12)
    records = [example(r) for r in written]
    # two gzip members in one file are one stream (as `cat a.gz b.gz` makes)
    (tmp_path / "a.tfrecord.gz").write_bytes(
        gzip.compress(framed(records[:3])) + gzip.compress(framed(records[3:6]))
    )
    (tmp_path / "b.tfrecord").write_bytes(framed(records[6:9]))
    (tmp_path / "c.tfrecord").write_bytes(zlib.compress(framed(records[9:])))
    frame = scan_tfrecord(tmp_path)
    assert frame.select("label").collect().to_pylist() == [
        {"label": r["label"][1][0]} for r in written
    ]
    assert "compression" not in repr(frame)
    explicit = scan_tfrecord(tmp_path / "a.tfrecord.gz", compression="GZIP")
    assert "compression='gzip'" in explicit.explain()
    assert explicit.select("label").collect().num_rows == 6


def test_a_raw_file_that_starts_like_gzip_is_read_raw(tmp_path: Path) -> None:
    # a record of 0x8b1f bytes: its length field starts with gzip's magic 1f 8b
    record = b"\x0a" + b"x" * (0x8B1F - 1)
    body = frame_record(record)
    assert body[:2] == b"\x1f\x8b"
    assert compression_of(body[:12]) == "none"
    path = tmp_path / "looks-gzip.tfrecord"
    path.write_bytes(body + frame_record(b"second"))
    assert list(iter_tfrecord(path, raw=True)) == [record, b"second"]
    assert compression_of(b"\x1f\x8b\x08\x00" + bytes(8)) == "gzip"
    assert compression_of(b"") == "none"


def test_damaged_compressed_files_are_reported(tmp_path: Path) -> None:
    records = [example(r) for r in rows(30)]
    packed = gzip.compress(framed(records))
    cut = tmp_path / "cut.tfrecord.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(FormatError, match=r"cut\.tfrecord\.gz.*gzip stream.* is corrupt or trunc"):
        list(iter_tfrecord(cut))
    flipped = bytearray(zlib.compress(framed(records)))
    flipped[len(flipped) // 2] ^= 0x55
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(FormatError, match=r"bad\.tfrecord.*record \d+ at byte offset \d+"):
        list(iter_tfrecord(bad, compression="zlib"))
    with pytest.raises(FormatError, match="length checksum mismatch"):
        list(iter_tfrecord(cut, compression="none"))
    with pytest.raises(PlanError, match="compression must be"):
        list(iter_tfrecord(cut, compression="snappy"))
    with pytest.raises(PlanError, match="compression must be"):
        scan_tfrecord(cut, compression="lz4")
    with pytest.raises(PlanError, match="compression must be"):
        list(iter_tfrecord(cut, compression=True))  # type: ignore[arg-type]
    # one zlib stream per file: what follows its end is reported, not dropped
    body = framed(records)
    for tail in (zlib.compress(body), b"garbage"):
        extra = tmp_path / "extra.tfrecord"
        extra.write_bytes(zlib.compress(body) + tail)
        with pytest.raises(FormatError, match=rf"record {len(records)} .*bytes follow the end"):
            list(iter_tfrecord(extra))
    # a plain file whose first length checksum is damaged but whose first bytes read as a
    # zlib header: the message says how the compression was chosen
    plain = bytearray(frame_record(b"\x0a" + b"x" * (0x9C78 - 1)))
    assert plain[:2] == b"\x78\x9c"
    plain[9] ^= 0xFF
    odd = tmp_path / "odd.tfrecord"
    odd.write_bytes(bytes(plain))
    with pytest.raises(FormatError, match="told from the first bytes: pass compression='none'"):
        list(iter_tfrecord(odd))
    with pytest.raises(FormatError, match="length checksum mismatch"):
        list(iter_tfrecord(odd, compression="none"))
