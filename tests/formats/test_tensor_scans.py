"""``scan_numpy``, ``scan_npz`` and ``scan_hdf5`` are lazy frames (``dataio/formats/_scan.py``)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pytest

import dataio
from dataio import col
from dataio.exceptions import FormatError, NotFoundError
from dataio.formats._scan import tensor_type


def _array(value: dict) -> np.ndarray:
    """The oracle's way back from a tensor struct: NumPy alone."""
    return np.frombuffer(value["data"], value["dtype"]).reshape(value["shape"])


def test_every_scan_is_a_lazy_frame(tmp_path: Path) -> None:
    for scan in (
        dataio.scan_numpy(str(tmp_path / "*.npy")),
        dataio.scan_npz(str(tmp_path / "*.npz")),
        dataio.scan_hdf5(str(tmp_path / "*.h5")),
    ):  # nothing exists yet, and nothing is read: the schema does not depend on the files
        assert isinstance(scan, dataio.LazyFrame)
        assert scan.columns[:2] == ["key", "path"]
        with pytest.raises(NotFoundError, match="matched no files"):
            scan.collect()


def test_scan_numpy_collects_arrays_of_any_dtype_and_shape(tmp_path: Path) -> None:
    arrays = {
        "a": np.arange(6, dtype=np.int64).reshape(2, 3),
        "b": np.asfortranarray(np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)),
        "c": np.array([1, 2, 3], dtype=">u2"),  # foreign byte order
    }
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
    frame = dataio.scan_numpy(str(tmp_path / "*.npy"))
    table = frame.collect()
    assert isinstance(table, pa.Table)
    assert table.schema.field("array").type == tensor_type()
    assert table.column("key").to_pylist() == ["a", "b", "c"]
    for row in table.to_pylist():
        np.testing.assert_array_equal(_array(row["array"]), np.load(row["path"]))
    # relational steps run on the frame; iteration still gives NumPy records
    small = frame.filter(col("key") != "b").select("key")
    assert small.collect().to_pylist() == [{"key": "a"}, {"key": "c"}]
    records = list(frame)
    assert all(isinstance(r["array"], np.ndarray) for r in records)
    np.testing.assert_array_equal(records[1]["array"], arrays["b"])


def test_scan_numpy_reads_a_directory_and_sees_new_files(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones(2))
    (tmp_path / "notes.txt").write_text("not an array")
    frame = dataio.scan_numpy(tmp_path)
    assert frame.collect().column("key").to_pylist() == ["x"]
    np.save(tmp_path / "y.npy", np.zeros(3))
    assert frame.collect().column("key").to_pylist() == ["x", "y"]  # resolved per run


def test_a_damaged_file_fails_a_collect_but_is_one_record_when_iterated(tmp_path: Path) -> None:
    np.save(tmp_path / "good.npy", np.ones(4))
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    frame = dataio.scan_numpy(str(tmp_path / "*.npy"))
    with pytest.raises(FormatError, match=r"bad\.npy"):
        frame.collect()
    bad, good = list(frame)
    np.testing.assert_array_equal(good["array"], np.ones(4))
    with pytest.raises(FormatError, match=r"bad\.npy"):
        bad["array"]


def test_scan_npz_and_scan_hdf5_collect_against_numpy_and_h5py(tmp_path: Path) -> None:
    np.savez(tmp_path / "p.npz", x=np.arange(3), y=np.eye(2, dtype=np.float32))
    rows = dataio.scan_npz(tmp_path / "p.npz").collect().to_pylist()
    with np.load(tmp_path / "p.npz") as oracle:
        assert [m["name"] for m in rows[0]["arrays"]] == list(oracle.files)
        for member in rows[0]["arrays"]:
            np.testing.assert_array_equal(_array(member), oracle[member["name"]])
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("images", data=np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
        f.create_dataset("labels", data=np.array([3, 1], dtype=np.int32))
    frame = dataio.scan_hdf5(tmp_path / "d.h5")
    table = frame.filter(col("key") == "labels").collect()
    with h5py.File(tmp_path / "d.h5", "r") as f:
        (row,) = table.to_pylist()
        np.testing.assert_array_equal(_array(row["array"]), f["labels"][()])
    assert "scan_hdf5(" in frame.explain()
