"""Valid seed files per target, made in memory with the independent libraries.

Deterministic: every generator uses fixed content (no clocks, fixed RNG seeds), so a
campaign's inputs depend only on ``--seed``.
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _rgb(width: int, height: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 7 % 256, y * 5 % 256, (x + y) * 3 % 256], axis=-1).astype(np.uint8)


def jpeg() -> list[bytes]:
    """Baseline (4:2:0, 4:4:4, gray) and progressive JPEGs, with Pillow and simplejpeg."""
    import simplejpeg
    from PIL import Image

    out = []
    pixels = _rgb(40, 30)
    for options in ({}, {"progressive": True}, {"subsampling": 0}, {"optimize": True}):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=80, **options)
        out.append(buffer.getvalue())
    gray = io.BytesIO()
    Image.fromarray(pixels[..., 0]).save(gray, "JPEG")
    out.append(gray.getvalue())
    out.append(simplejpeg.encode_jpeg(_rgb(33, 17), quality=70, colorsubsampling="422"))
    return out


def png() -> list[bytes]:
    """RGB, RGBA, palette and 16-bit gray PNGs (Pillow)."""
    from PIL import Image

    pixels = _rgb(24, 20)
    images = [
        Image.fromarray(pixels),
        Image.fromarray(np.dstack([pixels, pixels[..., :1]])),
        Image.fromarray(pixels).convert("P"),
        Image.fromarray(pixels[..., 0].astype(np.uint16) * 200),
    ]
    out = []
    for im in images:
        buffer = io.BytesIO()
        im.save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def image() -> list[bytes]:
    """GIF, BMP, TIFF and WebP (Pillow)."""
    from PIL import Image

    out = []
    for fmt in ("GIF", "BMP", "TIFF", "WEBP"):
        buffer = io.BytesIO()
        Image.fromarray(_rgb(16, 12)).save(buffer, fmt)
        out.append(buffer.getvalue())
    return out


def audio() -> list[bytes]:
    """WAV (PCM16, float) and FLAC, mono and stereo (soundfile)."""
    import soundfile

    t = np.arange(800, dtype=np.float32) / 8000
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32) * 0.5
    stereo = np.stack([tone, tone[::-1]], axis=1)
    out = []
    for samples, fmt, subtype in (
        (tone, "WAV", "PCM_16"),
        (stereo, "WAV", "FLOAT"),
        (stereo, "FLAC", "PCM_16"),
        (tone, "FLAC", "PCM_24"),
    ):
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, 8000, format=fmt, subtype=subtype)
        data = bytearray(buffer.getvalue())
        peak = data.find(b"PEAK")
        if peak >= 0:  # libsndfile stamps float WAVs with the time: keep seeds reproducible
            data[peak + 12 : peak + 16] = bytes(4)
        out.append(bytes(data))
    return out


def npy() -> list[bytes]:
    """C and Fortran order, big-endian, structured and string arrays (numpy.save)."""
    arrays: list[Any] = [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        np.arange(5, dtype=">u2"),
        np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
        np.array([b"ab", b"cde"]),
        np.array(3.5),
    ]
    out = []
    for array in arrays:
        buffer = io.BytesIO()
        np.save(buffer, array)
        out.append(buffer.getvalue())
    return out


def npz() -> list[bytes]:
    """Stored and deflated ``.npz`` files (numpy.savez / savez_compressed)."""
    out = []
    for save in (np.savez, np.savez_compressed):
        buffer = io.BytesIO()
        save(buffer, a=np.arange(10, dtype=np.int16), b=np.ones((2, 3)))
        out.append(buffer.getvalue())
    return out


def zip_() -> list[bytes]:
    """An npz plus a plain zip of a few members (zipfile)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for key in ("a", "b"):
            info = zipfile.ZipInfo(f"{key}.txt", date_time=(2020, 1, 1, 0, 0, 0))
            archive.writestr(info, f"member {key}" * 5)
    return [*npz(), buffer.getvalue()]


def safetensors() -> list[bytes]:
    """Two tensors with metadata, and a bf16-free single tensor (safetensors.numpy)."""
    from safetensors.numpy import save

    return [
        save({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(4, np.int8)}),
        save({"x": np.ones((3,), np.float64)}, metadata={"format": "np"}),
    ]


def pt() -> list[bytes]:
    """``torch.save`` of a state dict and of a list (zip format)."""
    import torch

    out = []
    for value in (
        {"w": torch.arange(6.0).reshape(2, 3), "n": 3},
        [torch.ones(2, dtype=torch.int8)],
    ):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        out.append(buffer.getvalue())
    return out


