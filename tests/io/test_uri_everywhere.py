"""Every path-taking API takes a URI (issue #16, item 1).

Each test runs one family of APIs against a local path, a ``file://`` URI, S3 (moto),
GCS (the emulator), Azure (Azurite) and HTTP (the range server), and compares what it
reads with an independent oracle reading the same bytes: the safetensors library,
NumPy, h5py, pyarrow, Pillow, crc32c. APIs that list (globs, directories) meet HTTP
on the WebDAV server: obstore lists ``http://`` through PROPFIND, which the range
server does not speak. Objects are written with the raw verbs, never by the code
under test (except in the ``write_safetensors`` test, which reads back with the verbs).
"""

from __future__ import annotations

import csv
import io
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c as crc_oracle
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import safetensors.numpy
from PIL import Image

import dataio
from dataio.exceptions import NotFoundError
from dataio.io import verbs

BACKENDS = ("local", "file-uri", "s3", "gs", "az", "http")
REMOTE = ("s3", "gs", "az", "http")


def _root(request: pytest.FixtureRequest, tmp_path: Path, *, listing: bool = False) -> str:
    kind = request.param
    if kind == "local":
        return str(tmp_path / "data")
    if kind == "file-uri":
        return (tmp_path / "data").as_uri()
    if kind == "http" and listing:
        return str(request.getfixturevalue("webdav"))
    return str(request.getfixturevalue(kind))


@pytest.fixture(params=BACKENDS)
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A base URI (or path) on each backend, unique to the test."""
    return _root(request, tmp_path)


@pytest.fixture(params=BACKENDS)
def listable(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """As ``root``, with HTTP on the WebDAV server (the APIs under test list)."""
    return _root(request, tmp_path, listing=True)


@pytest.fixture(params=REMOTE)
def remote(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


def put(root: str, name: str, data: bytes) -> str:
    """Store ``data`` under ``root`` with the raw verb; its URI."""
    uri = f"{root}/{name}"
    dataio.write(uri, data)
    return uri


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the ranged reads made through the verbs from now on (``read`` and
    ``RangedFile`` download ranges through ``verbs._download``)."""
    sizes: list[int] = []
    real = verbs._download

    def counting(loc: Any, uri: Any, **kwargs: Any) -> Any:
        data = real(loc, uri, **kwargs)
        if kwargs.get("size") is not None or kwargs.get("offset"):
            sizes.append(len(data))
        return data

    monkeypatch.setattr(verbs, "_download", counting)
    return sizes


# -- safetensors --------------------------------------------------------------------------


def _state_dict() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "embed.weight": rng.standard_normal((64, 32)).astype(np.float32),
        "layer.bias": np.arange(17, dtype=np.int64),
        "layer.scale": rng.standard_normal(9).astype(np.float16),
        "empty": np.zeros((0, 4), np.float32),
    }


