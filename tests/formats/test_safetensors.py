"""safetensors (``dataio/formats/safetensors.py``) against the ``safetensors`` library.

The library is the oracle both ways: it reads what we write (byte-identical to its own
output) and we read what it writes. Zero-copy is checked against the kernel's own
view of this process (``/proc/self/maps``, ``RssAnon``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import psutil
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch
from formats._memory import anon_rss, file_offset, mapping_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataio.formats._devices as devices
from dataio.exceptions import (
    DataioError,
    DeviceError,
    FieldError,
    FormatError,
    NotFoundError,
    PlanError,
)
from dataio.formats.safetensors import (
    INDEX_NAME,
    gds_available,
    gds_info,
    open_safetensors,
    parse_size,
    read_safetensors,
    write_safetensors,
)
from dataio.udfs.tensor import decode_safetensors

NUMPY_DTYPES = [
    np.bool_,
    np.uint8,
    np.int8,
    np.uint16,
    np.int16,
    np.uint32,
    np.int32,
    np.uint64,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
]
TORCH_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.uint16,
    torch.int16,
    torch.uint32,
    torch.int32,
    torch.uint64,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
    torch.float4_e2m1fn_x2,
]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4)]


def numpy_tensor(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values of ``dtype``: raw random bytes for ints, normals for floats."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype)
    if dtype.kind == "c":
        return np.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), dtype)
    return np.asarray(rng.standard_normal(shape), dtype)


def torch_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random bytes reinterpreted as ``dtype`` (every bit pattern round-trips as bytes)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = np.random.default_rng(seed).integers(0, 256, (*shape, itemsize), dtype=np.uint8)
    if dtype == torch.bool:
        raw &= 1
    return torch.from_numpy(raw.reshape(-1)).view(dtype).reshape(shape)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits (NaN patterns included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a_bytes = a.contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(a_bytes, b.contiguous().reshape(-1).view(torch.uint8)))


def library_numpy(path: Path) -> dict[str, np.ndarray]:
    return safetensors.numpy.load_file(str(path))


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip_with_the_library(tmp_path: Path, dtype: Any) -> None:
    ours = {f"t{i}": numpy_tensor(dtype, shape, seed=i) for i, shape in enumerate(SHAPES)}
    write_safetensors(tmp_path / "ours.safetensors", ours)
    for name, value in library_numpy(tmp_path / "ours.safetensors").items():
        assert value.dtype == ours[name].dtype and np.array_equal(value, ours[name])
    safetensors.numpy.save_file(ours, str(tmp_path / "theirs.safetensors"))
    for name, value in read_safetensors(tmp_path / "theirs.safetensors").items():
        assert value.dtype == ours[name].dtype and value.shape == ours[name].shape
        assert np.array_equal(value, ours[name])


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_round_trip_with_the_library(tmp_path: Path, dtype: torch.dtype) -> None:
    shapes = [(4,), (3, 6), (0, 2)] if dtype == torch.float4_e2m1fn_x2 else SHAPES
    ours = {f"t{i}": torch_tensor(dtype, shape, seed=i) for i, shape in enumerate(shapes)}
    write_safetensors(tmp_path / "ours.safetensors", ours)
    theirs_view = safetensors.torch.load_file(str(tmp_path / "ours.safetensors"))
    assert all(same_bytes(theirs_view[k], v) for k, v in ours.items())
    safetensors.torch.save_file(ours, str(tmp_path / "theirs.safetensors"))
    ours_view = read_safetensors(tmp_path / "theirs.safetensors", framework="torch")
    assert list(ours_view) and all(same_bytes(ours_view[k], v) for k, v in ours.items())


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_files_are_byte_identical_to_the_library(tmp_path: Path, metadata: Any) -> None:
    state = {
        "b": numpy_tensor(np.int8, (5,)),
        "a": numpy_tensor(np.float32, (3, 4)),
        "c": numpy_tensor(np.float64, (3,)),
        "d": numpy_tensor(np.float16, (2, 2)),
    }
    write_safetensors(tmp_path / "ours.safetensors", state, metadata=metadata)
    safetensors.numpy.save_file(state, str(tmp_path / "theirs.safetensors"), metadata=metadata)
    ours = (tmp_path / "ours.safetensors").read_bytes()
    assert ours == (tmp_path / "theirs.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", ours[:8])
    assert (8 + length) % 8 == 0


def test_bfloat16_and_float8_read_as_ml_dtypes_in_numpy(tmp_path: Path) -> None:
    state = {
        "bf": torch.randn(4, 3).bfloat16(),
        "e4": torch.randn(8).to(torch.float8_e4m3fn),
        "e5": torch.randn(8).to(torch.float8_e5m2),
    }
    safetensors.torch.save_file(state, str(tmp_path / "m.safetensors"))
    arrays = read_safetensors(tmp_path / "m.safetensors")
    assert arrays["bf"].dtype == ml_dtypes.bfloat16
    assert arrays["e4"].dtype == ml_dtypes.float8_e4m3fn
    assert arrays["e5"].dtype == ml_dtypes.float8_e5m2
    for name, tensor in state.items():
        np.testing.assert_array_equal(arrays[name].astype(np.float32), tensor.float().numpy())
    # numpy ml_dtypes arrays write back as the same safetensors dtypes
    write_safetensors(tmp_path / "back.safetensors", arrays)
    back = safetensors.torch.load_file(str(tmp_path / "back.safetensors"))
    assert all(same_bytes(back[k], v) for k, v in state.items())


def test_bfloat16_without_ml_dtypes_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    safetensors.torch.save_file({"w": torch.ones(2).bfloat16()}, str(tmp_path / "m.safetensors"))
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(FormatError, match=r"tensor 'w' is BF16.*ml_dtypes.*framework='torch'"):
        read_safetensors(tmp_path / "m.safetensors")
    assert read_safetensors(tmp_path / "m.safetensors", framework="torch")["w"].dtype == (
        torch.bfloat16
    )


def test_sub_byte_dtypes_need_torch(tmp_path: Path) -> None:
    packed = torch.zeros(2, 4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    safetensors.torch.save_file({"f4": packed}, str(tmp_path / "m.safetensors"))
    with pytest.raises(FormatError, match="F4, which has no NumPy dtype"):
        read_safetensors(tmp_path / "m.safetensors")
    tensor = read_safetensors(tmp_path / "m.safetensors", framework="torch")["f4"]
    assert tensor.dtype == torch.float4_e2m1fn_x2 and tuple(tensor.shape) == (2, 4)


def test_writer_accepts_non_contiguous_foreign_order_and_grad_inputs(tmp_path: Path) -> None:
    base = numpy_tensor(np.float32, (4, 6))
    param = torch.nn.Parameter(torch.randn(3, 5))
    state = {
        "transposed": base.T,
        "strided": base[:, ::2],
        "big_endian": base.astype(">f4"),
        "torch_t": torch.from_numpy(base).t(),
        "param": param,
    }
    write_safetensors(tmp_path / "m.safetensors", state)
    back = safetensors.torch.load_file(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(back["transposed"].numpy(), base.T)
    np.testing.assert_array_equal(back["strided"].numpy(), base[:, ::2])
    np.testing.assert_array_equal(back["big_endian"].numpy(), base)
    np.testing.assert_array_equal(back["torch_t"].numpy(), base.T)
    assert torch.equal(back["param"], param.detach())


# -- sharded checkpoints -----------------------------------------------------------------


def layers(n: int, size: int = 1000) -> dict[str, np.ndarray]:
    return {f"model.layers.{i}.weight": numpy_tensor(np.float32, (size,), seed=i) for i in range(n)}


def test_sharded_write_follows_the_hugging_face_layout(tmp_path: Path) -> None:
    state = layers(10)  # 4000 bytes each
    written = write_safetensors(tmp_path, state, max_shard_size=9000, metadata={"format": "np"})
    shards = [f"model-{i:05d}-of-00005.safetensors" for i in range(1, 6)]
    assert [os.path.basename(p) for p in written] == [*shards, INDEX_NAME]
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert index["metadata"] == {"total_size": 40_000}
    assert list(index["weight_map"]) == sorted(state)
    # the library reads each shard; together they are the state dict, as the index says
    loaded: dict[str, np.ndarray] = {}
    for shard in shards:
        with safetensors.safe_open(str(tmp_path / shard), framework="np") as f:
            assert f.metadata() == {"format": "np"}
            assert all(index["weight_map"][k] == shard for k in f.keys())  # noqa: SIM118
        loaded |= library_numpy(tmp_path / shard)
    assert loaded.keys() == state.keys()
    assert all(np.array_equal(loaded[k], v) for k, v in state.items())
    # torch loader through the index, the way transformers loads a sharded checkpoint
    by_torch: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        by_torch |= safetensors.torch.load_file(str(tmp_path / shard))
    assert all(np.array_equal(by_torch[k].numpy(), v) for k, v in state.items())


def test_sharding_isolates_oversized_tensors_like_hugging_face(tmp_path: Path) -> None:
    state = {"a": np.zeros(100, np.float32), "big": np.zeros(5000, np.uint8)}
    state |= {"b": np.zeros(100, np.float32), "c": np.zeros(100, np.float32)}
    write_safetensors(tmp_path, state, max_shard_size="1000B")
    weight_map = json.loads((tmp_path / INDEX_NAME).read_text())["weight_map"]
    files = {name: int(file[6:11]) for name, file in weight_map.items()}
    assert files == {"big": 1, "a": 2, "b": 2, "c": 3}


def test_we_read_sharded_checkpoints_in_full_and_in_part(tmp_path: Path) -> None:
    state = layers(12)
    write_safetensors(tmp_path, state, max_shard_size=10_000)
    everything = read_safetensors(tmp_path)
    assert list(everything) == sorted(state)
    assert all(np.array_equal(everything[k], v) for k, v in state.items())
    keys = ["model.layers.7.weight", "model.layers.0.weight"]
    subset = read_safetensors(tmp_path, keys=keys, framework="torch")
    assert list(subset) == keys
    assert all(np.array_equal(subset[k].numpy(), state[k]) for k in keys)
    with open_safetensors(tmp_path) as st:
        assert len(st) == 12 and "model.layers.3.weight" in st
        assert st.index is not None and st.index["metadata"]["total_size"] == 48_000


def test_a_checkpoint_that_fits_is_one_file_and_rewrites_remove_stale_layouts(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("{}")
    write_safetensors(tmp_path, layers(6), max_shard_size=5000)
    assert len(list(tmp_path.glob("model-*"))) == 6 and (tmp_path / INDEX_NAME).exists()
    assert write_safetensors(tmp_path, layers(3)) == [str(tmp_path / "model.safetensors")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert read_safetensors(tmp_path).keys() == layers(3).keys()
    write_safetensors(tmp_path, layers(4), max_shard_size=8000)
    assert not (tmp_path / "model.safetensors").exists()
    assert sorted(read_safetensors(tmp_path)) == sorted(layers(4))


def test_a_directory_without_index_reads_every_file(tmp_path: Path) -> None:
    safetensors.numpy.save_file({"a": np.ones(3)}, str(tmp_path / "x.safetensors"))
    safetensors.numpy.save_file({"b": np.zeros(2)}, str(tmp_path / "y.safetensors"))
    assert sorted(read_safetensors(tmp_path)) == ["a", "b"]
    safetensors.numpy.save_file({"a": np.ones(1)}, str(tmp_path / "z.safetensors"))
    with pytest.raises(FormatError, match="tensor 'a' is in both"):
        read_safetensors(tmp_path)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (123, 123),
        ("5GB", 5 * 10**9),
        ("5GiB", 5 * 2**30),
        ("500MB", 500 * 10**6),
        ("1.5 gb", 1_500_000_000),
        ("10KiB", 10_240),
        ("77", 77),
    ],
)
def test_parse_size(size: Any, expected: int) -> None:
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", ["5 parsecs", "", "-1GB", 0, -5, 1.5, True, None])
def test_bad_shard_sizes_are_refused(size: Any) -> None:
    with pytest.raises(PlanError, match="max_shard_size"):
        parse_size(size)


# -- zero copy ---------------------------------------------------------------------------


def test_numpy_arrays_are_read_only_views_of_a_shared_file_mapping(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    state = {"a": numpy_tensor(np.float32, (64, 64)), "b": numpy_tensor(np.int16, (100,))}
    write_safetensors(path, state)
    with open_safetensors(path) as st:
        arrays = st.read()
    raw = path.read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    data_start = 8 + struct.unpack("<Q", raw[:8])[0]
    for name, array in arrays.items():
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
        region = mapping_of(array.ctypes.data)
        assert region is not None and region.perms.startswith("r--s")  # shared, read-only
        expected = data_start + header[name]["data_offsets"][0]
        assert file_offset(array.ctypes.data, path) == expected
        np.testing.assert_array_equal(array, state[name])


def test_torch_tensors_are_writable_copy_on_write_views(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": torch.arange(4096, dtype=torch.float32)})
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    tensor = read_safetensors(path, framework="torch")["w"]
    region = mapping_of(tensor.data_ptr())
    assert region is not None and region.perms == "rw-p"  # private: writes never reach the file
    assert file_offset(tensor.data_ptr(), path) == os.path.getsize(path) - 4096 * 4
    tensor.mul_(-1)
    assert float(tensor[5]) == -5.0
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert float(read_safetensors(path, framework="torch")["w"][5]) == 5.0


def test_arrays_outlive_their_file_handle(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    state = {"a": numpy_tensor(np.float64, (300,)), "b": numpy_tensor(np.uint8, (5,))}
    write_safetensors(path, state)
    with open_safetensors(path) as st:
        array = st.read(key="a")
        tensor = st.read(key="b", framework="torch")
    del st
    np.testing.assert_array_equal(array, state["a"])
    np.testing.assert_array_equal(tensor.numpy(), state["b"])
    closed = open_safetensors(path)
    closed.close()
    with pytest.raises(DataioError, match="closed"):
        closed.read(key="a")


@pytest.fixture(scope="module")
def large_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 200 MB: 50 float32 tensors of 4 MB."""
    path = tmp_path_factory.mktemp("large") / "large.safetensors"
    chunk = np.arange(1 << 20, dtype=np.float32)
    write_safetensors(path, {f"layer.{i}": chunk for i in range(50)})
    return path


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_reading_200mb_keeps_memory_flat(large_checkpoint: Path, framework: str) -> None:
    process = psutil.Process()
    rss, anon = process.memory_info().rss, anon_rss()
    tensors = read_safetensors(large_checkpoint, framework=framework)
    assert process.memory_info().rss - rss < 16 << 20  # nothing read yet: pages map lazily
    total = 0
    for value in tensors.values():
        array = value if framework == "numpy" else value.numpy()
        total += int(array.view(np.uint32)[::1024].sum())  # touch every page
    chunk = np.arange(1 << 20, dtype=np.float32).view(np.uint32)
    assert total == 50 * int(chunk[::1024].sum())
    assert anon_rss() - anon < 16 << 20  # every page came from the file, none was copied
    assert os.path.getsize(large_checkpoint) > 200_000_000


