"""Hostile NPY, NPZ / zip, safetensors and .pt input: refused with a DataioError, never a
builtin exception, a hang or a memory bomb (issue #20). Each file is built here, so the
test shows what is hostile about it; the fuzz corpus holds the same bytes."""

from __future__ import annotations

import faulthandler
import io
import json
import os
import signal
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import torch

import dataio
from dataio import limits
from dataio.exceptions import DataioError, DecodeError, FormatError, LimitError
from dataio.formats.numpy import decode_npz, read_npz, read_numpy
from dataio.formats.safetensors import read_safetensors
from dataio.udfs.tensor import decode_npy, decode_safetensors
from dataio.udfs.text import decode_pt

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def npy_with_header(text: str, data: bytes = b"") -> bytes:
    """NPY version 1.0 bytes whose header dict is ``text``, verbatim."""
    header = text.encode("latin1").ljust(118) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


def header(descr: str, shape: str) -> str:
    return f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape}, }}"


def refuses(read: Callable[[], object], error: type[DataioError], match: str) -> DataioError:
    with pytest.raises(error, match=match) as caught:
        read()
    return caught.value


# -- NPY ------------------------------------------------------------------------------------

ZERO_SIZE = {
    # 2**62 elements of nothing: 128 bytes on disk, a copy hangs (V0) or asks for 4 EiB (S0)
    "void0-2e62": npy_with_header(header("|V0", "(2147483648, 2147483648)")),
    "bytes0-2e62": npy_with_header(header("|S0", "(4611686018427387904,)")),
    # 2**31 elements is 2 GiB at a byte each, but a copy widens U0 to 4-byte U1: 8 GiB
    "str0-2e31": npy_with_header(header("<U0", "(2147483648,)")),
}


@pytest.mark.parametrize("name", sorted(ZERO_SIZE))
def test_zero_size_dtype_with_a_huge_shape_is_a_limit_error(tmp_path: Path, name: str) -> None:
    data = ZERO_SIZE[name]
    path = tmp_path / "bomb.npy"
    path.write_bytes(data)
    for read in (
        lambda: read_numpy(path),
        lambda: read_numpy(path, mmap=False),
        lambda: dataio.io.read(str(path), format="npy"),
        lambda: decode_npy(data),
    ):
        error = refuses(read, LimitError, "zero-size elements")
        assert error.name == "max_decoded_bytes"  # type: ignore[attr-defined]


def test_zero_size_dtype_with_a_small_shape_still_reads(tmp_path: Path) -> None:
    expected = np.zeros((3, 5), dtype="V0")
    path = tmp_path / "small.npy"
    np.save(path, expected)
    actual = read_numpy(path)
    assert actual.shape == np.load(path).shape == (3, 5) and actual.dtype == expected.dtype
    with limits.scoped(max_decoded_bytes=14):  # 15 elements count a byte each
        refuses(lambda: read_numpy(path), LimitError, "max_decoded_bytes=14")


MALFORMED_NPY = {
    # numpy raises ValueError ("maximum supported dimension ...") for these
    "65-dims": (
        npy_with_header(header("<f4", "(" + "1," * 65 + ")"), bytes(4)),
        "over 64 dimensions",
    ),
    # 0 elements, yet NumPy refuses to copy them: the other sizes multiply past 2**63
    "bytes0-0x2e62x2e62": (
        npy_with_header(header("|S0", "(0, 4611686018427387904, 4611686018427387904)")),
        "multiplies past 2",
    ),
    "dim-2e70-times-0": (
        npy_with_header(header("<f4", "(0, 1180591620717411303424)")),
        "size over 2\\*\\*63",
    ),
    # ast.literal_eval raises TypeError / ValueError (Python's 4,300-digit int limit)
    "unhashable-key": (npy_with_header("{[]: 1}"), "unreadable NPY header"),
    "5000-digit-dim": (
        npy_with_header(header("<f4", "(" + "9" * 5000 + ",)")),
        "unreadable NPY header",
    ),
    "syntax": (npy_with_header("{'descr': '<f4', 'shape': (1,"), "unreadable NPY header"),
    "bad-descr": (npy_with_header(header("<x9", "(1,)")), "is not a dtype"),
    # NumPy parses comma strings with ast.literal_eval: SyntaxError
    "descr-comma-syntax": (npy_with_header(header("(,)f4", "(1,)"), bytes(4)), "is not a dtype"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_NPY))