def _same(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        value = np.asarray(got[name])
        assert value.dtype == array.dtype and value.shape == array.shape, name
        np.testing.assert_array_equal(value, array)


def test_safetensors_read_and_open(root: str) -> None:
    sd = _state_dict()
    uri = put(root, "model.safetensors", safetensors.numpy.save(sd, metadata={"by": "test"}))
    oracle = safetensors.numpy.load(dataio.read(uri))
    _same(dataio.read_safetensors(uri), {k: oracle[k] for k in sd})
    subset = ["layer.scale", "embed.weight"]
    _same(dataio.read_safetensors(uri, keys=subset), {k: oracle[k] for k in subset})
    with dataio.open_safetensors(uri) as st:
        assert sorted(st.keys()) == sorted(sd) and st.metadata == {"by": "test"}
        bias = st.read("layer.bias", copy=True)
        assert bias.flags.writeable
        np.testing.assert_array_equal(bias, oracle["layer.bias"])
        torch_bias = st.read("layer.bias", framework="torch")
        np.testing.assert_array_equal(torch_bias.numpy(), oracle["layer.bias"])


def test_write_safetensors_sharded_reads_back(root: str) -> None:
    sd = _state_dict() | {"large": np.ones(5 << 20, np.float32)}  # 20 MiB: a multipart upload
    written = dataio.write_safetensors(f"{root}/ckpt", sd, max_shard_size=2048)
    assert written[-1].endswith("model.safetensors.index.json") and len(written) > 2
    union: dict[str, np.ndarray] = {}
    for uri in written[:-1]:  # every shard, read back by the safetensors library
        union.update(safetensors.numpy.load(dataio.read(uri)))
    _same({k: union[k] for k in sd}, sd)
    index = json.loads(dataio.read(written[-1]))
    assert set(index["weight_map"]) == set(sd)
    _same(dataio.read_safetensors(f"{root}/ckpt", keys=list(sd)), sd)
    # a smaller rewrite leaves no stale shard or index behind
    assert dataio.write_safetensors(f"{root}/ckpt/", sd) == [f"{root}/ckpt/model.safetensors"]
    assert not any(dataio.exists(uri) for uri in written)
    _same(safetensors.numpy.load(dataio.read(f"{root}/ckpt/model.safetensors")), sd)


def test_remote_safetensors_fetches_the_header_and_the_tensor(
    remote: str, fetched: list[int]
) -> None:
    big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB, the tensor asked for
    sd = {f"other.{i}": np.full(1 << 18, i, np.float32) for i in range(8)} | {"big": big}
    uri = put(remote, "model.safetensors", safetensors.numpy.save(sd))
    fetched.clear()
    got = dataio.read_safetensors(uri, keys=["big"])
    np.testing.assert_array_equal(got["big"], big)
    # the 8-byte length and header in one read-ahead block, then the tensor exactly
    assert sum(fetched) <= 1.1 * big.nbytes, fetched
    assert big.nbytes in fetched


# -- NumPy ---------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_numpy_files(root: str) -> None:
    rng = np.random.default_rng(3)
    big = rng.standard_normal((300, 400)).astype(">f8")  # foreign byte order, ~1 MB
    small = np.arange(6, dtype=np.int16).reshape(2, 3)
    for name, array in (("big.npy", big), ("small.npy", small)):
        uri = put(root, name, _npy(array))
        oracle = np.load(io.BytesIO(dataio.read(uri)))
        mapped, owned = dataio.read_numpy(uri), dataio.read_numpy(uri, mmap=False)
        np.testing.assert_array_equal(mapped, oracle)
        np.testing.assert_array_equal(owned, oracle)
        assert owned.flags.writeable and mapped.dtype.isnative
    out = io.BytesIO()
    np.savez_compressed(out, x=big, y=small)
    uri = put(root, "arrays.npz", out.getvalue())
    with np.load(io.BytesIO(dataio.read(uri))) as oracle:
        np.testing.assert_array_equal(dataio.read_npz(uri)["x"], oracle["x"])
        only = dataio.read_npz(uri, keys=["y"], mmap=False)
        assert list(only) == ["y"] and only["y"].flags.writeable
        np.testing.assert_array_equal(only["y"], oracle["y"])
    out = io.BytesIO()
    np.savez(out, x=big, y=small)  # stored members: each one range
    uri = put(root, "stored.npz", out.getvalue())
    with np.load(io.BytesIO(dataio.read(uri))) as oracle:
        both = dataio.read_npz(uri, keys=["y", "x"])
        assert list(both) == ["y", "x"]
        np.testing.assert_array_equal(both["x"], oracle["x"])
        np.testing.assert_array_equal(both["y"], oracle["y"])


def test_remote_npz_subset_fetches_the_directory_and_the_member(
    remote: str, fetched: list[int]
) -> None:
    arrays = {f"a{i}": np.full(1 << 18, i, np.float32) for i in range(8)}  # 1 MiB each
    out = io.BytesIO()
    np.savez(out, **arrays)
    uri = put(remote, "arrays.npz", out.getvalue())
    fetched.clear()
    got = dataio.read_npz(uri, keys=["a5"])
    np.testing.assert_array_equal(got["a5"], arrays["a5"])
    assert sum(fetched) <= 1.1 * arrays["a5"].nbytes, fetched


def test_tensor_scans(listable: str) -> None:
    arrays = {f"part/{i}": np.full((i + 1, 2), i, np.float32) for i in range(3)}
    for key, array in arrays.items():
        put(listable, f"{key}.npy", _npy(array))
        out = io.BytesIO()
        np.savez(out, a=array, b=array * 2)
        put(listable, f"{key}.npz", out.getvalue())
    by_glob = list(dataio.scan_numpy(f"{listable}/part/*.npy"))
    by_prefix = dataio.scan_numpy(f"{listable}/part").collect()
    assert [r["key"] for r in by_glob] == ["0", "1", "2"] and by_prefix.num_rows == 3
    for record in by_glob:
        np.testing.assert_array_equal(record["array"], arrays[f"part/{record['key']}"])
    for record in dataio.scan_npz(f"{listable}/part/"):
        array = arrays[f"part/{record['key']}"]
        np.testing.assert_array_equal(record["arrays"]["b"], array * 2)


# -- HDF5 ----------------------------------------------------------------------------------


def _hdf5() -> bytes:
    out = io.BytesIO()
    data = np.arange(40_000, dtype=np.float32).reshape(200, 200)
    with h5py.File(out, "w") as f:
        f["plain"] = data
        f.create_dataset("group/chunked", data=data * 2, chunks=(20, 200), compression="gzip")
        f.create_dataset("names", data=["cat", "doge"], dtype=h5py.string_dtype())
    return out.getvalue()


def test_hdf5(listable: str) -> None:
    uri = put(listable, "arrays.h5", _hdf5())
    with h5py.File(io.BytesIO(dataio.read(uri)), "r") as oracle:
        window = dataio.read_hdf5(uri, key="group/chunked", selection=(slice(30, 50), 3))
        np.testing.assert_array_equal(window, oracle["group/chunked"][30:50, 3])
        plain = dataio.read_hdf5(uri, key="plain", copy=False)
        np.testing.assert_array_equal(plain, oracle["plain"][()])
        assert list(dataio.read_hdf5(uri, key="names")) == list(oracle["names"][()])
        with dataio.open_hdf5(uri) as f:
            assert f.keys() == ["group/chunked", "names", "plain"]
        records = list(dataio.scan_hdf5(f"{listable}/*.h5", keys=["plain"]))
        assert [r["key"] for r in records] == ["plain"]
        np.testing.assert_array_equal(records[0]["array"], oracle["plain"][()])


# -- Arrow, manifests, images, TFRecord, files ------------------------------------------------


def test_feather(listable: str) -> None:
    table = pa.table({"key": [f"k{i}" for i in range(50)], "value": list(range(50))})
    sink = pa.BufferOutputStream()
    feather.write_feather(table, sink)
    uri = put(listable, "table.arrow", sink.getvalue().to_pybytes())
    oracle = feather.read_table(pa.BufferReader(dataio.read(uri)))
    assert dataio.read_feather(uri).equals(oracle)
    assert (
        dataio.read_feather(uri, columns=["value"]).column("value").equals(oracle.column("value"))
    )
    got = dataio.scan_feather(f"{listable}/*.arrow").filter(dataio.col("value") >= 45).collect()
    assert sorted(got.column("value").to_pylist()) == [45, 46, 47, 48, 49]
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=10)
    uri = put(listable, "parts/table.parquet", sink.getvalue().to_pybytes())
    oracle = pq.read_table(pa.BufferReader(dataio.read(uri)))
    assert dataio.read_parquet(uri).equals(oracle)
    got = dataio.scan_parquet(f"{listable}/parts/").filter(dataio.col("value") < 3).collect()
    assert got.sort_by("value").equals(oracle.slice(0, 3))


