"""NPY / NPZ (``dataio/formats/numpy.py``) against ``np.load``, and against broken files."""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from formats._memory import file_offset, mapping_of

from dataio.exceptions import DataioError, FieldError, FormatError, NotFoundError, PlanError
from dataio.formats.numpy import decode_npz, read_npz, read_numpy, scan_npz, scan_numpy

RNG = np.random.default_rng(5)
ARRAYS: dict[str, np.ndarray] = {
    "float32": RNG.standard_normal((4, 5)).astype(np.float32),
    "int16": RNG.integers(-500, 500, (3, 2, 2)).astype(np.int16),
    "uint64": RNG.integers(0, 2**63, 6, dtype=np.uint64),
    "bool": RNG.integers(0, 2, 9).astype(bool),
    "complex64": (RNG.standard_normal(5) + 1j * RNG.standard_normal(5)).astype(np.complex64),
    "complex128": RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3)),
    "big_endian_f8": RNG.standard_normal((3, 3)).astype(">f8"),
    "big_endian_c16": (RNG.standard_normal(4) + 2j).astype(">c16"),
    "big_endian_c8": (RNG.standard_normal(4) - 1j).astype(">c8"),
    "big_endian_i4": np.arange(-3, 9).astype(">i4"),
    "fortran": np.asfortranarray(RNG.standard_normal((5, 7))),
    "fortran_big_endian_c16": np.asfortranarray((RNG.standard_normal((3, 4)) + 1j).astype(">c16")),
    "scalar": np.array(3.25),
    "empty": np.zeros((0, 4), np.float32),
    "strings": np.array(["a", "bcd", "ef"]),
    "bytes": np.array([b"xy", b"z"]),
    "structured": np.array([(1, 2.5), (3, -1.0)], dtype=[("id", "<i4"), ("score", ">f8")]),
    "datetime": np.array(["2024-01-01", "2025-06-30"], dtype="datetime64[D]"),
}