def test_malformed_npy_headers_are_format_errors(tmp_path: Path, name: str) -> None:
    data, message = MALFORMED_NPY[name]
    path = tmp_path / "bad.npy"
    path.write_bytes(data)
    error = refuses(lambda: read_numpy(path), FormatError, message)
    assert str(path) in str(error)
    refuses(lambda: dataio.io.read(str(path), format="npy"), DecodeError, message)
    with pytest.raises(Exception):  # noqa: B017 - the oracle refuses it too, with builtins
        np.load(io.BytesIO(data), allow_pickle=False).copy()  # copying: the 0x2**62x2**62 case


# -- NPZ / zip ------------------------------------------------------------------------------


def npz_bytes(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as zf:
        for name, data in members.items():  # a fixed time: the same bytes on every run
            zf.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data, compression)
    return out.getvalue()


def zeros_npy(nbytes: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.zeros(nbytes, np.uint8))
    return out.getvalue()


def test_an_inflation_bomb_stops_at_the_ratio_limit(tmp_path: Path) -> None:
    data = npz_bytes({"x.npy": zeros_npy(5 << 20)})  # 5 MiB of zeros in ~5 KiB
    assert len(data) < 16 << 10
    path = tmp_path / "bomb.npz"
    path.write_bytes(data)
    with limits.scoped(inflation_floor_bytes=1 << 20, max_inflation_ratio=100):
        error = refuses(lambda: read_npz(path), LimitError, "max_inflation_ratio=100")
    assert "x.npy" in str(error)
    assert np.array_equal(read_npz(path)["x"], np.load(path)["x"])  # under the defaults


def test_member_size_is_checked_declared_and_inflated(tmp_path: Path) -> None:
    data = npz_bytes({"x.npy": zeros_npy(2 << 20)})
    path = tmp_path / "big.npz"
    path.write_bytes(data)
    with limits.scoped(max_member_bytes=1 << 20):
        refuses(lambda: read_npz(path), LimitError, "declared inflated size")
    # A central directory that understates the size: the stream, not the header, is bounded.
    lied = bytearray(data)
    central = lied.rindex(b"PK\x01\x02")
    struct.pack_into("<I", lied, central + 24, 1000)  # uncompressed size
    local = lied.index(b"PK\x03\x04")
    struct.pack_into("<I", lied, local + 22, 1000)
    with limits.scoped(max_member_bytes=1 << 20):
        refuses(lambda: decode_npz(bytes(lied), source="lied.npz"), FormatError, "lied.npz")


def _corrupt_stream(compression: int) -> bytes:
    noise = np.random.default_rng(0).bytes(64)
    data = bytearray(npz_bytes({"x.npy": zeros_npy(4096) + noise}, compression))
    start = data.index(b"x.npy") + 5 + 8
    data[start : start + 24] = b"\xff" * 24
    return bytes(data)


def _flag_encrypted() -> bytes:
    data = bytearray(npz_bytes({"x.npy": zeros_npy(16)}))
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature)
        data[at + flag_at] |= 1
    return bytes(data)


def _method(method: int) -> bytes:
    data = bytearray(npz_bytes({"x.npy": zeros_npy(16)}))
    for signature, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        struct.pack_into("<H", data, data.index(signature) + at, method)
    return bytes(data)


def _name_not_utf8() -> bytes:
    data = bytearray(npz_bytes({"x.npy": zeros_npy(16)}))
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.index(signature) + flag_at + 1] |= 0x08  # bit 11: the name is UTF-8
    return bytes(data).replace(b"x.npy", b"\xff.npy")


