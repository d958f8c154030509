"""Hostile HDF5 files: no reading other files, no huge allocations, no builtin errors."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import dataio
from dataio.exceptions import FormatError, LimitError, PermissionDeniedError
from dataio.formats.hdf5 import open_hdf5, read_hdf5, scan_hdf5


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(b"root:x:0:0:secret\n" * 12)
    return path


def test_external_storage_is_refused_unless_allowed(tmp_path: Path, secret: Path) -> None:
    path = tmp_path / "external.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("leak", shape=(200,), dtype="u1", external=[(str(secret), 0, 200)])
    with h5py.File(path, "r") as f:  # the oracle: h5py reads the other file's bytes
        leaked = f["leak"][()].tobytes()
    assert leaked == secret.read_bytes()[:200]
    with pytest.raises(PermissionDeniedError, match=r"'leak'.*allow_external=True"):
        read_hdf5(path, key="leak")
    with pytest.raises(PermissionDeniedError, match=r"secret\.txt"):
        list(scan_hdf5(str(path)))
    allowed = read_hdf5(path, key="leak", allow_external=True)
    assert allowed.tobytes() == leaked


def test_virtual_dataset_over_another_file_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("data", data=np.arange(10, dtype=np.int32))
    path = tmp_path / "vds.h5"
    layout = h5py.VirtualLayout(shape=(10,), dtype=np.int32)
    layout[:] = h5py.VirtualSource(str(other), "data", shape=(10,))
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("virtual", layout)
    with pytest.raises(PermissionDeniedError, match=r"'virtual'.*other\.h5"):
        read_hdf5(path, key="virtual")
    np.testing.assert_array_equal(
        read_hdf5(path, key="virtual", allow_external=True), np.arange(10, dtype=np.int32)
    )


def test_external_link_is_not_followed_unless_allowed(tmp_path: Path) -> None:
    other = tmp_path / "target.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("g/data", data=np.arange(5))
    path = tmp_path / "links.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("own", data=np.arange(3))
        f["soft"] = h5py.SoftLink("/own")
        f["ext"] = h5py.ExternalLink(str(other), "/g")
    with pytest.raises(PermissionDeniedError, match=r"external link.*target\.h5"):
        read_hdf5(path, key="ext/data")
    np.testing.assert_array_equal(read_hdf5(path, key="soft"), np.arange(3))  # same file
    np.testing.assert_array_equal(
        read_hdf5(path, key="ext/data", allow_external=True), np.arange(5)
    )
    with open_hdf5(path) as f:
        assert "ext/data" not in f.keys()  # noqa: SIM118  # listing does not walk into the other file


def test_unwritten_huge_dataset_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("huge", shape=(1 << 30,), dtype=np.float64, chunks=(1 << 20,))
    assert path.stat().st_size < 64 * 1024  # 8 GiB declared, nothing written
    with pytest.raises(LimitError, match=r"max_decoded_bytes"):
        read_hdf5(path, key="huge")
    # a small selection of it is fine, and matches h5py (the fill value)
    np.testing.assert_array_equal(
        read_hdf5(path, key="huge", selection=slice(0, 4)), np.zeros(4, dtype=np.float64)
    )
    with dataio.limits.scoped(max_decoded_bytes=16), pytest.raises(LimitError):
        read_hdf5(path, key="huge", selection=slice(0, 4))


def test_damaged_metadata_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        for i in range(8):
            f.create_dataset(f"g{i}/d", data=np.arange(4))
    data = bytearray(path.read_bytes())
    failures = 0
    for start in range(800, len(data), 97):  # damage object headers and B-trees in turn
        damaged = bytearray(data)
        damaged[start : start + 8] = b"\xff" * 8
        target = tmp_path / f"d{start}.h5"
        target.write_bytes(bytes(damaged))
        try:
            with open_hdf5(target) as f:
                for key in f.keys():  # noqa: SIM118 - not a dict
                    f.read(key)
        except dataio.DataioError as exc:
            failures += 1
            assert str(target) in str(exc)
    assert failures > 0


def _vlen_file(path: Path) -> tuple[int, int]:
    """A vlen-string dataset; returns its storage offset and its heap collection address."""
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data=np.array(["a", "bb", "ccc"] * 20, dtype=h5py.string_dtype()))
    with h5py.File(path, "r") as f:
        offset = f["s"].id.get_offset()
    first = path.read_bytes()[offset : offset + 16]
    assert int.from_bytes(first[:4], "little") == 1  # "a": 1 byte, in a global heap
    return offset, int.from_bytes(first[4:12], "little")


def test_vlen_string_with_huge_length_is_refused_fast(tmp_path: Path) -> None:
    path = tmp_path / "vlen.h5"
    offset, _ = _vlen_file(path)
    data = bytearray(path.read_bytes())
    data[offset + 9 * 16 + 2] = 0xF6  # element 9 claims ~16 M bytes: libhdf5 spins on it
    path.write_bytes(bytes(data))
    with (
        dataio.limits.scoped(max_decoded_bytes=1 << 20),
        pytest.raises(LimitError, match="max_decoded_bytes"),
    ):
        read_hdf5(path, key="s")
    with pytest.raises(FormatError, match="global heap"):
        read_hdf5(path, key="s")


def test_vlen_reference_to_damaged_heap_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "vlen.h5"
    _, heap = _vlen_file(path)
    data = bytearray(path.read_bytes())
    data[heap + 8 : heap + 16] = (1 << 40).to_bytes(8, "little")  # collection size
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"vlen\.h5:s.*global heap"):
        read_hdf5(path, key="s")


def test_valid_vlen_data_matches_h5py(tmp_path: Path) -> None:
    path = tmp_path / "vlen.h5"
    strings = np.array(["a", "", "ccc", "é" * 300] * 5, dtype=object)
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data=strings, dtype=h5py.string_dtype())
        ragged = f.create_dataset("v", (4,), dtype=h5py.vlen_dtype(np.int32))
        for i in range(4):
            ragged[i] = np.arange(i * 3, dtype=np.int32)
    with h5py.File(path, "r") as f:
        expected_s, expected_v = list(f["s"][()]), list(f["v"][()])
    assert list(read_hdf5(path, key="s")) == expected_s
    for got, want in zip(read_hdf5(path, key="v"), expected_v, strict=True):
        np.testing.assert_array_equal(got, want)


def test_datatype_without_numpy_equivalent_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "time.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("t", data=np.arange(8, dtype="<i4"))
    with h5py.File(path, "r") as f:
        header = h5py.h5o.get_info(f["t"].id).addr
    data = bytearray(path.read_bytes())
    # the datatype message of a signed 4-byte integer; class nibble 0 -> 2 (H5T_TIME)
    at = data.index(b"\x10\x08\x00\x00\x04\x00\x00\x00", header)
    data[at] = 0x12
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f, pytest.raises(TypeError):
        f["t"].dtype  # noqa: B018 - the oracle: h5py has no NumPy type for it
    with pytest.raises(FormatError, match=r"time\.h5.*'t'"):
        read_hdf5(path, key="t")


def test_mapped_views_are_not_limited_by_decoded_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.h5"
    values = np.arange(1024, dtype="<f8")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values)  # contiguous: copy=False maps the file
    with dataio.limits.scoped(max_decoded_bytes=1024):
        np.testing.assert_array_equal(read_hdf5(path, key="x", copy=False), values)
        with pytest.raises(LimitError):
            read_hdf5(path, key="x")  # a copy of 8 KiB is over the 1 KiB limit
