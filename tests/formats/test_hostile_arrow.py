"""Damaged Arrow IPC / Feather / Parquet files: a clear DataioError, never a crash.

Mutated files run in a child process, so a segfault fails the test instead of killing
the run. pyarrow's own reads and ``validate(full=True)`` are the oracles.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import dataio
from dataio.exceptions import DataioError, FormatError, NotFoundError

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
TABLE = pa.table(
    {
        "a": pa.array([1, 2, None, 4], pa.int64()),
        "s": pa.array(["x", "yy", None, "zzzz"]),
        "l": pa.array([[1], [2, 3], None, []], pa.list_(pa.int32())),
    }
)


def _v1_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # V1 writing is deprecated
        feather.write_feather(table, out, version=1)
    return out.getvalue()


def _v2_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    feather.write_feather(table, out, version=2, compression="uncompressed")
    return out.getvalue()


def _stream_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    with pa.ipc.new_stream(out, table.schema) as writer:
        writer.write_table(table)
    return out.getvalue()


def _string_offsets_past_data(data: bytes) -> bytes:
    """The IPC file with the last offset of column ``s`` pointing 8 MB past its data."""
    marker = (7).to_bytes(4, "little")  # offsets of "x","yy",None,"zzzz": 0,1,3,3,7
    at = data.index((3).to_bytes(4, "little") + (3).to_bytes(4, "little") + marker)
    return data[: at + 8] + (8_192_007).to_bytes(4, "little") + data[at + 12 :]


# The child reads each mutated file through every entry point; anything but a clean
# read or a DataioError (a builtin exception, a signal) fails the test.
_CHILD = r"""
import random, sys, warnings
warnings.simplefilter("ignore")
import dataio
kind, seed, n, source = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = open(source, "rb").read()
path = sys.argv[5]
rng = random.Random(seed)
for _ in range(n):
    d = bytearray(data)
    if rng.random() < 0.15:
        d = d[: rng.randrange(len(d))]
    else:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(d))
            d[i] = rng.choice([rng.randrange(256), 0xFF, 0, 0x80, d[i] ^ (1 << rng.randrange(8))])
    open(path, "wb").write(bytes(d))
    calls = [lambda: dataio.read(path, format="feather")]
    if kind == "v2":
        calls += [lambda: dataio.read_feather(path).to_pylist(),
                  lambda: dataio.scan_feather(path).collect()]
    for call in calls:
        try:
            call()
        except dataio.DataioError:
            pass
print("survived")
"""


@pytest.mark.parametrize("kind", ["v1", "v2", "stream"])
def test_mutated_files_never_crash(tmp_path: Path, kind: str) -> None:
    table = TABLE.drop(["l"]) if kind == "v1" else TABLE
    data = {"v1": _v1_bytes, "v2": _v2_bytes, "stream": _stream_bytes}[kind](table)
    source = tmp_path / "source"
    source.write_bytes(data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, "7", "60", str(source), str(tmp_path / "m.arrow")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr[-2000:]


def _run_isolated(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize(
    "name", ["feather/v1-footer-offset-outside-file", "feather/v1-column-length-huge"]
)
def test_damaged_feather_v1_corpus_is_a_format_error(name: str) -> None:
    # These 312-byte files segfaulted dataio.read(format="feather") before the footer check
    code = (
        "import sys, dataio\n"
        "try:\n    dataio.read(sys.argv[1], format='feather')\n"
        "except dataio.DataioError as e:\n    print('refused', type(e).__name__)\n"
    )
    result = _run_isolated(code, str(CORPUS / name))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused DecodeError" in result.stdout


def test_string_offsets_past_data_are_refused_everywhere(tmp_path: Path) -> None:
    data = _string_offsets_past_data(_v2_bytes(TABLE))
    with pytest.raises(pa.ArrowInvalid):  # the oracle: pyarrow's full validation
        pa.ipc.open_file(pa.py_buffer(data)).read_all().validate(full=True)
    path = tmp_path / "bad.arrow"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=r"bad\.arrow"):
        dataio.read_feather(path)
    with pytest.raises(FormatError, match=r"bad\.arrow"):
        dataio.scan_feather(path).collect()
    with pytest.raises(FormatError, match=r"bad\.arrow"):
        dataio.scan_feather(path).filter("a > 1").collect()
    with pytest.raises(DataioError, match=r"bad\.arrow"):
        dataio.read(str(path), format="feather")


def test_listing_scan_validates_every_file(tmp_path: Path) -> None:
    good = _v2_bytes(TABLE)
    (tmp_path / "a.arrow").write_bytes(good)
    (tmp_path / "b.arrow").write_bytes(_string_offsets_past_data(good))
    frame = dataio.scan_feather(str(tmp_path / "*.arrow")).filter("a > 0")
    with pytest.raises(FormatError, match=r"b\.arrow"):
        frame.collect()


@pytest.mark.parametrize("kind", ["v1", "v2", "stream"])
def test_valid_files_still_read_as_pyarrow_does(tmp_path: Path, kind: str) -> None:
    table = TABLE.drop(["l"]) if kind == "v1" else TABLE
    data = {"v1": _v1_bytes, "v2": _v2_bytes, "stream": _stream_bytes}[kind](table)
    path = tmp_path / "t.feather"
    path.write_bytes(data)
    assert dataio.read(str(path), format="feather").to_pylist() == table.to_pylist()
    if kind == "v2":
        assert dataio.read_feather(path).equals(feather.read_table(path))
        assert dataio.scan_feather(path).collect().to_pylist() == table.to_pylist()


_UNREADABLE = r"""
import os, sys
import dataio, dataio.engine.run, dataio.formats._arrow, datafusion, pyarrow.parquet
if os.geteuid() == 0:
    os.setuid(65534)  # root reads any file whatever its mode: test as nobody