def _header_offset_wraps() -> bytes:
    data = bytearray(npz_bytes({"x.npy": zeros_npy(16)}))
    struct.pack_into("<I", data, data.rindex(b"PK\x01\x02") + 42, 0xFFFF0000)
    return bytes(data)


HOSTILE_ZIP = {
    # what escaped before, by builtin: zlib.error, OSError, LZMAError, RuntimeError,
    # NotImplementedError, UnicodeDecodeError, OSError (negative seek)
    "deflate-corrupt": _corrupt_stream(zipfile.ZIP_DEFLATED),
    "bzip2-corrupt": _corrupt_stream(zipfile.ZIP_BZIP2),
    "lzma-corrupt": _corrupt_stream(zipfile.ZIP_LZMA),
    "encrypted-flag": _flag_encrypted(),
    "unknown-method-99": _method(99),
    "name-not-utf8": _name_not_utf8(),
    "header-offset-wraps": _header_offset_wraps(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ZIP))
def test_hostile_zip_archives_are_format_errors(tmp_path: Path, name: str) -> None:
    data = HOSTILE_ZIP[name]
    path = tmp_path / "hostile.npz"
    path.write_bytes(data)
    # the oracle fails on them too, with builtins
    with pytest.raises(Exception), open(path, "rb") as file, np.load(file) as archive:  # noqa: B017
        [archive[key] for key in archive.files] or archive["x"]
    for read in (
        lambda: read_npz(path),
        lambda: read_npz(path, mmap=False),
        lambda: dataio.io.read(str(path), format="npz"),
    ):
        with pytest.raises(DataioError) as caught:
            read()
        # a corrupt LZMA header may declare a dictionary over max_decoded_bytes
        expected = FormatError | DecodeError | dataio.FieldError | dataio.LimitError
        assert isinstance(caught.value, expected)
        assert str(path) in str(caught.value) or "x" in str(caught.value)


def test_lzma_dictionary_is_checked_before_the_decoder_allocates_it(tmp_path: Path) -> None:
    path = tmp_path / "dictionary.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as archive:
        buffer = io.BytesIO()
        np.save(buffer, np.arange(100, dtype=np.int64))
        archive.writestr("x.npy", buffer.getvalue())
    np.testing.assert_array_equal(read_npz(path)["x"], np.arange(100))
    data = bytearray(path.read_bytes())
    start = 30 + len("x.npy")  # the only member: its local header, then its name
    (declared,) = struct.unpack_from("<I", data, start + 5)
    assert declared == 1 << 23  # the oracle's own preset-6 dictionary, where we read it
    struct.pack_into("<I", data, start + 5, 0xFFFFFFFF)
    path.write_bytes(bytes(data))
    with pytest.raises(dataio.LimitError, match="LZMA dictionary") as caught:
        read_npz(path)
    assert caught.value.value == 0xFFFFFFFF and caught.value.name == "max_decoded_bytes"
    with pytest.raises(dataio.LimitError, match="LZMA dictionary"):
        list(dataio.archive(str(path.rename(tmp_path / "dictionary.zip"))))


# -- safetensors ----------------------------------------------------------------------------