# -- TFRecord, framed by hand (the format is simple enough to write independently) ----------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(features: dict[str, tuple[int, bytes]]) -> bytes:
    entries = b"".join(
        _field(1, _field(1, name.encode()) + _field(2, _field(kind, _field(1, body))))
        for name, (kind, body) in features.items()
    )
    return _field(1, entries)


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C (the ``crc32c`` package)."""
    import crc32c

    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(data: bytes, length: int | None = None) -> bytes:
    """One record: length, its masked CRC, the data, its masked CRC."""
    head = struct.pack("<Q", len(data) if length is None else length)
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def tfrecord() -> list[bytes]:
    """Two-record files of tf.train.Example (bytes, packed int64, packed float)."""
    records = [
        _example(
            {
                "image": (1, b"\x01\x02\x03" * i),
                "label": (3, b"".join(_varint(v) for v in (i, -1))),
                "box": (2, struct.pack("<3f", 0.5, 1.0, float(i))),
            }
        )
        for i in range(1, 3)
    ]
    return [b"".join(tfrecord_frame(r) for r in records)]


# -- Arrow ----------------------------------------------------------------------------------


def _table() -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array([1, 2, None, 4], pa.int64()),
            "name": ["a", "bb", None, "dddd"],
            "score": pa.array([0.5, 1.5, 2.5, None], pa.float32()),
            "tags": pa.array([[1], [], None, [2, 3]], pa.list_(pa.int32())),
            "blob": pa.array([b"x", b"", b"yz", None], pa.binary()),
        }
    )


def feather() -> list[bytes]:
    """Feather V1, V2 uncompressed, LZ4 and ZSTD (pyarrow.feather)."""
    import pyarrow.feather as pf

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.feather"
        for options in (
            {"version": 1},
            {"version": 2, "compression": "uncompressed"},
            {"version": 2, "compression": "lz4"},
            {"version": 2, "compression": "zstd"},
        ):
            table = _table()
            if options["version"] == 1:
                table = table.drop_columns(["tags"])
            pf.write_feather(table, str(path), **options)
            out.append(path.read_bytes())
    return out


def ipc() -> list[bytes]:
    """An Arrow IPC file and an IPC stream (pyarrow.ipc), two batches each."""
    import pyarrow as pa

    table = _table()
    out = []
    for opener in (pa.ipc.new_file, pa.ipc.new_stream):
        sink = io.BytesIO()
        with opener(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=2):
                writer.write_batch(batch)
        out.append(sink.getvalue())
    return out


def parquet() -> list[bytes]:
    """Parquet with two row groups, snappy and uncompressed (pyarrow.parquet)."""
    import pyarrow.parquet as pq

    out = []
    for compression in ("snappy", "none"):
        sink = io.BytesIO()
        pq.write_table(_table(), sink, row_group_size=2, compression=compression)
        out.append(sink.getvalue())
    return out


def hdf5() -> list[bytes]:
    """h5py files: contiguous, chunked with shuffle+gzip, lzf, fletcher32, vlen strings."""
    import h5py

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.h5"
        with h5py.File(path, "w", libver="earliest") as f:
            f["plain"] = np.arange(20, dtype=np.int32).reshape(4, 5)
            f.create_dataset(
                "gz", data=np.arange(64.0), chunks=(16,), shuffle=True, compression="gzip"
            )
            group = f.create_group("g")
            group.create_dataset(
                "lzf", data=np.arange(32, dtype=np.uint8), chunks=(8,), compression="lzf"
            )
            group.create_dataset("fl", data=np.ones(10, np.float32), chunks=(5,), fletcher32=True)
            strings = h5py.string_dtype()
            f.create_dataset(
                "names", data=np.array(["a", "bc", "def"], dtype=object), dtype=strings
            )
        out.append(path.read_bytes())
        with h5py.File(path, "w") as f:
            f["one"] = np.arange(6, dtype=np.float64)
        out.append(path.read_bytes())
    return out


def tar() -> list[bytes]:
    """WebDataset-style tars: ustar, GNU and PAX (a long name) formats (tarfile)."""
    out = []
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
            for key in ("0001", "0002"):
                for ext, body in (("bin", key.encode() * 3), ("cls", b"7")):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mtime = len(body), 0
                    archive.addfile(info, io.BytesIO(body))
            if fmt == tarfile.PAX_FORMAT:
                info = tarfile.TarInfo("d" * 120 + "/0003.bin")
                info.size = 2
                archive.addfile(info, io.BytesIO(b"hi"))
        out.append(buffer.getvalue())
    return out


def json_() -> list[bytes]:
    """A JSON object, a JSON-lines body, nesting and numbers."""
    rows = [{"key": i, "path": f"/x/{i}.jpg", "label": [i, 0.5], "ok": True} for i in range(3)]
    return [
        json.dumps(rows[0]).encode(),
        "\n".join(json.dumps(r) for r in rows).encode() + b"\n",
        b'{"a": [[[1]]], "b": 1e308, "c": "\\u00e9", "d": null}',
    ]


def text() -> list[bytes]:
    """UTF-8 text with multi-byte characters."""
    return ["hello\nwörld ✓\n".encode(), b"plain ascii line\n" * 4]


def csv_manifest() -> list[bytes]:
    """CSV manifests with a header."""
    return [b"key,path,label\n1,/a/1.jpg,3\n2,/a/2.jpg,4\n", b'key,text\n1,"quoted, comma"\n']


def rdma_frame() -> list[bytes]:
    """A hello and a welcome frame as the side channel sends them."""
    messages = [
        {"hello": "dataio.rdma/1", "provider": None},
        {"ok": True, "provider": "tcp;ofi_rxm", "name": "0200", "size": 1024, "key": 3, "base": 0},
    ]
    out = []
    for message in messages:
        body = json.dumps(message).encode()
        out.append(struct.pack(">I", len(body)) + body)
    return out


GENERATORS: dict[str, Callable[[], list[bytes]]] = {
    "jpeg": jpeg,
    "png": png,
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


def seeds(target: str, corpus: Path | None = None) -> list[bytes]:
    """Generated seeds for ``target``, then the committed corpus files, sorted by name."""
    out = list(GENERATORS[target]())
    folder = corpus / target if corpus is not None else None
    if folder is not None and folder.is_dir():
        out.extend(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())
    return out
