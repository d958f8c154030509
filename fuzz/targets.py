"""One entry function per fuzz target: raw bytes in, the public calls a user would make.

Each function takes ``(data, workdir)``, writes the bytes to a file in ``workdir`` where
the API wants a path, and calls every entry point of its format in turn. A
:class:`dataio.DataioError` from one entry point does not stop the next; the first is
raised at the end (the harness counts it as ``dataio_error``). Anything else escapes at
once, with the entry point named through :func:`harness.set_stage`.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

from harness import set_stage


class _Calls:
    """Run entry points one after the other, keeping the first DataioError for the end."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.stage = ""

    def __call__(self, stage: str, fn: Callable[[], Any]) -> None:
        from dataio.exceptions import DataioError

        set_stage(stage)
        try:
            fn()
        except DataioError as exc:
            if self.error is None:
                self.error, self.stage = exc, stage

    def finish(self) -> None:
        set_stage(self.stage)
        if self.error is not None:
            raise self.error


def _write(workdir: str, name: str, data: bytes) -> str:
    path = os.path.join(workdir, name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _run_pipeline(records: list[dict[str, Any]], *slots: Any) -> None:
    import dataio

    pipe = dataio.pipeline(*slots, dataio.batch(1))
    with pipe.bind(records).run(concurrency=1) as loader:
        for _ in loader:
            pass


def _drain(iterable: Any) -> None:
    for item in iterable:
        _touch(item)


def _touch(value: Any) -> None:
    """Read every array a result holds, so lazily mapped data is really read."""
    import numpy as np

    if isinstance(value, dict):
        for item in value.values():
            _touch(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _touch(item)
    elif isinstance(value, np.ndarray) and value.dtype.kind not in "OV" and value.size:
        value.reshape(-1)[[0, -1]].tolist()


def _no_outside_bytes(value: Any) -> None:
    """Fail (as a bug) when a result holds the start of ``/etc/passwd``: the input made
    dataio read a file outside itself (HDF5 external storage, links)."""
    import numpy as np

    _touch(value)
    if isinstance(value, dict):
        for item in value.values():
            _no_outside_bytes(item)
    elif isinstance(value, np.ndarray) and value.dtype.kind not in "OV" and value.size:
        try:
            with open("/etc/passwd", "rb") as handle:
                marker = handle.read(16)
        except OSError:
            return
        if len(marker) == 16 and marker in value.tobytes():
            raise AssertionError(
                "the result holds bytes of /etc/passwd: the input made dataio read a file "
                "outside itself (HDF5 external storage?)"
            )


# -- images ---------------------------------------------------------------------------------


def image(data: bytes, workdir: str) -> None:
    """decode_image, the chain (resize_short + center_crop, region crops), read_image."""
    import dataio
    from dataio.udfs.image import decode_image, image_size

    calls = _Calls()
    path = _write(workdir, "input.img", data)
    calls("image_size", lambda: image_size(data))
    calls("decode_image rgb", lambda: decode_image(data, "rgb"))
    calls("decode_image gray", lambda: decode_image(data, "gray"))
    record = [{"image": data}]
    calls(
        "pipeline resize_short+center_crop",
        lambda: _run_pipeline(
            record, dataio.slot("image").decode_image().resize_short(32).center_crop(h=24, w=24)
        ),
    )
    calls(
        "pipeline center_crop (region)",
        lambda: _run_pipeline(record, dataio.slot("image").decode_image().center_crop(h=8, w=8)),
    )
    calls(
        "pipeline random_resized_crop (region)",
        lambda: _run_pipeline(
            record,
            dataio.slot("image")
            .decode_image()
            .random_resized_crop(h=16, w=16, scale=(0.08, 1.0), ratio=(0.75, 4 / 3)),
        ),
    )
    calls("read_image", lambda: dataio.read_image(path))
    calls("read format=image", lambda: dataio.read(path, format="image"))
    calls.finish()


# -- audio ----------------------------------------------------------------------------------


def audio(data: bytes, workdir: str) -> None:
    """decode_audio as is, resampled (linear and sinc, mono), and in a pipeline."""
    import dataio
    from dataio.udfs.audio import decode_audio

    calls = _Calls()
    calls("decode_audio", lambda: decode_audio(data))
    calls("decode_audio 16k mono", lambda: decode_audio(data, sample_rate=16000, mono=True))
    calls(
        "decode_audio 22050 sinc",
        lambda: decode_audio(data, sample_rate=22050, resampling="sinc"),
    )
    calls(
        "pipeline decode_audio",
        lambda: _run_pipeline(
            [{"audio": data}], dataio.slot("audio").decode_audio(sample_rate=8000, mono=True)
        ),
    )
    calls.finish()


# -- arrays and tensors ---------------------------------------------------------------------


def npy(data: bytes, workdir: str) -> None:
    """read_numpy (mapped and copied), read(format="npy"), scan_numpy (iterated and
    collected), the decode slot."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.npy", data)
    calls("read_numpy", lambda: _touch(dataio.read_numpy(path)))
    calls("read_numpy mmap=False", lambda: _touch(dataio.read_numpy(path, mmap=False)))
    calls("read format=npy", lambda: _touch(dataio.read(path, format="npy")))
    calls("scan_numpy", lambda: _drain(dataio.scan_numpy(path)))
    calls("scan_numpy collect", lambda: dataio.scan_numpy(path).collect())
    calls(
        "pipeline decode_numpy",
        lambda: _run_pipeline([{"x": data}], dataio.slot("x").decode_numpy()),
    )
    calls.finish()


def npz(data: bytes, workdir: str) -> None:
    """read_npz (mapped and copied), read(format="npz"), scan_npz."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.npz", data)
    calls("read_npz", lambda: _touch(dataio.read_npz(path)))
    calls("read_npz mmap=False", lambda: _touch(dataio.read_npz(path, mmap=False)))
    calls("read format=npz", lambda: _touch(dataio.read(path, format="npz")))
    calls("scan_npz", lambda: _drain(dataio.scan_npz(path)))
    calls("scan_npz collect", lambda: dataio.scan_npz(path).collect())
    calls.finish()


def safetensors(data: bytes, workdir: str) -> None:
    """read_safetensors, open_safetensors then every tensor, read(format=), the slot."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.safetensors", data)
    calls("read_safetensors", lambda: _touch(dataio.read_safetensors(path)))

    def each_tensor() -> None:
        with dataio.open_safetensors(path) as handle:
            _ = handle.metadata
            for key in handle.keys():  # noqa: SIM118 - the public session method
                _touch(handle.read(key=key))

    calls("open_safetensors read each", each_tensor)
    calls(
        "read_safetensors framework=torch",
        lambda: dataio.read_safetensors(path, framework="torch"),
    )
    calls("read format=safetensors", lambda: _touch(dataio.read(path, format="safetensors")))
    calls(
        "pipeline decode_safetensors",
        lambda: _run_pipeline([{"x": data}], dataio.slot("x").decode_safetensors()),
    )
    calls.finish()


def pt(data: bytes, workdir: str) -> None:
    """The decode_pt slot (``torch.load(weights_only=True)``), directly and in a pipeline."""
    import dataio
    from dataio.udfs.text import decode_pt

    calls = _Calls()
    calls("decode_pt", lambda: decode_pt(data))
    calls("pipeline decode_pt", lambda: _run_pipeline([{"x": data}], dataio.slot("x").decode_pt()))
    calls.finish()


# -- record and table files -----------------------------------------------------------------


def tfrecord(data: bytes, workdir: str) -> None:
    """iter_tfrecord (parsed and raw), scan_tfrecord().collect()."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.tfrecord", data)
    calls("iter_tfrecord", lambda: _drain(dataio.iter_tfrecord(path)))
    calls("iter_tfrecord raw", lambda: _drain(dataio.iter_tfrecord(path, raw=True)))
    calls("scan_tfrecord collect", lambda: dataio.scan_tfrecord(path).collect().to_pylist())
    calls.finish()