def safetensors_bytes(fields: dict[str, object] | bytes, data: bytes = b"") -> bytes:
    text = fields if isinstance(fields, bytes) else json.dumps(fields).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def tensor(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


HOSTILE_SAFETENSORS = {
    "65-dims": (safetensors_bytes({"w": tensor("F32", [1] * 65, 0, 4)}, bytes(4)), "at most 64"),
    "dim-2e70": (safetensors_bytes({"w": tensor("F32", [2**70], 0, 0)}), "at most 64"),
    # 2**62 * 2**62 elements of nothing: numpy and torch raise ValueError / RuntimeError
    "empty-but-huge": (
        safetensors_bytes({"w": tensor("F32", [0, 2**62, 2**62], 0, 0)}),
        "multiply past 2",
    ),
    # the byte count message formatted bits / 8 as a float: OverflowError
    "bits-overflow-float": (
        safetensors_bytes(
            {"w": tensor("F32", [2**62, 2**62, 2**62, 2**62, 2**62], 0, 4)}, bytes(4)
        ),
        r"which needs [\d,]{100,} bytes, but its data_offsets \[0, 4\]",
    ),
    "f4-odd-bits": (
        safetensors_bytes({"w": tensor("F4", [1, 3], 0, 1)}, bytes(1)),
        "needs 1 bytes and 4 bits",
    ),
    "5000-digit-offset": (
        safetensors_bytes(
            b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + b"9" * 5000 + b"]}}"
        ),
        "invalid safetensors header",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SAFETENSORS))
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_hostile_safetensors_are_format_errors(tmp_path: Path, name: str, framework: str) -> None:
    data, message = HOSTILE_SAFETENSORS[name]
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(data)
    for copy in (False, True):
        error = refuses(
            lambda copy=copy: read_safetensors(path, framework=framework, copy=copy),  # type: ignore[misc]
            FormatError,
            message,
        )
        assert str(path) in str(error)
    if framework == "numpy":
        refuses(lambda: decode_safetensors(data, "w"), FormatError, message)
        refuses(lambda: dataio.io.read(str(path), format="safetensors"), DecodeError, message)


def test_a_low_header_limit_refuses_safetensors_headers(tmp_path: Path) -> None:
    data = safetensors.numpy.save({"w": np.ones(3, np.float32)})
    with limits.scoped(max_header_bytes=16):
        refuses(lambda: decode_safetensors(data), LimitError, "max_header_bytes=16")


# -- .pt ------------------------------------------------------------------------------------

# torch.save's legacy format starts with a pickled magic number; the pickles that follow
# feed torch's weights_only unpickler, which raised IndexError / struct.error on these.
_LEGACY = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19."

HOSTILE_PT = {
    "legacy-binint1-at-eof": _LEGACY + b"\x80\x02K",
    "legacy-binint-short": _LEGACY + b"\x80\x02J\x01",
    "legacy-binunicode-short": _LEGACY + b"\x80\x02X\x05\x00\x00\x00ab",
    "legacy-unknown-opcode": _LEGACY + b"\x80\x02\xff.",
    "zip-without-data-pkl": npz_bytes({"archive/version": b"3\n"}, zipfile.ZIP_STORED),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PT))
def test_hostile_pt_files_are_decode_errors(name: str) -> None:
    data = HOSTILE_PT[name]
    with pytest.raises(Exception):  # noqa: B017 - torch itself raises builtins here
        torch.load(io.BytesIO(data), weights_only=True)
    refuses(lambda: decode_pt(data), DecodeError, "the .pt file")


def test_valid_pt_still_loads() -> None:
    out = io.BytesIO()
    torch.save({"w": torch.arange(6.0)}, out)
    assert torch.equal(decode_pt(out.getvalue())["w"], torch.arange(6.0))


# -- the corpus -----------------------------------------------------------------------------

CORPUS_FILES = {
    "npy": {**ZERO_SIZE, **{k: v[0] for k, v in MALFORMED_NPY.items()}},
    "zip": HOSTILE_ZIP,
    "safetensors": {k: v[0] for k, v in HOSTILE_SAFETENSORS.items()},
    "pt": HOSTILE_PT,
}


@pytest.mark.parametrize("target", sorted(CORPUS_FILES))
def test_corpus_holds_these_inputs(target: str) -> None:
    """The fuzz corpus replays these bytes; keep it in step with the tests."""
    for name, data in CORPUS_FILES[target].items():
        saved = CORPUS / target / name
        assert len(data) < 256 << 10 and saved.read_bytes() == data, saved