def save(path: Path, array: np.ndarray, version: tuple[int, int] | None = None) -> Path:
    with open(path, "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=False)
    return path


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same values, shape and dtype up to byte order (ours is always native)."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype.newbyteorder("=")
    assert actual.dtype.isnative and all(
        actual.dtype.fields[f][0].isnative for f in actual.dtype.fields or ()
    )
    np.testing.assert_array_equal(actual, expected)


# -- NPY --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("mmap", [True, False])
def test_read_numpy_matches_np_load(tmp_path: Path, name: str, mmap: bool) -> None:
    path = save(tmp_path / f"{name}.npy", ARRAYS[name])
    expected = np.load(path)
    array = read_numpy(path, mmap=mmap)
    assert_same(array, expected)
    assert array.flags.f_contiguous == expected.flags.f_contiguous
    assert array.flags.writeable is not mmap


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_every_npy_version_reads(tmp_path: Path, version: tuple[int, int]) -> None:
    array = np.array(["naïve", "日本"]) if version == (3, 0) else ARRAYS["float32"]
    path = save(tmp_path / "v.npy", array, version)
    assert_same(read_numpy(path), np.load(path))


def test_mapped_reads_view_the_file(tmp_path: Path) -> None:
    array = ARRAYS["float32"]
    path = save(tmp_path / "x.npy", array)
    view = read_numpy(path)
    region = mapping_of(view.ctypes.data)
    assert region is not None and region.perms.startswith("r--s")
    assert file_offset(view.ctypes.data, path) == os.path.getsize(path) - array.nbytes
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 1
    copy = read_numpy(path, mmap=False)
    copy[0, 0] = 1  # writable and private
    assert mapping_of(copy.ctypes.data) is None or mapping_of(copy.ctypes.data).path != str(path)
    assert read_numpy(path)[0, 0] == array[0, 0]


def test_foreign_byte_order_becomes_native_values(tmp_path: Path) -> None:
    path = save(tmp_path / "be.npy", ARRAYS["big_endian_c16"])
    array = read_numpy(path)
    assert array.dtype == np.dtype("<c16") and not array.flags.writeable
    np.testing.assert_array_equal(array, ARRAYS["big_endian_c16"])


def write_object_npy(path: Path) -> Path:
    """An object-dtype NPY whose pickle would create ``path.marker`` when unpickled."""
    np.save(path, np.array([Path("x"), None], dtype=object), allow_pickle=True)
    return path


class Trap:
    """Unpickling this runs ``open(marker, "w")``: proof that nothing was unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def test_pickled_npy_is_refused_without_unpickling(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    path = tmp_path / "evil.npy"
    header = {"descr": "|O", "fortran_order": False, "shape": (1,)}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(pickle.dumps(np.array([Trap(str(marker))], dtype=object)))
    with pytest.raises(FormatError, match=r"holds Python objects .*never unpickles") as caught:
        read_numpy(path)
    assert str(path) in str(caught.value) and isinstance(caught.value, ValueError)
    assert not marker.exists()
    structured = write_object_npy(tmp_path / "objects.npy")
    with pytest.raises(FormatError, match="pickled"):
        read_numpy(structured, mmap=False)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


GOOD = npy_bytes(np.arange(10, dtype=np.float64))
BROKEN_NPY: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "is empty"),
    "not npy": (b"PK\x03\x04" + bytes(60), "is not an NPY file"),
    "short": (GOOD[:8], "is not an NPY file (too short)"),
    "truncated header": (GOOD[:40], "truncated: its NPY header needs"),
    "truncated data": (GOOD[:-9], "is truncated: shape (10,) of float64 needs 80 data bytes"),
    "version 9": (GOOD[:6] + b"\x09\x00" + GOOD[8:], "NPY format version 9"),
    "huge header": (GOOD[:8] + struct.pack("<H", 60000) + GOOD[10:], "over the 10000-byte"),
    "code in header": (
        GOOD[:8]
        + struct.pack("<H", 118)
        + b"__import__('os').system('touch /tmp/pwned-dataio')".ljust(117)
        + b"\n",
        "unreadable NPY header",
    ),
    "missing key": (
        GOOD[:8] + struct.pack("<H", 118) + b"{'descr': '<f8', 'shape': (10,)}".ljust(117) + b"\n",
        "must be a dict of descr, fortran_order and shape",
    ),
    "negative shape": (
        GOOD[:8]
        + struct.pack("<H", 118)
        + b"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}".ljust(117)
        + b"\n",
        "NPY shape must be a tuple of sizes >= 0",
    ),
    "bad descr": (
        GOOD[:8]
        + struct.pack("<H", 118)
        + b"{'descr': 'nope', 'fortran_order': False, 'shape': (1,)}".ljust(117)
        + b"\n",
        "is not a dtype",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_NPY))
@pytest.mark.parametrize("mmap", [True, False])
def test_broken_npy_is_refused(tmp_path: Path, case: str, mmap: bool) -> None:
    data, message = BROKEN_NPY[case]
    path = tmp_path / "broken.npy"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=re.escape(message)) as caught:
        read_numpy(path, mmap=mmap)
    assert str(path) in str(caught.value)
    assert not Path("/tmp/pwned-dataio").exists()


def test_missing_and_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        read_numpy(tmp_path / "absent.npy")
    with pytest.raises(DataioError, match="is a directory"):
        read_numpy(tmp_path)


# -- NPZ --------------------------------------------------------------------------------


NPZ_ARRAYS = {k: ARRAYS[k] for k in ("float32", "complex128", "big_endian_f8", "fortran", "empty")}


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("mmap", [True, False])
def test_read_npz_matches_np_load(tmp_path: Path, compressed: bool, mmap: bool) -> None:
    path = tmp_path / "a.npz"
    (np.savez_compressed if compressed else np.savez)(path, **NPZ_ARRAYS)
    arrays = read_npz(path, mmap=mmap)
    with np.load(path) as expected:
        assert sorted(arrays) == sorted(expected.files)
        for name in expected.files:
            assert_same(arrays[name], expected[name])
            assert arrays[name].flags.writeable is not mmap


def test_stored_npz_members_are_views_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, x=ARRAYS["float32"], y=np.arange(1000, dtype=np.int64))
    arrays = read_npz(path, keys=["y", "x"])
    assert list(arrays) == ["y", "x"]
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("y.npy")
        member = io.BytesIO(zf.read(info))
    np.lib.format.read_magic(member)
    np.lib.format.read_array_header_1_0(member)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack(
        "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
    )
    data_start = info.header_offset + 30 + name_len + extra_len
    assert file_offset(arrays["y"].ctypes.data, path) == data_start + member.tell()
    assert not arrays["y"].flags.writeable
    np.testing.assert_array_equal(arrays["y"], np.arange(1000))


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_decode_npz_reads_an_archive_in_memory(save: Any) -> None:
    out = io.BytesIO()
    save(out, x=ARRAYS["float32"], y=ARRAYS["big_endian_f8"])
    data = bytearray(out.getvalue())  # a buffer that is not bytes: read in place, not copied
    arrays = decode_npz(data, source="mem.npz")
    expected = np.load(io.BytesIO(bytes(data)))
    assert sorted(arrays) == sorted(expected.files)
    for name in expected.files:
        assert_same(arrays[name], expected[name])
    assert list(decode_npz(data, source="mem.npz", keys=["y"])) == ["y"]
    with pytest.raises(FormatError, match=r"'mem\.npz' is not a readable \.npz"):
        decode_npz(b"PK not a zip", source="mem.npz")


def test_npz_errors(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, x=np.ones(3))
    with pytest.raises(FieldError, match=r"has no array 'z'; it holds \['x'\]"):
        read_npz(path, keys=["z"])
    with pytest.raises(PlanError, match="list of names"):
        read_npz(path, keys="x")
    (tmp_path / "bad.npz").write_bytes(b"not a zip at all")
    with pytest.raises(FormatError, match=r"not a readable \.npz"):
        read_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "obj.npz", o=np.array([1, None], dtype=object))
    with pytest.raises(FormatError, match="never unpickles"):
        read_npz(tmp_path / "obj.npz")
    truncated = tmp_path / "cut.npz"
    truncated.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(FormatError):
        read_npz(truncated)


# -- scans ------------------------------------------------------------------------------


def test_scan_numpy_is_lazy_and_reads_on_iteration(tmp_path: Path) -> None:
    scan = scan_numpy(str(tmp_path / "*.npy"))  # nothing exists yet: nothing is read
    assert "scan_numpy(" in repr(scan)
    with pytest.raises(NotFoundError, match="matched no files"):
        list(scan)
    for i in (2, 0, 1):
        save(tmp_path / f"x{i}.npy", np.full(3, i))
    records = list(scan)
    assert [r["key"] for r in records] == ["x0", "x1", "x2"]
    assert all(np.array_equal(r["array"], np.full(3, i)) for i, r in enumerate(records))
    assert records[0]["path"] == str(tmp_path / "x0.npy")
    (tmp_path / "x1.npy").write_bytes(b"garbage")
    again = list(scan)  # every pass reads again; a damaged file does not end it
    assert [r["key"] for r in again] == ["x0", "x1", "x2"]
    with pytest.raises(FormatError, match=r"x1\.npy"):
        again[1]["array"]


def test_scan_numpy_takes_a_list_of_paths(tmp_path: Path) -> None:
    paths = [save(tmp_path / f"{k}.npy", np.arange(3) * i) for i, k in enumerate("ba")]
    records = list(scan_numpy(paths, mmap=False))
    assert [r["key"] for r in records] == ["b", "a"]
    assert records[1]["array"].flags.writeable
    with pytest.raises(PlanError, match="a path, a glob, a directory or a list of them"):
        scan_numpy(3)  # type: ignore[arg-type]


def test_scan_npz_yields_one_record_per_file(tmp_path: Path) -> None:
    sub = tmp_path / "deep"
    sub.mkdir()
    np.savez(tmp_path / "a.npz", x=np.ones(2), y=np.zeros(1))
    np.savez_compressed(sub / "b.npz", x=np.full(2, 7.0), y=np.ones(1))
    scan = scan_npz(str(tmp_path / "**" / "*.npz"), keys=["x"])
    records = list(scan)
    assert [(r["key"], sorted(r["arrays"])) for r in records] == [("a", ["x"]), ("b", ["x"])]
    np.testing.assert_array_equal(records[1]["arrays"]["x"], np.full(2, 7.0))
