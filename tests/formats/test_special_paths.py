"""Tensor-file readers open local paths as regular files only: a FIFO, a device or a
directory is refused by name (without blocking), and OS errors are DataioErrors."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dataio
from dataio.exceptions import DataioError, NotFoundError, PermissionDeniedError

READERS: dict[str, Callable[[str], Any]] = {
    "read_numpy": dataio.read_numpy,
    "read_numpy copy": lambda p: dataio.read_numpy(p, mmap=False),
    "read_npz": dataio.read_npz,
    "read_safetensors": dataio.read_safetensors,
    "open_safetensors": lambda p: dataio.open_safetensors(p).close(),
    "iter_tfrecord": lambda p: list(dataio.iter_tfrecord(p)),
}


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "data.npy"
    os.mkfifo(path)  # no writer ever opens it: a blocking open would hang the test
    return str(path)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_fifo_is_refused_without_blocking(fifo: str, reader: str) -> None:
    with pytest.raises(DataioError, match="FIFO") as info:
        READERS[reader](fifo)
    assert repr(fifo) in str(info.value)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_device_and_directory_are_refused(tmp_path: Path, reader: str) -> None:
    with pytest.raises(DataioError, match="character device"):
        READERS[reader]("/dev/zero")
    with pytest.raises(DataioError, match="directory"):
        READERS[reader](str(tmp_path))


@pytest.mark.parametrize("reader", sorted(READERS))
def test_missing_nul_and_denied_paths_are_dataio_errors(
    tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(NotFoundError):
        READERS[reader](str(tmp_path / "missing"))
    with pytest.raises(NotFoundError, match="NUL"):
        READERS[reader](str(tmp_path / "a\0b"))
    path = tmp_path / "x.npy"
    np.save(path, np.arange(3))

    def denied(*args: Any, **kwargs: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)  # tests run as root: chmod would not deny
    with pytest.raises(PermissionDeniedError):
        READERS[reader](str(path))
