"""HDF5 (``dataio/formats/hdf5.py``) against h5py's own reads."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from formats._memory import file_offset, mapping_of

from dataio.exceptions import FieldError, FormatError, NotFoundError, PlanError
from dataio.formats.hdf5 import open_hdf5, read_hdf5, scan_hdf5

RNG = np.random.default_rng(9)
IMAGES = RNG.integers(0, 255, (40, 6, 5, 3), dtype=np.uint8)
FEATURES = RNG.standard_normal((50, 8)).astype(">f4")
LABELS = np.arange(100, dtype=np.int64)


@pytest.fixture(scope="module")
def h5_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("h5") / "arrays.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=IMAGES)  # contiguous
        f.create_dataset("chunked", data=IMAGES, chunks=(4, 6, 5, 3), compression="gzip")
        f.create_dataset("features", data=FEATURES)  # contiguous, big-endian
        f.create_dataset("group/labels", data=LABELS)
        f.create_dataset("scalar", data=2.5)
        f.create_dataset("names", data=np.array([b"cat", b"dog"]))
        f.create_dataset("complex", data=(RNG.standard_normal(6) + 1j).astype(np.complex64))
        f.create_dataset("unwritten", shape=(3, 2), dtype=np.float32, fillvalue=7.0)
    return path


SELECTIONS: list[Any] = [
    None,
    (),
    ...,
    3,
    -1,
    slice(5, 17),
    slice(None, None, 3),
    (slice(2, 30, 4), ...),
    (..., 1),
    (0, ..., slice(1, 3)),
    (np.int64(7), slice(1, 5, 2), 2, -2),
    (slice(10, 10),),
    (slice(-5, None), 0),
]


@pytest.mark.parametrize("selection", SELECTIONS, ids=repr)
@pytest.mark.parametrize("key", ["images", "chunked"])
@pytest.mark.parametrize("copy", [True, False])
def test_selections_match_h5py(h5_path: Path, key: str, selection: Any, copy: bool) -> None:
    array = read_hdf5(h5_path, key=key, selection=selection, copy=copy)
    with h5py.File(h5_path) as f:
        expected = f[key][() if selection is None else selection]
    np.testing.assert_array_equal(array, expected)
    assert array.shape == np.shape(expected) and array.dtype == IMAGES.dtype
    assert array.flags.writeable is copy


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (slice(None, None, -1), "needs a positive step"),
        (slice(0, 5, 0), "needs a positive step"),
        ((..., 0, ...), "at most one Ellipsis"),
        ([1, 2], "got [1, 2]"),
        (np.array([1, 2]), "selection items are integers"),
        (True, "got True"),
        ((None, 1), "got None"),
        (40, "index 40 is out of range for axis 0 of size 40"),
        (-41, "index -41 is out of range"),
        ((0, 0, 0, 0, 0), "has 5 indices for 4 axes"),
        (slice(1.5, 3), "must hold integers or None"),
    ],
    ids=repr,
)
def test_unsupported_selections_are_refused(h5_path: Path, selection: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_hdf5(h5_path, key="images", selection=selection)


def test_contiguous_reads_view_the_file_mapping_and_outlive_close(h5_path: Path) -> None:
    with h5py.File(h5_path) as f:
        offset = f["images"].id.get_offset()
    with open_hdf5(h5_path) as source:
        whole = source.read("images", copy=False)
        window = source.read("images", selection=(slice(10, 20), ...), copy=False)
    del source
    gc.collect()
    region = mapping_of(whole.ctypes.data)
    assert region is not None and region.perms.startswith("r--s")
    assert file_offset(whole.ctypes.data, h5_path) == offset
    assert file_offset(window.ctypes.data, h5_path) == offset + 10 * IMAGES[0].nbytes
    np.testing.assert_array_equal(window, IMAGES[10:20])  # valid after close
    with pytest.raises(ValueError, match="read-only"):
        window[0] = 0


def test_copies_are_independent(h5_path: Path) -> None:
    array = read_hdf5(h5_path, key="group/labels")
    array[:] = -1
    region = mapping_of(array.ctypes.data)
    assert region is None or region.path != str(h5_path)
    np.testing.assert_array_equal(read_hdf5(h5_path, key="group/labels"), LABELS)


@pytest.mark.parametrize("copy", [True, False])
def test_foreign_byte_order_becomes_native(h5_path: Path, copy: bool) -> None:
    array = read_hdf5(h5_path, key="features", selection=(slice(0, 10),), copy=copy)
    assert array.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(array, FEATURES[:10])


@pytest.mark.parametrize("key", ["scalar", "names", "complex", "unwritten"])
@pytest.mark.parametrize("copy", [True, False])
def test_other_datasets_read_through_h5py(h5_path: Path, key: str, copy: bool) -> None:
    with h5py.File(h5_path) as f:
        expected = f[key][()]
    array = read_hdf5(h5_path, key=key, copy=copy)
    assert isinstance(array, np.ndarray)
    np.testing.assert_array_equal(array, expected)
    assert array.flags.writeable is copy


def chunk_corrupted_file(tmp_path: Path) -> Path:
    """A gzip-chunked dataset whose last chunk (rows 36..39) holds garbage."""
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=IMAGES, chunks=(4, 6, 5, 3), compression="gzip")
    with h5py.File(path) as f:
        info = f["chunked"].id.get_chunk_info_by_coord((36, 0, 0, 0))
    with open(path, "r+b") as raw:
        raw.seek(info.byte_offset)
        raw.write(b"\xff" * info.size)
    return path


@pytest.mark.parametrize("copy", [True, False])
def test_chunked_reads_touch_only_intersecting_chunks(tmp_path: Path, copy: bool) -> None:
    path = chunk_corrupted_file(tmp_path)
    window = read_hdf5(path, key="chunked", selection=(slice(3, 36), ...), copy=copy)
    np.testing.assert_array_equal(window, IMAGES[3:36])
    with pytest.raises(FormatError, match=r"cannot read .*damaged\.h5:chunked"):
        read_hdf5(path, key="chunked", selection=(slice(30, 40),), copy=copy)


def test_keys_and_lookup_errors(h5_path: Path, tmp_path: Path) -> None:
    with open_hdf5(h5_path) as source:
        assert source.keys() == sorted(
            [
                *("chunked", "complex", "features", "group/labels"),
                *("images", "names", "scalar", "unwritten"),
            ]
        )
        with pytest.raises(FieldError, match="'missing' is not in the file; datasets"):
            source.read("missing")
        with pytest.raises(FieldError, match="'group' is a group"):
            source.read("group")
    with pytest.raises(NotFoundError):
        read_hdf5(tmp_path / "absent.h5", key="x")
    (tmp_path / "fake.h5").write_bytes(b"not hdf5" * 100)
    with pytest.raises(FormatError, match="is not a readable HDF5 file"):
        read_hdf5(tmp_path / "fake.h5", key="x")


def test_scan_hdf5_is_lazy(tmp_path: Path) -> None:
    scan = scan_hdf5(str(tmp_path / "*.h5"), keys=["x"])
    for i in range(2):
        with h5py.File(tmp_path / f"part{i}.h5", "w") as f:
            f.create_dataset("x", data=np.full(3, i))
            f.create_dataset("y", data=np.zeros(1))
    records = list(scan)
    assert [(r["key"], Path(r["path"]).name) for r in records] == [
        ("x", "part0.h5"),
        ("x", "part1.h5"),
    ]
    np.testing.assert_array_equal(records[1]["array"], np.full(3, 1))
    assert [r["key"] for r in scan_hdf5(tmp_path / "part0.h5")] == ["x", "y"]


def test_importing_the_formats_loads_no_heavy_library() -> None:
    code = (
        "import sys, dataio, dataio.formats.hdf5, dataio.formats.safetensors, "
        "dataio.formats.numpy, dataio.udfs.tensor; "
        "heavy = ('h5py', 'torch', 'safetensors', 'ml_dtypes'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