# -- the open_safetensors session ------------------------------------------------------


def test_session_keys_metadata_and_reads(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    state = {"layer.weight": np.ones((2, 2), np.float32), "layer.bias": np.zeros(2, np.float32)}
    write_safetensors(path, state, metadata={"format": "pt"})
    with open_safetensors(path) as st:
        assert sorted(st.keys()) == sorted(state) and st.metadata == {"format": "pt"}
        assert list(st) == st.keys() and len(st) == 2 and "layer.bias" in st
        assert st.read(key="layer.weight", framework="torch").shape == (2, 2)
        both = st.read(keys=["layer.bias", "layer.weight"])
        assert list(both) == ["layer.bias", "layer.weight"]
        assert repr(st).endswith("(2 tensors)>")
        with pytest.raises(FieldError, match=r"has no tensor 'nope'; it holds") as caught:
            st.read(key="nope")
        assert isinstance(caught.value, KeyError)
        with pytest.raises(PlanError, match="not both"):
            st.read(key="layer.bias", keys=["layer.bias"])
        with pytest.raises(PlanError, match="use key="):
            st.read(keys="layer.bias")
        with pytest.raises(PlanError, match="framework must be one of"):
            st.read(key="layer.bias", framework="jax")  # type: ignore[arg-type]


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        read_safetensors(tmp_path / "absent.safetensors")
    with pytest.raises(NotFoundError, match=r"no model\.safetensors\.index\.json"):
        read_safetensors(tmp_path)


# -- devices -------------------------------------------------------------------------------


def test_cuda_without_a_gpu_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only host
    write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(3, np.float32)})
    with pytest.raises(DeviceError, match=r"device='cuda:0' needs CUDA.*device=None") as caught:
        read_safetensors(tmp_path / "m.safetensors", framework="torch", device="cuda:0")
    assert isinstance(caught.value, RuntimeError)


