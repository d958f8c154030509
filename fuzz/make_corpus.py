"""Write the hostile inputs of issue #20 ("Hostile input and faults") into fuzz/corpus/.

Each function returns ``{name: bytes}`` for one target and says what is hostile about
the file. Deterministic; rerun after editing and commit the files it writes:

    python fuzz/make_corpus.py
"""

from __future__ import annotations

import io
import json
import re
import struct
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from seeds import tfrecord_frame  # noqa: E402


def _baseline_jpeg(width: int = 8, height: int = 8, **options: object) -> bytes:
    from PIL import Image

    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 9 % 256, y * 13 % 256, (x ^ y) * 7 % 256], -1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=50, **options)
    return buffer.getvalue()


def jpeg() -> dict[str, bytes]:
    """A frame header declaring 65500x65500 pixels; a progressive file of ~900 scans."""
    data = bytearray(_baseline_jpeg())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 65500, 65500)  # height, width
    progressive = _baseline_jpeg(16, 16, progressive=True)
    first = progressive.index(b"\xff\xda")
    end = progressive.rindex(b"\xff\xd9")
    scans = [m.start() for m in re.finditer(b"\xff\xda", progressive)]
    last = progressive[scans[-1] : end]  # the final refinement scan, repeated
    flood = progressive[:end] + last * (900 - len(scans)) + progressive[end:]
    assert first < end
    return {"sof-65500x65500": bytes(data), "progressive-900-scans": flood}


