"""Hostile TFRecord, JSON and text input: refused with a DataioError naming the file,
record and offset, never a builtin exception or an allocation sized by a length field
(issue #20). The TFRecord files are framed with valid checksums (``crc32c`` is the
oracle), so what is hostile is the length or the Example, not a checksum."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import crc32c as crc_oracle
import numpy as np
import pytest

import dataio
from dataio import limits
from dataio.exceptions import DecodeError, FormatError, LimitError
from dataio.formats.tfrecord import iter_tfrecord
from dataio.frame import scan_tfrecord
from dataio.udfs.text import decode_json, decode_text

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    key = varint(number << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)


def example(name: bytes, feature: bytes) -> bytes:
    return field(1, 2, field(1, 2, field(1, 2, name) + field(2, 2, feature)))


def masked(data: bytes) -> int:
    crc = crc_oracle.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def framed(data: bytes, length: int | None = None) -> bytes:
    """One record: ``length`` (default: the true one) with a valid checksum, then data."""
    head = struct.pack("<Q", len(data) if length is None else length)
    return head + struct.pack("<I", masked(head)) + data + struct.pack("<I", masked(data))


# -- TFRecord lengths -----------------------------------------------------------------------

LENGTHS = {
    # 16 bytes that asked read() for 1 TiB (MemoryError) or 2**64-1 (OverflowError)
    "length-2e40": framed(b"", 1 << 40)[:12],
    "length-2e64-1": framed(b"", 2**64 - 1)[:12],
    "length-2e31-second-record": framed(example(b"a", field(3, 2, field(1, 2, b"\x01"))))
    + framed(b"", 2**31)[:12],
}


@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_a_length_past_the_file_is_truncation_not_an_allocation(tmp_path: Path, name: str) -> None:
    path = tmp_path / "hostile.tfrecord"
    path.write_bytes(LENGTHS[name])
    offset = 0 if "second" not in name else len(LENGTHS[name]) - 12
    with pytest.raises(FormatError, match=rf"record \d at byte offset {offset}: truncated") as e:
        list(iter_tfrecord(path))
    assert str(path) in str(e.value)
    with pytest.raises(dataio.DataioError, match="truncated"):
        scan_tfrecord(str(path)).collect()


def test_a_compressed_record_length_is_checked_against_the_limit(tmp_path: Path) -> None:
    # Compressed, the file's size says nothing about the stream's: the limit decides.
    path = tmp_path / "hostile.tfrecord.gz"
    path.write_bytes(gzip.compress(framed(b"", 1 << 40)[:12]))
    with pytest.raises(LimitError, match="record 0 at byte offset 0: record length") as e:
        list(iter_tfrecord(path))
    assert e.value.name == "max_decoded_bytes"  # type: ignore[attr-defined]


def test_a_record_longer_than_the_preallocation_reads_in_steps(tmp_path: Path) -> None:
    values = np.arange(3000, dtype=np.float32)
    data = example(b"x", field(2, 2, field(1, 2, values.tobytes())))
    for compress in (bytes, gzip.compress):
        path = tmp_path / f"big-{compress.__name__}.tfrecord"
        path.write_bytes(compress(framed(data) + framed(data)))
        with limits.scoped(max_prealloc_bytes=1000):  # the records are ~12 KB
            got = list(iter_tfrecord(path))
        assert len(got) == 2 and all(np.array_equal(r["x"], values) for r in got)
        with (
            limits.scoped(max_decoded_bytes=1000),
            pytest.raises(LimitError, match="max_decoded_bytes=1,000"),
        ):
            list(iter_tfrecord(path))


# -- TFRecord Examples ----------------------------------------------------------------------

EXAMPLES = {
    # a Feature whose list field is a varint: _fields(int) raised TypeError
    "feature-list-is-varint": (
        example(b"x", field(3, 0, varint(5))),
        r"list \(field 3\) is not length-delimited",
    ),
    "feature-list-is-fixed32": (
        example(b"x", field(2, 5, b"\0\0\0\0")),
        r"list \(field 2\) is not length-delimited",
    ),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_malformed_examples_are_format_errors(tmp_path: Path, name: str) -> None:
    data, message = EXAMPLES[name]
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(framed(data))
    with pytest.raises(
        FormatError, match=f"record 0 at byte offset 0 is not a tf.train.Example: .*{message}"
    ):
        list(iter_tfrecord(path))
    with pytest.raises(FormatError, match=message):
        scan_tfrecord(str(path)).collect()


def test_a_70_bit_varint_keeps_its_low_64_bits(tmp_path: Path) -> None:
    # Ten varint bytes carry 70 bits; protobuf parsers keep the low 64 (np.array raised
    # OverflowError on the rest). 2**64 + 5 -> 5, 2**69 - 1 -> -1 as int64.
    values = [2**64 + 5, 2**69 - 1, 7]
    data = example(b"n", field(3, 2, field(1, 2, b"".join(varint(v) for v in values))))
    path = tmp_path / "wide.tfrecord"
    path.write_bytes(framed(data))
    (row,) = iter_tfrecord(path)
    assert row["n"].tolist() == [5, -1, 7]


# -- JSON and text --------------------------------------------------------------------------

JSON = {
    # Python refuses int strings over 4,300 digits with a bare ValueError
    "int-5000-digits": b"9" * 5000,
    "int-4301-digits-in-list": b'{"a": [' + b"1" * 4301 + b"]}",
    "nested-100000": b"[" * 100_000,
}


@pytest.mark.parametrize("name", sorted(JSON))
def test_json_python_cannot_read_is_a_decode_error(tmp_path: Path, name: str) -> None:
    data = JSON[name]
    with pytest.raises(DecodeError):
        decode_json(data)
    for format in ("json", "jsonl"):
        path = tmp_path / f"bad.{format}"
        path.write_bytes(data)
        with pytest.raises(DecodeError, match=str(path)):
            dataio.io.read(str(path), format=format)  # type: ignore[call-overload]


TEXT = {
    # idna and punycode raise a bare UnicodeError, without a byte offset
    "idna-bad-ace-label": (b"xn--abc-@@", "idna"),
    "idna-no-round-trip": (b"xn--ls8h-", "idna"),
    "punycode-bad-digit": (b"abc-@@", "punycode"),
    "utf-7-bad-shift": (b"+\xff-", "utf-7"),
}


@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_a_codec_refuses_is_a_decode_error(name: str) -> None:
    data, encoding = TEXT[name]
    with pytest.raises(UnicodeError):  # the oracle: Python's own codec refuses it
        data.decode(encoding)
    with pytest.raises(DecodeError, match=f"not valid {encoding}"):
        decode_text(data, encoding)


CORPUS_FILES = {
    "tfrecord": {**LENGTHS, **{k: framed(v[0]) for k, v in EXAMPLES.items()}},
    "json": {k: v for k, v in JSON.items() if len(v) < 256 << 10},
    "text": {f"{k}.{v[1]}": v[0] for k, v in TEXT.items()},
}


@pytest.mark.parametrize("target", sorted(CORPUS_FILES))
def test_corpus_holds_these_inputs(target: str) -> None:
    """The fuzz corpus replays these bytes; keep it in step with the tests."""
    for name, data in CORPUS_FILES[target].items():
        assert (CORPUS / target / name).read_bytes() == data, name