def test_devices_are_checked_before_reading(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(3, np.float32)})
    with pytest.raises(PlanError, match="needs framework='torch'"):
        read_safetensors(tmp_path / "m.safetensors", device="cuda:0")
    with pytest.raises(PlanError, match="is not a device name"):
        read_safetensors(tmp_path / "m.safetensors", framework="torch", device="gpu please")
    with pytest.raises(DeviceError, match="'cpu' or 'cuda:N' only"):
        read_safetensors(tmp_path / "m.safetensors", framework="torch", device="meta")
    cpu = read_safetensors(tmp_path / "m.safetensors", framework="torch", device="cpu")
    assert cpu["w"].device.type == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_reads_match_cpu_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "STAGING_BYTES", 4096)  # force several staged chunks
    state = {f"t{i}": torch_tensor(dtype, (33, 65), seed=i) for i, dtype in enumerate(TORCH_DTYPES)}
    state["empty"] = torch.zeros(0, 3)
    write_safetensors(tmp_path / "m.safetensors", state)
    on_gpu = read_safetensors(tmp_path / "m.safetensors", framework="torch", device="cuda:0")
    for name, tensor in state.items():
        assert on_gpu[name].device == torch.device("cuda", 0)
        assert same_bytes(on_gpu[name].cpu(), tensor)