def npy() -> dict[str, bytes]:
    """Zero-width dtypes with huge element counts: ``|V0`` x 2^62 and ``|S0``."""

    def header(descr: str, shape: str) -> bytes:
        text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
        text = text.ljust(64 * ((len(text) + 11) // 64 + 1) - 11) + "\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()

    return {
        "v0-2pow62": header("|V0", f"({2**62},)"),
        "s0-huge": header("|S0", f"({2**40}, {2**22})"),
        "shape-negative": header("<f4", "(-1, 4)") + bytes(16),
        "shape-overflows-int64": header("<i8", f"({2**32}, {2**32})") + bytes(64),
    }


def tfrecord() -> dict[str, bytes]:
    """Record lengths of 2^40 and 2^64-1 with valid length checksums, and no data."""
    out = {}
    for name, length in (("len-2pow40", 2**40), ("len-2pow64-1", 2**64 - 1)):
        frame = tfrecord_frame(b"", length)
        out[name] = frame[:12] + b"\0" * 16
    return out


def _tar_member(name: str, body: bytes, **fields: object) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(body), 0
        for key, value in fields.items():
            setattr(info, key, value)
        archive.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _set_tar_size(data: bytes, field: bytes, typeflag: bytes | None = None) -> bytes:
    block = bytearray(data)
    block[124:136] = field
    if typeflag is not None:
        block[156:157] = typeflag
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[:512])
    return bytes(block)


def tar() -> dict[str, bytes]:
    """Size fields: octal huge, base-256 2^63, a GNU sparse member; a cut header."""
    plain = _tar_member("0001.bin", b"hello")
    sparse = bytearray(_set_tar_size(plain, b"00000000005\0", b"S"))
    sparse[483:495] = b"77777777777\0"  # GNU realsize: ~8 GiB expanded
    sparse[386:398] = b"00000000000\0"  # sparse map entry 0: offset
    sparse[398:410] = b"77777777777\0"  # numbytes far past the member
    sparse[148:156] = b" " * 8
    sparse[148:156] = b"%06o\0 " % sum(sparse[:512])
    return {
        "size-octal-huge": _set_tar_size(plain, b"77777777777\0"),
        "size-base256-2pow63": _set_tar_size(plain, b"\x80" + (2**63).to_bytes(11, "big")),
        "size-base256-5gib": _set_tar_size(plain, b"\x80" + (5 << 30).to_bytes(11, "big")),
        "gnu-sparse-huge": bytes(sparse),
        "cut-inside-header": plain[:300],
        "cut-inside-second-header": (plain[:1024] + _tar_member("0002.bin", b"x"))[:1300],
    }


def _bomb_member(size: int) -> bytes:
    """A zip holding one member of ``size`` zero bytes, deflated (ratio ~1000)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        info = zipfile.ZipInfo("a.npy", date_time=(2020, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=False) as member:
            head = b"{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % (size - 128)
            head = head.ljust(117) + b"\n"
            member.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head)
            chunk = bytes(1 << 20)
            left = size - 128
            while left:
                member.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
    return buffer.getvalue()


def _declared_sizes(data: bytes, size: int) -> bytes:
    """Rewrite the sizes both headers declare for the first member."""
    out = bytearray(data)
    out[22:26] = struct.pack("<I", size)  # local header: uncompressed size
    central = out.index(b"PK\x01\x02")
    out[central + 24 : central + 28] = struct.pack("<I", size)
    return bytes(out)


def zip_() -> dict[str, bytes]:
    """A ~200 KB deflate member inflating to ~200 MB; members declaring 4 GiB."""
    bomb = _bomb_member(200 << 20)
    small = _bomb_member(4096)
    return {"inflation-bomb-200mb": bomb, "declares-4gib": _declared_sizes(small, 0xFFFFFFFF)}


def npz() -> dict[str, bytes]:
    """The same bomb and lying sizes, read as an ``.npz``."""
    return {
        "inflation-bomb-200mb": _bomb_member(200 << 20),
        "declares-4gib": zip_()["declares-4gib"],
    }


def audio() -> dict[str, bytes]:
    """WAV headers declaring 2^31-1 Hz and 999,983 Hz (a prime) over a few samples."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(64, np.int16), 16000, format="WAV", subtype="PCM_16")
    wav = buffer.getvalue()
    at = wav.index(b"fmt ") + 8
    out = {}
    for name, rate in (("wav-rate-2pow31-1", 2**31 - 1), ("wav-rate-999983", 999983)):
        data = bytearray(wav)
        data[at + 4 : at + 8] = struct.pack("<I", rate)
        data[at + 8 : at + 12] = struct.pack("<I", (rate * 2) & 0xFFFFFFFF)
        out[name] = bytes(data)
    data = bytearray(wav)
    data[at + 2 : at + 4] = struct.pack("<H", 65535)  # channels
    out["wav-65535-channels"] = bytes(data)
    return out


def hdf5() -> dict[str, bytes]:
    """A dataset whose storage is an external file: /etc/passwd."""
    import h5py

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.h5"
        with h5py.File(path, "w", track_order=False) as f:
            f.create_dataset("passwd", shape=(512,), dtype="u1", external=[("/etc/passwd", 0, 512)])
        return {"external-etc-passwd": path.read_bytes()}


def _feather_v2() -> bytes:
    import pyarrow as pa
    import pyarrow.feather as pf

    table = pa.table({"a": pa.array(range(10), pa.int64()), "s": [str(i) * 3 for i in range(10)]})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.feather"
        pf.write_feather(table, str(path), compression="uncompressed")
        return path.read_bytes()


def feather() -> dict[str, bytes]:
    """Damaged Feather V2 files: truncated, a huge footer length, a corrupted schema."""
    good = _feather_v2()
    footer_len = bytearray(good)
    footer_len[-10:-6] = struct.pack("<i", 0x7FFFFFF0)
    schema = bytearray(good)
    for i in range(16, 120, 7):
        schema[i] ^= 0xFF
    body = bytearray(good)
    # the body's buffers: point the string offsets far away
    idx = len(body) // 2
    body[idx : idx + 8] = struct.pack("<q", 2**62)
    return {
        "truncated-half": good[: len(good) // 2],
        "footer-length-huge": bytes(footer_len),
        "schema-flipped": bytes(schema),
        "buffer-offset-2pow62": bytes(body),
        "magic-only": b"ARROW1\0\0ARROW1",
    }


def rdma_frame() -> dict[str, bytes]:
    """A 60 KB frame of ``[``: under the 64 KiB cap, nested past the recursion limit."""
    body = b"[" * 60000
    return {"open-brackets-60k": struct.pack(">I", len(body)) + body}


def json_() -> dict[str, bytes]:
    """An integer of 5000 digits (past Python's int-string limit); deep nesting."""
    return {"int-5000-digits": b"1" * 5000, "nested-100k": b"[" * 100000 + b"]" * 100000}


def safetensors() -> dict[str, bytes]:
    """Shapes that do not fit the data: negative, overflowing, too large for the offsets."""
    out = {}
    for name, shape in (
        ("shape-negative", [-1, 4]),
        ("shape-overflows", [2**62, 8]),
        ("shape-mismatch", [1000, 1000]),
    ):
        header = json.dumps({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}})
        raw = header.encode()
        out[name] = struct.pack("<Q", len(raw)) + raw + bytes(16)
    big = struct.pack("<Q", 2**63) + b"{}"
    out["header-length-2pow63"] = big
    return out


def pt() -> dict[str, bytes]:
    """Damaged ``torch.save`` files: truncated, and a flipped central directory."""
    import torch

    buffer = io.BytesIO()
    torch.save({"w": torch.arange(16.0)}, buffer)
    good = buffer.getvalue()
    flipped = bytearray(good)
    central = flipped.index(b"PK\x01\x02")
    for i in range(central + 16, central + 46):
        flipped[i] ^= 0x5A
    return {"truncated": good[: len(good) // 2], "central-directory-flipped": bytes(flipped)}


PRODUCERS = {
    "jpeg": jpeg,
    "npy": npy,
    "tfrecord": tfrecord,
    "tar": tar,
    "zip": zip_,
    "npz": npz,
    "audio": audio,
    "hdf5": hdf5,
    "feather": feather,
    "rdma_frame": rdma_frame,
    "json": json_,
    "safetensors": safetensors,
    "pt": pt,
}


def main() -> None:
    """Write every hostile file under fuzz/corpus/<target>/."""
    for target, produce in PRODUCERS.items():
        folder = HERE / "corpus" / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in produce().items():
            assert len(data) < 256 << 10, (target, name, len(data))
            (folder / f"issue20-{name}").write_bytes(data)  # prefixed: other authors' names differ
            print(f"{target}/issue20-{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