for path in sys.argv[1:]:
    scan = dataio.scan_parquet if path.endswith("parquet") else dataio.scan_feather
    try:
        scan(path).collect()
    except dataio.DataioError as exc:
        print(type(exc).__name__, exc)
"""


def test_unreadable_file_is_permission_denied() -> None:
    directory = Path(tempfile.mkdtemp(prefix="dataio-perm-"))
    try:
        directory.chmod(0o755)  # nobody may list it but not read the files
        paths = [directory / "t.parquet", directory / "t.arrow"]
        pq.write_table(TABLE, paths[0])
        paths[1].write_bytes(_v2_bytes(TABLE))
        for path in paths:
            path.chmod(0)
        result = _run_isolated(_UNREADABLE, *map(str, paths))
        lines = result.stdout.splitlines()
        assert len(lines) == 2, result.stderr[-2000:]
        for line, path in zip(lines, paths, strict=True):
            assert line.startswith("PermissionDeniedError") and repr(str(path)) in line, line
            assert "corrupt" not in line
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize("scan", [dataio.scan_parquet, dataio.scan_feather])
def test_directory_and_fifo_are_clear_errors(tmp_path: Path, scan: object) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    fifo = tmp_path / "pipe.arrow"
    os.mkfifo(fifo)  # opening it for reading would block forever
    with pytest.raises(FormatError, match=r"pipe\.arrow.*not a regular file"):
        scan(fifo).collect()  # type: ignore[operator]
    with pytest.raises(NotFoundError, match="holds no"):
        scan(empty).collect()  # type: ignore[operator]


def test_parquet_footer_errors_are_dataio_errors(tmp_path: Path) -> None:
    out = io.BytesIO()
    pq.write_table(TABLE, out)
    data = bytearray(out.getvalue())
    footer_len = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer_len + 20] ^= 0xFF  # damage the footer's thrift
    path = tmp_path / "bad.parquet"
    path.write_bytes(out.getvalue())
    frame = dataio.scan_parquet(path)  # planned over the good file, damaged below
    path.write_bytes(bytes(data))
    with pytest.raises((pa.ArrowException, OSError)):
        pq.read_table(path)  # the oracle refuses it too
    with pytest.raises(FormatError, match=r"bad\.parquet"):
        dataio.scan_parquet(path).collect()
    with pytest.raises(FormatError, match=r"bad\.parquet"):
        frame.length()
    with pytest.raises(DataioError, match=r"bad\.parquet"):
        dataio.read(str(path), format="parquet")


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        dataio.scan_feather(tmp_path / "nope.arrow").collect()