def test_text_scans(listable: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson

    rows = [{"key": f"k{i}", "value": i} for i in range(20)]
    text = "key,value\n" + "".join(f"{r['key']},{r['value']}\n" for r in rows)
    csv_uri = put(listable, "t/rows.csv", text.encode())
    json_uri = put(listable, "t/rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    csv_oracle = pacsv.read_csv(pa.BufferReader(dataio.read(csv_uri)))
    json_oracle = pajson.read_json(pa.BufferReader(dataio.read(json_uri)))
    for got, oracle in (
        (dataio.scan_csv(csv_uri).collect(), csv_oracle),
        (dataio.scan_json(f"{listable}/t/*.jsonl").collect(), json_oracle),
    ):
        assert got.sort_by("value").to_pylist() == oracle.to_pylist()


def test_manifests(root: str) -> None:
    rows = [{"key": "a", "label": "1"}, {"key": "b", "label": "2"}]
    jsonl = put(root, "m.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    text = io.StringIO()
    writer = csv.DictWriter(text, ["key", "label"])
    writer.writeheader()
    writer.writerows(rows)
    csv_uri = put(root, "m.csv", text.getvalue().encode())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    parquet = put(root, "m.parquet", sink.getvalue().to_pybytes())
    assert dataio.manifest(jsonl).rows() == [json.loads(x) for x in dataio.read(jsonl).splitlines()]
    assert dataio.manifest(csv_uri).rows() == list(
        csv.DictReader(io.StringIO(dataio.read(csv_uri).decode()))
    )
    oracle = pq.read_table(pa.BufferReader(dataio.read(parquet))).to_pylist()
    assert dataio.manifest(parquet).rows() == oracle == rows


def test_read_image(root: str) -> None:
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (23, 31, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    uri = put(root, "cat.png", out.getvalue())
    oracle = np.asarray(Image.open(io.BytesIO(dataio.read(uri))).convert("L"))
    np.testing.assert_array_equal(dataio.read_image(uri), pixels)
    np.testing.assert_array_equal(dataio.read_image(uri, mode="gray")[..., 0], oracle)


def _tfrecord(records: list[bytes]) -> bytes:
    def masked(data: bytes) -> bytes:
        crc = crc_oracle.crc32c(data)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    out = b""
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + masked(length) + record + masked(record)
    return out


def test_iter_tfrecord(root: str) -> None:
    records = [b"first", b"", b"x" * 1000]
    uri = put(root, "train.tfrecord", _tfrecord(records))
    assert list(dataio.iter_tfrecord(uri, raw=True)) == records


def test_files(listable: str) -> None:
    names = ["cat/001.jpg", "cat/002.jpg", "dog/deep/003.jpg", "dog/notes.txt", "top.jpg"]
    for name in names:
        put(listable, f"img/{name}", name.encode())
    rows = dataio.files(f"{listable}/img/**/*.jpg").rows()
    assert [r["key"] for r in rows] == ["cat/001", "cat/002", "dog/deep/003", "top"]
    assert [dataio.read(r["path"]).decode() for r in rows] == [n for n in names if ".jpg" in n]
    one = dataio.files(f"{listable}/img/cat/00?.jpg").rows()
    assert [r["key"] for r in one] == ["001", "002"]


# -- hostile remote files: refused from their first bytes -------------------------------------


def _hostile_npy() -> bytes:
    """A valid NPY header declaring an object (pickled) array, then 8 MiB of data."""
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1048576,), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(8 << 20)


def _hostile_safetensors() -> bytes:
    """A header declaring a tensor past the end of the file, then 8 MiB of filler."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 30], "data_offsets": [0, 1 << 32]}})
    text = header.encode() + b" " * (-len(header) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(8 << 20)


@pytest.mark.parametrize(
    ("name", "make", "load", "why"),
    [
        ("pickled.npy", _hostile_npy, dataio.read_numpy, "Python objects"),
        ("overflow.safetensors", _hostile_safetensors, dataio.read_safetensors, "w"),
    ],
)
def test_hostile_remote_file_is_refused_from_its_header(
    remote: str,
    fetched: list[int],
    name: str,
    make: Callable[[], bytes],
    load: Callable[[str], Any],
    why: str,
) -> None:
    uri = put(remote, name, make())
    fetched.clear()
    with pytest.raises(dataio.FormatError, match=why) as info:
        load(uri)
    assert uri in str(info.value)
    assert sum(fetched) <= 64 << 10  # the header block only, not the 8 MiB behind it


# -- hf:// (read-only: objects are put on the hub server) ---------------------------------------


def test_hub_files(hub: Any, fetched: list[int]) -> None:
    big = np.arange(1 << 16, dtype=np.float32)
    sd = {"big": big, "small": np.arange(10, dtype=np.int32), "pad": np.zeros(1 << 16, np.float32)}
    repo = hub.repo("models", "org/model")
    repo.put("model.safetensors", safetensors.numpy.save(sd))
    repo.put("arrays/x.npy", _npy(big.reshape(256, 256)))
    repo.put("arrays.h5", _hdf5())
    repo.put("train.jsonl", b'{"key": "a"}\n{"key": "b"}\n')
    dataio.configure_endpoint("hf", hub.url)
    fetched.clear()
    _same(dataio.read_safetensors("hf://org/model/model.safetensors", keys=["big"]), {"big": big})
    assert sum(fetched) <= 1.1 * big.nbytes + (64 << 10)
    np.testing.assert_array_equal(dataio.read_numpy("hf://org/model/arrays/x.npy").ravel(), big)
    with h5py.File(io.BytesIO(_hdf5()), "r") as oracle:
        window = dataio.read_hdf5("hf://org/model/arrays.h5", key="plain", selection=(5,))
        np.testing.assert_array_equal(window, oracle["plain"][5])
    assert dataio.manifest("hf://org/model/train.jsonl").rows() == [{"key": "a"}, {"key": "b"}]
    rows = dataio.files("hf://org/model/arrays/*.npy").rows()
    assert rows == [{"key": "x", "path": "hf://org/model/arrays/x.npy"}]
    with pytest.raises(NotFoundError, match="modle"):
        dataio.read_safetensors("hf://org/model/modle.safetensors")


# -- a misspelt key ---------------------------------------------------------------------------


MISSING: dict[str, Callable[[str], Any]] = {
    "read_safetensors": dataio.read_safetensors,
    "open_safetensors": dataio.open_safetensors,
    "read_numpy": dataio.read_numpy,
    "read_npz": dataio.read_npz,
    "read_hdf5": lambda uri: dataio.read_hdf5(uri, key="x"),
    "open_hdf5": dataio.open_hdf5,
    "read_feather": dataio.read_feather,
    "scan_numpy": lambda uri: dataio.scan_numpy(uri).collect(),
    "scan_npz": lambda uri: dataio.scan_npz(uri).collect(),
    "scan_hdf5": lambda uri: dataio.scan_hdf5(uri).collect(),
    "read_parquet": dataio.read_parquet,
    "scan_csv": lambda uri: dataio.scan_csv(uri).collect(),
    "manifest": lambda uri: dataio.manifest(uri, format="jsonl").rows(),
    "read_image": dataio.read_image,
    "iter_tfrecord": lambda uri: list(dataio.iter_tfrecord(uri)),
    "files": lambda uri: dataio.files(uri).rows(),
}
SUFFIX = {
    "read_npz": ".npz",
    "scan_npz": ".npz",
    "read_hdf5": ".h5",
    "open_hdf5": ".h5",
    "scan_hdf5": ".h5",
    "read_feather": ".arrow",
    "read_parquet": ".parquet",
    "scan_csv": ".csv",
}


@pytest.mark.parametrize("api", sorted(MISSING))
def test_misspelt_remote_key_is_not_found_naming_it(remote: str, api: str) -> None:
    put(remote, "present.bin", b"here")
    suffix = SUFFIX.get(api, ".npy" if "numpy" in api else ".safetensors")
    uri = f"{remote}/presnet{suffix}"
    with pytest.raises(NotFoundError, match="presnet"):
        MISSING[api](uri)


def test_server_failing_under_h5py_is_a_transport_error(http_server: Any, http: str) -> None:
    out = io.BytesIO()
    noise = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
    with h5py.File(out, "w") as f:
        f.create_dataset("noise", data=noise, chunks=(1 << 16,), compression="gzip")
    uri = put(http, "noise.h5", out.getvalue())
    with dataio.open_hdf5(uri) as f:
        http_server.fail_next = 100  # every retry of every range answers 503
        with pytest.raises(dataio.TransportError, match=r"noise\.h5") as info:
            f.read("noise")
        assert not isinstance(info.value, dataio.FormatError)  # not mistaken for damage