def test_gds_probe_reports_without_raising() -> None:
    info = gds_info()
    assert set(info) == {
        "available", "cufile", "cuda_devices", "why", "kvikio", "route", "route_why"
    }  # fmt: skip
    assert gds_available() is info["available"]
    if not info["available"]:
        assert info["why"]


# -- malicious and broken files ----------------------------------------------------------


def build(header: Any, data: bytes = b"", *, length: int | None = None) -> bytes:
    """A safetensors file from a header (dict, or raw bytes) and a data section."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def t(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


BROKEN: dict[str, tuple[bytes, str]] = {
    "empty file": (b"", "too short"),
    "short length": (b"\x10\x00\x00", "too short"),
    "length past the end": (build({}, length=4096), "runs past the end"),
    "huge header": (build({}, length=1 << 62), "over the 100000000-byte limit"),
    "just over the cap": (build({}, length=100_000_001), "over the 100000000-byte limit"),
    "invalid json": (build(b"{not json}"), "invalid safetensors header"),
    "not an object": (build(b"[1, 2]"), "invalid safetensors header"),
    "invalid utf-8": (build(b'{"\xff": 1}'), "invalid safetensors header"),
    "duplicate tensor": (
        build(
            b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
            b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
            b"\x00",
        ),
        "duplicate key 'a'",
    ),
    "unknown dtype": (
        build({"w": t("F128", [1], 0, 16)}, bytes(16)),
        "tensor 'w' has unknown dtype 'F128'",
    ),
    "missing field": (build({"w": {"dtype": "F32", "shape": [1]}}, bytes(4)), "tensor 'w' needs"),
    "negative dim": (build({"w": t("F32", [-1], 0, 4)}, bytes(4)), "tensor 'w' has shape"),
    "float dim": (build({"w": t("F32", [1.5], 0, 4)}, bytes(4)), "tensor 'w' has shape"),
    "offsets reversed": (build({"w": t("U8", [0], 4, 0)}, bytes(4)), "tensor 'w' has data_offsets"),
    "three offsets": (
        build({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]}}, b"\x00"),
        "tensor 'w' has data_offsets",
    ),
    "byte count mismatch": (
        build({"w": t("F32", [2, 3], 0, 20)}, bytes(20)),
        "tensor 'w' is F32 of shape [2, 3], which needs 24 bytes",
    ),
    "dtype mismatch": (build({"w": t("F64", [3], 0, 12)}, bytes(12)), "needs 24 bytes"),
    "overlap": (
        build({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, bytes(12)),
        "tensor 'b' (bytes 4..12) overlaps tensor 'a'",
    ),
    "gap": (
        build({"a": t("F32", [1], 0, 4), "b": t("F32", [1], 8, 12)}, bytes(12)),
        "data bytes 4..8 belong to no tensor",
    ),
    "out of range": (
        build({"w": t("F32", [4], 0, 16)}, bytes(8)),
        "tensor 'w' ends at data byte 16",
    ),
    "huge offsets": (
        build({"w": t("U8", [2**62], 0, 2**62)}, bytes(8)),
        "tensor 'w' ends at data byte",
    ),
    "trailing bytes": (build({"w": t("U8", [2], 0, 2)}, bytes(6)), "tensors cover 2 data bytes"),
    "bad metadata": (
        build({"__metadata__": {"step": 3}}),
        "__metadata__ must map names to strings",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_files_are_refused_clearly(tmp_path: Path, case: str) -> None:
    data, message = BROKEN[case]
    path = tmp_path / "broken.safetensors"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=re.escape(message)) as caught:
        read_safetensors(path)
    assert str(path) in str(caught.value) and isinstance(caught.value, ValueError)
    with pytest.raises(FormatError, match=re.escape(message)):  # the same checks in memory
        decode_safetensors(data, "w")
    if case not in ("duplicate tensor", "float dim", "bad metadata"):
        # the reference implementation refuses it too
        with pytest.raises(Exception):  # noqa: B017 - the library raises several types
            safetensors.numpy.load(data)


def test_misaligned_tensors_still_read_correctly(tmp_path: Path) -> None:
    values = np.arange(3, dtype=np.float32)
    header = {"pad": t("U8", [1], 0, 1), "w": t("F32", [3], 1, 13)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "m.safetensors").write_bytes(build(text, b"\x07" + values.tobytes()))
    np.testing.assert_array_equal(read_safetensors(tmp_path / "m.safetensors")["w"], values)
    tensor = read_safetensors(tmp_path / "m.safetensors", framework="torch")["w"]
    np.testing.assert_array_equal(tensor.numpy(), values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255))))
def test_damaged_files_never_crash(cut: int, flips: list[tuple[int, int]]) -> None:
    valid = bytearray(safetensors.numpy.save({"a": np.ones((3, 4), np.float32), "b": np.arange(7)}))
    for position, value in flips:
        if position < len(valid):
            valid[position] = value
    damaged = bytes(valid[: len(valid) - cut % len(valid)])
    try:
        result = decode_safetensors(damaged, "a")
    except (FormatError, FieldError):
        return
    assert result.nbytes <= len(damaged)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"w": np.ones(2, np.complex128)}, "complex128 included"),
        ({"w": np.array([object()])}, "safetensors cannot store"),
        ({"w": [1.0, 2.0]}, r"state_dict\['w'\] is list"),
        ({"__metadata__": np.ones(1)}, "other than '__metadata__'"),
        ({3: np.ones(1)}, "non-empty strings"),
        ({"w": torch.ones(2).to_sparse()}, "to_dense"),
    ],
)
def test_unwritable_state_dicts_are_refused(tmp_path: Path, state: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        write_safetensors(tmp_path / "m.safetensors", state)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_metadata_must_be_strings(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="metadata must map strings to strings"):
        write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(1)}, metadata={"step": 1})  # type: ignore[dict-item]


def test_index_problems_are_reported(tmp_path: Path) -> None:
    write_safetensors(tmp_path, layers(4), max_shard_size=5000)
    index_path = tmp_path / INDEX_NAME
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.layers.0.weight"] = "model-00002-of-00004.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(FormatError, match="the index is stale"):
        read_safetensors(tmp_path)
    index["weight_map"]["model.layers.0.weight"] = "../outside.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(FormatError, match="plain file names"):
        read_safetensors(tmp_path)
    index_path.write_text("{")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_safetensors(tmp_path)
    index_path.write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(NotFoundError, match=r"gone\.safetensors"):
        read_safetensors(tmp_path)