def _by_position(frame: Any) -> None:
    """Read every row by position, last first (each row group / record batch once)."""
    rows = frame.by_position()
    rows.take_batch(range(rows.length() - 1, -1, -1)).to_pylist()


def _arrow_file(data: bytes, workdir: str, suffix: str, formats: tuple[str, ...]) -> None:
    import dataio

    calls = _Calls()
    path = _write(workdir, f"input.{suffix}", data)
    calls("read_feather to_pylist", lambda: dataio.read_feather(path).to_pylist())
    calls("scan_feather collect", lambda: dataio.scan_feather(path).collect().to_pylist())
    calls("scan_feather by_position", lambda: _by_position(dataio.scan_feather(path)))
    calls("ranged IPC read (remote files)", lambda: _ranged_ipc(path))
    for name in formats:

        def read(name: str = name) -> None:
            table: Any = dataio.read(path, format=name)  # type: ignore[call-overload]
            table.to_pylist()

        calls(f"read format={name}", read)
    calls.finish()


def _ranged_ipc(path: str) -> None:
    """The reader of remote Feather files, by ranges (it takes local paths too): all
    columns, then the first column of the first rows only."""
    from dataio.formats._arrow import read_remote_ipc, remote_ipc_schema

    read_remote_ipc(path, "fuzz").to_pylist()
    names = remote_ipc_schema(path, "fuzz").names
    if names:
        read_remote_ipc(path, "fuzz", columns=names[:1], rows=1).to_pylist()


