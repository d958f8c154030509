"""Hostile manifests: every failure is a DataioError naming the file, never csv.Error,
UnicodeDecodeError, RecursionError or an Arrow exception."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
from dataio.exceptions import DataioError, FormatError

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "csv_manifest"

HOSTILE_CSV = {
    "field-over-csv-limit": b"key,path\na," + b"x" * 200_000 + b"\n",
    "not-utf8": b"key,path\n\xff\xfe,b.jpg\n",
    "unterminated-quote-over-csv-limit": b'key,path\n"a,' + b"y\n" * 70_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_CSV))
def test_hostile_csv_is_a_format_error(tmp_path: Path, name: str) -> None:
    data = HOSTILE_CSV[name]
    assert (CORPUS / name).read_bytes() == data  # the fuzz corpus replays the same bytes
    with pytest.raises((csv.Error, UnicodeDecodeError)):  # the oracle: csv refuses it
        list(csv.DictReader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")))
    path = tmp_path / "m.csv"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=r"m\.csv"):
        dataio.manifest(path).rows()


def test_deeply_nested_jsonl_is_a_dataio_error(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(RecursionError):
        json.loads(path.read_text())  # the oracle overflows the stack
    with pytest.raises(DataioError, match=r"m\.jsonl.*line 1"):
        dataio.manifest(path).rows()


def test_damaged_parquet_manifest_is_a_format_error(tmp_path: Path) -> None:
    out = io.BytesIO()
    pq.write_table(pa.table({"key": ["a", "b"], "path": ["a.jpg", "b.jpg"]}), out)
    data = bytearray(out.getvalue())
    footer = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer + 20] ^= 0xFF
    path = tmp_path / "m.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises((pa.ArrowException, OSError)):
        pq.read_table(path)
    with pytest.raises(FormatError, match=r"m\.parquet"):
        dataio.manifest(path).rows()
    path.write_bytes(b"PAR1" + b"\x00" * 20 + b"PAR1")
    with pytest.raises(FormatError, match=r"m\.parquet"):
        dataio.manifest(path).rows()


def test_directory_manifest_is_a_dataio_error(tmp_path: Path) -> None:
    (tmp_path / "m.csv").mkdir()
    with pytest.raises(DataioError, match=r"m\.csv.*not a regular file"):
        dataio.manifest(tmp_path / "m.csv").rows()


_UNREADABLE = r"""
import os, sys
import dataio, dataio.sources.files, pyarrow.parquet, csv
if os.geteuid() == 0:
    os.setuid(65534)  # root reads any file whatever its mode: test as nobody
try:
    dataio.manifest(sys.argv[1]).rows()
except dataio.DataioError as exc:
    print(type(exc).__name__, exc)
"""


def test_unreadable_manifest_is_permission_denied() -> None:
    directory = Path(tempfile.mkdtemp(prefix="dataio-perm-"))
    try:
        directory.chmod(0o755)
        path = directory / "m.csv"
        path.write_text("key,path\na,a.jpg\n")
        path.chmod(0)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        result = subprocess.run(
            [sys.executable, "-c", _UNREADABLE, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert result.stdout.startswith("PermissionDeniedError"), result.stderr[-2000:]
        assert repr(str(path)) in result.stdout
    finally:
        shutil.rmtree(directory)
