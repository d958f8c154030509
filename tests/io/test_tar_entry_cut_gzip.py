"""``reader(...).tar_entry`` on a file cut inside its gzip header (found by the tar fuzz
target: tarfile's stream mode calls ``ord(b"")`` there and raised a TypeError)."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

import dataio
from dataio.exceptions import DecodeError


@pytest.mark.parametrize("keep", [2, 3, 5, 9])
def test_a_cut_gzip_header_is_a_decode_error_naming_the_file(tmp_path: Path, keep: int) -> None:
    member = io.BytesIO()
    with tarfile.open(fileobj=member, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(gzip.compress(member.getvalue())[:keep])
    # the oracle: tarfile refuses it too
    with pytest.raises((tarfile.TarError, EOFError)), tarfile.open(path, "r:gz") as tar:
        tar.getmembers()
    with pytest.raises(DecodeError, match=r"cut\.tar\.gz"):
        dataio.reader(str(path)).tar_entry("a.txt").read_all()