def _replay(target: str, path: Path) -> object:
    data = path.read_bytes()
    if target == "pt":
        return decode_pt(data)
    if target == "text":
        return dataio.udfs.text.decode_text(data, path.suffix[1:])
    if target == "json":
        return dataio.udfs.text.decode_json(data)
    if target == "tfrecord":
        return list(dataio.iter_tfrecord(path))
    if target == "npy":
        return read_numpy(path)
    return read_npz(path)  # npz, zip


FOUND = sorted(
    (p.parent.name, p.name)
    for p in CORPUS.glob("*/fuzz-*")
    if p.parent.name in ("npy", "npz", "zip", "pt", "tfrecord", "json", "text")
)


@pytest.mark.parametrize(("target", "name"), FOUND)
def test_inputs_the_fuzzer_found_are_dataio_errors(target: str, name: str) -> None:
    """Found by a tensor-format fuzz campaign against the code before issue #20's fixes,
    each escaping as a builtin (OSError, LZMAError, AssertionError, IndexError, ...)."""
    with pytest.raises(DataioError):
        _replay(target, CORPUS / target / name)


# -- mapped views and truncated files (decision 012) ----------------------------------------


def _child(body: Callable[[], int]) -> int:
    """Run ``body`` in a forked child; return its wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        faulthandler.disable()  # a SIGBUS is expected in some: no traceback dump
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def _truncated_then_summed(path: Path, read: Callable[[Path], dict[str, np.ndarray]]) -> int:
    def body() -> int:
        arrays = read(path)
        os.truncate(path, 0)
        total = sum(float(np.asarray(a, np.float64).sum()) for a in arrays.values())
        return 0 if total == TRUNCATION_SUM else 3

    return _child(body)


TRUNCATION_ARRAY = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)  # 256 KiB, 64 pages
TRUNCATION_SUM = float(TRUNCATION_ARRAY.astype(np.float64).sum())

READERS: dict[str, tuple[str, Callable[[Path, bool], dict[str, np.ndarray]]]] = {
    # name -> (suffix, read(path, copy))
    "read_numpy": (".npy", lambda p, copy: {"x": read_numpy(p, mmap=not copy)}),
    "read_npz": (".npz", lambda p, copy: read_npz(p, mmap=not copy)),
    "read_safetensors numpy": (".safetensors", lambda p, copy: read_safetensors(p, copy=copy)),
    "read_safetensors torch": (
        ".safetensors",
        lambda p, copy: {
            k: v.numpy() for k, v in read_safetensors(p, framework="torch", copy=copy).items()
        },
    ),
}


def _write(path: Path) -> Path:
    if path.suffix == ".npy":
        np.save(path, TRUNCATION_ARRAY)
    elif path.suffix == ".npz":
        np.savez(path, x=TRUNCATION_ARRAY)
    else:
        safetensors.numpy.save_file({"x": TRUNCATION_ARRAY}, str(path))
    return path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_copies_survive_the_file_being_truncated(tmp_path: Path, reader: str) -> None:
    suffix, read = READERS[reader]
    path = _write(tmp_path / f"x{suffix}")
    status = _truncated_then_summed(path, lambda p: read(p, True))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@pytest.mark.parametrize("reader", sorted(READERS))
def test_mapped_views_of_a_truncated_file_die_with_sigbus(tmp_path: Path, reader: str) -> None:
    """The documented risk of the default (mapped) reads: why ``copy=True`` exists."""
    suffix, read = READERS[reader]
    path = _write(tmp_path / f"x{suffix}")
    status = _truncated_then_summed(path, lambda p: read(p, False))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS, status


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_copy_true_reads_the_same_values_writable(tmp_path: Path, framework: str) -> None:
    state = {"a": np.arange(10, dtype=np.float32), "b": np.ones((3, 4), np.int64)}
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(state, str(path))
    copied = read_safetensors(path, framework=framework, copy=True)  # type: ignore[arg-type]
    expected = safetensors.numpy.load_file(str(path))
    for name, value in copied.items():
        array = value if framework == "numpy" else value.numpy()
        assert np.array_equal(array, expected[name]) and array.dtype == expected[name].dtype
        assert array.flags.writeable