def feather(data: bytes, workdir: str) -> None:
    """read_feather + to_pylist, scan_feather().collect(), read(format="feather")."""
    _arrow_file(data, workdir, "feather", ("feather", "arrow"))


def ipc(data: bytes, workdir: str) -> None:
    """The Feather entry points and read(format="ipc") on Arrow IPC files and streams."""
    _arrow_file(data, workdir, "arrow", ("ipc", "arrow"))


def parquet(data: bytes, workdir: str) -> None:
    """read_parquet, scan_parquet().collect(), read(format="parquet"), a Parquet manifest."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.parquet", data)
    calls("read_parquet to_pylist", lambda: dataio.read_parquet(path).to_pylist())
    calls("scan_parquet collect", lambda: dataio.scan_parquet(path).collect().to_pylist())
    calls("scan_parquet by_position", lambda: _by_position(dataio.scan_parquet(path)))
    calls("read format=parquet", lambda: dataio.read(path, format="parquet").to_pylist())
    calls("manifest parquet", lambda: list(dataio.manifest(path)))
    calls.finish()


def hdf5(data: bytes, workdir: str) -> None:
    """open_hdf5 keys and reads (copied and mapped), read_hdf5 per key, scan_hdf5."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.h5", data)
    keys: list[str] = []

    def each_key() -> None:
        with dataio.open_hdf5(path) as handle:
            keys.extend(handle.keys())
            for key in keys:
                _no_outside_bytes(handle.read(key))
                _no_outside_bytes(handle.read(key, copy=False))

    calls("open_hdf5 read each", each_key)
    for key in keys[:8]:

        def one(key: str = key) -> None:
            _no_outside_bytes(dataio.read_hdf5(path, key=key))

        calls(f"read_hdf5 {key}", one)
    calls("scan_hdf5", lambda: [_no_outside_bytes(r) for r in dataio.scan_hdf5(path)])
    calls("scan_hdf5 collect", lambda: dataio.scan_hdf5(path).collect())
    calls.finish()


# -- archives -------------------------------------------------------------------------------


def _first_tar_name(data: bytes) -> str:
    return data[:100].split(b"\0", 1)[0].decode("utf-8", "replace") or "missing"


def tar(data: bytes, workdir: str) -> None:
    """archive and webdataset sources through a pipeline, reader().tar_entry()."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "shard-0000.tar", data)
    calls("archive iterate", lambda: _drain(dataio.archive(path)))
    calls(
        "webdataset pipeline",
        lambda: _run_pipeline(
            list(dataio.webdataset(os.path.join(workdir, "shard-{0000..0000}.tar"))),
            dataio.slot("bin", optional=True).decode_bytes(),
        ),
    )
    for rank in (0, 1):  # a sharded pass deals samples by walking the shard's headers
        calls(
            f"webdataset shard {rank}/2",
            lambda rank=rank: _run_sharded(dataio.webdataset(path, index=False), rank, 2),
        )
    name = _first_tar_name(data)
    calls("reader tar_entry", lambda: dataio.reader(path).tar_entry(name).read_all())
    gz = _write(workdir, "shard.tar.gz", _gzip(data))
    calls("archive tar.gz", lambda: _drain(dataio.archive(gz)))
    calls("reader gunzip tar_entry", lambda: dataio.reader(gz).gunzip().tar_entry(name).read_all())
    calls.finish()


def _run_sharded(source: Any, rank: int, world: int) -> None:
    import dataio

    pipe = dataio.pipeline(dataio.slot("bin", optional=True).decode_bytes(), dataio.batch(2))
    with pipe.bind(source).run(concurrency=1, shard={"id": rank, "of": world}) as loader:
        for _ in loader:
            pass


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, compresslevel=1, mtime=0)


def zip_(data: bytes, workdir: str) -> None:
    """archive(zip) iterated, and the zip read as an npz (read_npz, read(format="npz"))."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.zip", data)
    calls("archive zip", lambda: _drain(dataio.archive(path)))
    npz_path = _write(workdir, "input.npz", data)
    calls("read_npz", lambda: _touch(dataio.read_npz(npz_path)))
    calls("read_npz mmap=False", lambda: _touch(dataio.read_npz(npz_path, mmap=False)))
    calls("read format=npz", lambda: _touch(dataio.read(npz_path, format="npz")))
    calls.finish()


# -- text -----------------------------------------------------------------------------------


def _small_tar() -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for key in ("a", "b", "c"):
            info = tarfile.TarInfo(f"{key}.bin")
            info.size = 3
            archive.addfile(info, io.BytesIO(key.encode() * 3))
    return buffer.getvalue()


_SMALL_TAR = _small_tar()


