"""Tensor kernels (``dataio/udfs/tensor.py``), their op factories and pipelines using them.

Oracles: ``np.load`` for NPY bytes, the ``safetensors`` library for safetensors bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

import dataio
from dataio import decoders
from dataio.exceptions import FieldError, FormatError, PlanError
from dataio.udfs.tensor import decode_npy, decode_safetensors


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


# -- kernels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        np.arange(5).astype(">i8"),
        (np.arange(4) + 1j).astype(">c8"),
        np.array(True),
        np.zeros((0, 2)),
    ],
    ids=["f32", "fortran", "big-endian", "complex64-be", "scalar", "empty"],
)
def test_decode_npy_matches_np_load(array: np.ndarray) -> None:
    data = npy(array)
    decoded = decode_npy(data)
    expected = np.load(io.BytesIO(data))
    np.testing.assert_array_equal(decoded, expected)
    assert decoded.shape == expected.shape and decoded.dtype.isnative
    assert decoded.dtype == expected.dtype.newbyteorder("=")
    assert not decoded.flags.writeable


def test_decode_npy_views_the_bytes_it_was_given() -> None:
    data = npy(np.arange(100, dtype=np.int32))
    decoded = decode_npy(data)
    start = np.frombuffer(data, np.uint8).ctypes.data
    assert start < decoded.ctypes.data < start + len(data)


def test_decode_npy_refuses_objects_and_truncation() -> None:
    with pytest.raises(FormatError, match="never unpickles"):
        decode_npy(npy(np.zeros(2, np.int64)).replace(b"'<i8'", b"'|O' "))
    with pytest.raises(FormatError, match="NPY bytes is truncated"):
        decode_npy(npy(np.arange(10))[:-1])


def test_decode_safetensors_matches_the_library() -> None:
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float64)}
    data = safetensors.numpy.save(state)
    for name, expected in safetensors.numpy.load(data).items():
        decoded = decode_safetensors(data, name)
        np.testing.assert_array_equal(decoded, expected)
        assert decoded.dtype == expected.dtype and not decoded.flags.writeable


def test_decode_safetensors_key_choice() -> None:
    single = safetensors.numpy.save({"only": np.arange(3)})
    np.testing.assert_array_equal(decode_safetensors(single), np.arange(3))
    double = safetensors.numpy.save({"a": np.ones(1), "b": np.ones(1)})
    with pytest.raises(FieldError, match=r"holds 2 tensors .*pass key= to choose one"):
        decode_safetensors(double)
    with pytest.raises(FieldError, match="has no tensor 'c'; it holds 'a', 'b'"):
        decode_safetensors(double, "c")


# -- op factories and slot methods -------------------------------------------------------


def test_numpy_op() -> None:
    op = decoders.numpy()
    assert (op.name, op.kind, op.params, op.random) == ("decode_numpy", "decode", (), False)
    assert repr(dataio.slot("x").decode_numpy()) == "slot('x').decode_numpy()"
    assert dataio.slot("x").decode_numpy().ops == (op,)


@pytest.mark.parametrize("key", [None, "layer.weight"])
def test_safetensors_op(key: str | None) -> None:
    op = decoders.safetensors(key=key)
    assert (op.name, op.kind, op.params) == ("decode_safetensors", "decode", (("key", key),))
    assert op.describe() == {"op": "decode_safetensors", "key": key}
    assert dataio.slot("w").decode_safetensors(key=key).ops == (op,)


@pytest.mark.parametrize("key", ["", 3, b"w"])
def test_safetensors_op_refuses_bad_keys(key: Any) -> None:
    with pytest.raises(PlanError, match="key must be a non-empty string or None"):
        decoders.safetensors(key=key)


def test_tensor_chains_take_no_image_ops() -> None:
    with pytest.raises(PlanError, match="resize_short needs decode_image"):
        dataio.slot("x").decode_numpy().resize_short(8)


# -- pipelines ----------------------------------------------------------------------------


@pytest.fixture
def npy_records(tmp_path: Path) -> list[dict[str, Any]]:
    """Eight records: even ones hold NPY bytes, odd ones a path to an .npy file."""
    rng = np.random.default_rng(1)
    records: list[dict[str, Any]] = []
    for i in range(8):
        array = rng.standard_normal((3, 4)).astype(np.float32)
        if i % 2:
            path = tmp_path / f"{i}.npy"
            np.save(path, array)
            records.append({"x": str(path), "key": f"r{i}"})
        else:
            records.append({"x": npy(array), "key": f"r{i}"})
    return records


def expected_arrays(records: list[dict[str, Any]]) -> np.ndarray:
    loaded = []
    for record in records:
        value = record["x"]
        loaded.append(np.load(value if isinstance(value, str) else io.BytesIO(value)))
    return np.stack(loaded)


def test_decode_numpy_pipeline_stacks_like_np_load(npy_records: list[dict[str, Any]]) -> None:
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(3))
    with pipe.bind(npy_records).run("numpy", concurrency=4) as loader:
        batches = list(loader)
    assert [len(b) for b in batches] == [3, 3, 2]
    stacked = np.concatenate([b["x"] for b in batches])
    np.testing.assert_array_equal(stacked, expected_arrays(npy_records))
    assert stacked.dtype == np.float32
    assert [k for b in batches for k in b.row_keys] == [r["key"] for r in npy_records]


def test_decode_numpy_to_torch(npy_records: list[dict[str, Any]]) -> None:
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(8))
    with pipe.bind(npy_records).run("torch") as loader:
        (batch,) = list(loader)
    np.testing.assert_array_equal(batch["x"].numpy(), expected_arrays(npy_records))


def test_broken_rows_are_dropped_with_their_error(npy_records: list[dict[str, Any]]) -> None:
    records = [*npy_records[:2], {"x": b"\x93NUMPY garbage", "key": "bad"}, *npy_records[2:4]]
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(5))
    with pipe.bind(records).run(on_failure="skip") as loader:
        (batch,) = list(loader)
    assert len(batch) == 4 and batch.row_keys == ["r0", "r1", "r2", "r3"]
    (error,) = batch.errors
    assert isinstance(error, FormatError) and error.key == "bad" and error.slot == "x"
    np.testing.assert_array_equal(batch["x"], expected_arrays(npy_records[:4]))


def test_decode_safetensors_pipeline(tmp_path: Path) -> None:
    records = []
    for i in range(4):
        state = {"emb": np.full((2, 2), i, np.float32), "bias": np.full(2, -i, np.float32)}
        data = safetensors.numpy.save(state)
        if i == 3:
            (tmp_path / "3.safetensors").write_bytes(data)
            records.append({"t": str(tmp_path / "3.safetensors")})
        else:
            records.append({"t": data})
    pipe = dataio.pipeline(
        dataio.slot("emb", field="t").decode_safetensors(key="emb"),
        dataio.slot("bias", field="t").decode_safetensors(key="bias"),
        dataio.batch(4),
    )
    with pipe.bind(records).run() as loader:
        (batch,) = list(loader)
    np.testing.assert_array_equal(batch["emb"], np.stack([np.full((2, 2), i) for i in range(4)]))
    np.testing.assert_array_equal(batch["bias"], np.stack([np.full(2, -i) for i in range(4)]))
