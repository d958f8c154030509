"""Mutation fuzzing of the NPY, NPZ, safetensors, .pt, TFRecord, JSON and text readers.

Valid seed files are mutated (byte flips, truncations, inserted bytes, length fields set
to hostile values) and each result is read through the public entry point in a forked
child under a 4 GiB address-space cap and a timeout. A result is a finding when the
child raises anything but a :class:`dataio.DataioError`, dies of a signal, or hangs.
Findings are written to ``--out/<target>/`` (one file per distinct failure). Run from the
repository root::

    PYTHONPATH=$PWD .venv/bin/python fuzz/mutate_tensors.py --cases 500 [--target npy]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import traceback
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import dataio
from dataio.formats.tfrecord import masked_crc32c

CAP = 4 << 30
HOSTILE = [0, 1, 0x7F, 0xFF, 0xFFFF, 2**31 - 1, 2**32 - 1, 2**40, 2**62, 2**63 - 1, 2**64 - 1]


def _npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    out = io.BytesIO()
    if version is None:
        np.save(out, array)
    else:
        np.lib.format.write_array(out, array, version=version)
    return out.getvalue()


def _npz(compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as zf:
        zf.writestr("x.npy", _npy(np.arange(600, dtype="<f4").reshape(20, 30)))
        zf.writestr("y.npy", _npy(np.array([b"ab", b"c"])))
    return out.getvalue()


def _safetensors() -> bytes:
    from safetensors.numpy import save

    return save({"w": np.ones((3, 4), "<f4"), "b": np.arange(5, dtype="<i8")})


def _pt(legacy: bool) -> bytes:
    import torch

    out = io.BytesIO()
    state = {"w": torch.ones(3, 4), "n": [1, 2.5, "x"]}
    torch.save(state, out, _use_new_zipfile_serialization=not legacy)
    return out.getvalue()


def _example() -> bytes:
    def ld(field: int, payload: bytes) -> bytes:
        return bytes([field << 3 | 2, len(payload)]) + payload

    floats = ld(2, ld(1, struct.pack("<2f", 1.5, 2.5)))
    ints = ld(3, ld(1, bytes([3, 0x7F])))
    raw = ld(1, ld(1, b"abc"))
    entries = b"".join(
        ld(1, ld(1, name) + ld(2, feature))
        for name, feature in ((b"f", floats), (b"i", ints), (b"b", raw))
    )
    return ld(1, entries)


def _tfrecord(kind: str) -> bytes:
    out = b""
    for _ in range(2):
        data = _example()
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", masked_crc32c(length)) + data
        out += struct.pack("<I", masked_crc32c(data))
    if kind == "gzip":
        return gzip.compress(out)
    if kind == "zlib":
        return zlib.compress(out)
    return out


def seeds() -> dict[str, list[bytes]]:
    return {
        "npy": [
            _npy(np.arange(12, dtype="<f4").reshape(3, 4)),
            _npy(np.arange(6, dtype=">i8")),
            _npy(np.zeros((2, 2), dtype=[("a", "<i4"), ("b", "S3")]), (2, 0)),
            _npy(np.array(["x", "yz"]), (3, 0)),
        ],
        "npz": [_npz(zipfile.ZIP_STORED), _npz(zipfile.ZIP_DEFLATED)],
        "zip": [_npz(zipfile.ZIP_BZIP2), _npz(zipfile.ZIP_LZMA)],
        "safetensors": [_safetensors()],
        "pt": [_pt(False), _pt(True)],
        "tfrecord": [_tfrecord("none"), _tfrecord("gzip"), _tfrecord("zlib")],
        "json": [json.dumps({"a": [1, 2.5, None, "x\u00e9"], "b": {"c": True}}).encode()],
        "text": ["caf\u00e9 \u2603 hello".encode()],
    }


def _via_file(suffix: str, read: Callable[[str], Any]) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        with tempfile.NamedTemporaryFile(suffix=suffix, delete=False) as f:
            f.write(data)
        try:
            return read(f.name)
        finally:
            os.unlink(f.name)

    return run


def _materialize(value: Any) -> None:
    """Touch every element, as a consumer would (hangs and huge copies show up here)."""
    if isinstance(value, dict):
        for item in value.values():
            _materialize(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _materialize(item)
    elif isinstance(value, np.ndarray):
        np.array(value, copy=True)
    elif hasattr(value, "clone"):
        value.clone()


def _tfrecord_all(path: str) -> Any:
    rows = list(dataio.iter_tfrecord(path))
    rows += list(dataio.iter_tfrecord(path, raw=True))
    return rows, dataio.scan_tfrecord(path).collect()


def _st(path: str) -> Any:
    out = [dataio.read_safetensors(path), dataio.read_safetensors(path, copy=True)]
    out.append(dataio.read_safetensors(path, framework="torch"))
    return out


def _decode(op: str, **params: Any) -> Callable[[bytes], Any]:
    from dataio.udfs import text

    kernel = getattr(text, op)
    return lambda data: kernel(data, **params)


ENTRIES: dict[str, list[Callable[[bytes], Any]]] = {
    "npy": [
        _via_file(".npy", dataio.read_numpy),
        _via_file(".npy", lambda p: dataio.read_numpy(p, mmap=False)),
        _via_file(".npy", lambda p: dataio.io.read(p, format="npy")),
    ],
    "npz": [
        _via_file(".npz", dataio.read_npz),
        _via_file(".npz", lambda p: dataio.read_npz(p, mmap=False)),
    ],
    "zip": [_via_file(".npz", dataio.read_npz)],
    "safetensors": [
        _via_file(".safetensors", _st),
        _via_file(".safetensors", lambda p: dataio.io.read(p, format="safetensors")),
    ],
    "pt": [_decode("decode_pt")],
    "tfrecord": [_via_file(".tfrecord", _tfrecord_all)],
    "json": [
        _decode("decode_json"),
        _via_file(".jsonl", lambda p: dataio.io.read(p, format="jsonl")),
    ],
    "text": [
        _decode("decode_text", encoding=e)
        for e in ("utf-8", "idna", "punycode", "utf-16", "unicode_escape", "utf-7", "cp037")
    ],
}


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if not out:
            out = bytearray(rng.randbytes(rng.randint(1, 16)))
        elif choice < 0.35:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif choice < 0.5:
            out[rng.randrange(len(out))] = rng.choice([0, 0xFF, 0x7F, 0x80, ord("9"), ord("(")])
        elif choice < 0.6:
            del out[rng.randrange(len(out)) :]
        elif choice < 0.7:
            i = rng.randrange(len(out) + 1)
            out[i:i] = rng.choice([rng.randbytes(rng.randint(1, 8)), b"9" * 5000, b"(" * 3000])
        else:
            width = rng.choice([1, 2, 4, 8])
            if len(out) >= width:
                i = rng.randrange(len(out) - width + 1)
                value = rng.choice(HOSTILE) & ((1 << (8 * width)) - 1)
                out[i : i + width] = value.to_bytes(width, "little")
    return bytes(out)


def _frame(records: list[bytes], lengths: list[int] | None = None) -> bytes:
    """TFRecord framing with valid checksums, so mutations reach the parsers."""
    out = b""
    for i, data in enumerate(records):
        length = struct.pack("<Q", lengths[i] if lengths else len(data))
        out += length + struct.pack("<I", masked_crc32c(length)) + data
        out += struct.pack("<I", masked_crc32c(data))
    return out


def mutate_tfrecord(rng: random.Random) -> bytes:
    """A mutated Example, or a hostile length, framed with valid checksums."""
    if rng.random() < 0.3:
        length = rng.choice([*HOSTILE, rng.randrange(1 << 20)])
        return _frame([_example()], [length])[: rng.choice([16, 64, 1 << 20])]
    data = _frame([mutate(_example(), rng)])
    return rng.choice([data, gzip.compress(data), zlib.compress(data)])


_DESCRS = ["|V0", "|S0", "<U0", "<f4", ">c16", "|b1", "<M8[D]", "<m8", "|O", "V16", "<f16", ""]
_DESCRS += ["[('a', '<i4')]", "[('a', '|V0', (7,))]", "[('', '<i4')]", "{'names': ['a']}", "0"]


def mutate_npy_header(rng: random.Random) -> bytes:
    """An NPY header with hostile descr / shape values, and a few data bytes."""
    descr = rng.choice(_DESCRS)
    dims = [rng.choice([0, 1, 3, 2**31, 2**62, 2**63, 2**64, -1]) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.1:
        dims = [1] * 70
    shape = "(" + "".join(f"{d}," for d in dims) + ")"
    descr_text = descr if descr.startswith(("[", "{", "0")) else repr(descr)
    text = f"{{'descr': {descr_text}, 'fortran_order': {rng.choice(['False', 'True', '0'])}, "
    text += f"'shape': {shape}, }}"
    header = text.encode().ljust(118) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(64)


def trial(entry: Callable[[bytes], Any], data: bytes, timeout: int) -> str | None:
    """None if ``entry(data)`` succeeds or raises a DataioError; else what went wrong."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))
        signal.alarm(timeout)
        verdict = ""
        try:
            _materialize(entry(data))
        except dataio.DataioError:
            pass
        except BaseException as exc:  # classifying every escape is the point
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            verdict = f"{type(exc).__name__} at {where}: {str(exc)[:160]}"
        os.write(write_end, verdict.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return "timeout (SIGALRM)" if sig == signal.SIGALRM else f"killed by signal {sig}"
    return message or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300, help="mutations per target")
    parser.add_argument("--target", action="append", help="limit to these targets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("fuzz/found"))
    args = parser.parse_args()
    import torch  # noqa: F401 - loaded once here, not in every child

    rng = random.Random(args.seed)
    all_seeds = seeds()
    found: dict[str, bytes] = {}
    for target in args.target or list(ENTRIES):
        for _ in range(args.cases):
            if target == "tfrecord" and rng.random() < 0.6:
                data = mutate_tfrecord(rng)
            elif target == "npy" and rng.random() < 0.4:
                data = mutate_npy_header(rng)
            else:
                data = mutate(rng.choice(all_seeds[target]), rng)
            for entry in ENTRIES[target]:
                verdict = trial(entry, data, args.timeout)
                if verdict is None:
                    continue
                key = f"{target}: {verdict.split(':')[0]} {verdict.split(' at ')[-1][:40]}"
                if key not in found or len(data) < len(found[key]):
                    if key not in found:
                        print(key, "|", verdict, flush=True)
                    found[key] = data
                    folder = args.out / target
                    folder.mkdir(parents=True, exist_ok=True)
                    name = hashlib.sha1(key.encode()).hexdigest()[:12]
                    (folder / name).write_bytes(data)
    print(f"{len(found)} distinct findings", file=sys.stderr)


if __name__ == "__main__":
    main()