def json_(data: bytes, workdir: str) -> None:
    """decode_json, read(format="json"/"jsonl"), scan_json, a JSON-lines manifest."""
    import dataio
    from dataio.udfs.text import decode_json

    calls = _Calls()
    path = _write(workdir, "input.jsonl", data)
    calls("decode_json", lambda: decode_json(data))
    calls(
        "pipeline decode_json", lambda: _run_pipeline([{"x": data}], dataio.slot("x").decode_json())
    )
    calls("read format=json", lambda: dataio.read(path, format="json"))
    calls("read format=jsonl", lambda: dataio.read(path, format="jsonl"))
    calls("scan_json collect", lambda: dataio.scan_json(path).collect().to_pylist())
    calls("manifest jsonl", lambda: list(dataio.manifest(path)))
    # the input as a WebDataset shard index (wids JSON) beside a real shard
    _write(workdir, "shard-0000.tar", _SMALL_TAR)
    index = _write(workdir, "shardindex.json", data)
    calls("webdataset index", lambda: _drain(dataio.webdataset(index)))
    shard = os.path.join(workdir, "shard-0000.tar")
    calls(
        "webdataset index shard 1/2",
        lambda: _run_sharded(dataio.webdataset(shard, index=index), 1, 2),
    )
    calls.finish()


def text(data: bytes, workdir: str) -> None:
    """decode_text (UTF-8 and another codec), read(format="text")."""
    import dataio
    from dataio.udfs.text import decode_text

    calls = _Calls()
    path = _write(workdir, "input.txt", data)
    calls("decode_text", lambda: decode_text(data))
    calls("decode_text utf-16", lambda: decode_text(data, "utf-16"))
    calls(
        "pipeline decode_text", lambda: _run_pipeline([{"x": data}], dataio.slot("x").decode_text())
    )
    calls("read format=text", lambda: dataio.read(path, format="text"))
    calls.finish()


def csv_manifest(data: bytes, workdir: str) -> None:
    """manifest(csv) iterated, scan_csv().collect()."""
    import dataio

    calls = _Calls()
    path = _write(workdir, "input.csv", data)
    calls("manifest csv", lambda: list(dataio.manifest(path)))
    calls("scan_csv collect", lambda: dataio.scan_csv(path).collect().to_pylist())
    calls.finish()


# -- the RDMA side channel ------------------------------------------------------------------


class _BytesSocket:
    """Enough of a socket for ``recv_frame``: ``recv`` over fixed bytes, then EOF."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)

    def recv(self, size: int, *_: Any) -> bytes:
        chunk, self._data = bytes(self._data[:size]), self._data[size:]
        return chunk


def rdma_frame(data: bytes, workdir: str) -> None:
    """The side channel's frame parser (``recv_frame``) on the bytes, no network."""
    from dataio.rdma import _channel

    calls = _Calls()
    sock = _BytesSocket(data)
    calls("recv_frame", lambda: _channel.recv_frame(sock))  # type: ignore[arg-type]
    framed = _BytesSocket(len(data).to_bytes(4, "big") + data)
    calls("recv_frame (framed body)", lambda: _channel.recv_frame(framed))  # type: ignore[arg-type]
    calls.finish()


TARGETS: dict[str, Callable[[bytes, str], None]] = {
    "jpeg": image,
    "png": image,
    "image": image,
    "audio": audio,
    "npy": npy,
    "npz": npz,
    "safetensors": safetensors,
    "pt": pt,
    "tfrecord": tfrecord,
    "feather": feather,
    "ipc": ipc,
    "parquet": parquet,
    "hdf5": hdf5,
    "tar": tar,
    "zip": zip_,
    "json": json_,
    "text": text,
    "csv_manifest": csv_manifest,
    "rdma_frame": rdma_frame,
}


# -- targets that misbehave on purpose, to test the harness ---------------------------------


def _segfault(data: bytes, workdir: str) -> None:
    ctypes.string_at(0)


def _hang(data: bytes, workdir: str) -> None:
    time.sleep(3600)


def _allocate(data: bytes, workdir: str) -> None:
    bytearray(64 << 30)


def _builtin(data: bytes, workdir: str) -> None:
    set_stage("self-test")
    raise KeyError("not a DataioError")


def _dataio_error(data: bytes, workdir: str) -> None:
    from dataio.exceptions import DecodeError

    raise DecodeError("bad input, reported properly")


def _ok(data: bytes, workdir: str) -> None:
    pass


SELF_TEST: dict[str, Callable[[bytes, str], None]] = {
    "_segfault": _segfault,
    "_hang": _hang,
    "_allocate": _allocate,
    "_builtin": _builtin,
    "_dataio_error": _dataio_error,
    "_ok": _ok,
}
