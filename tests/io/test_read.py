"""``read_bytes``: the function pipelines read through, on every scheme."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dataio
import dataio.io as dio
from dataio.exceptions import DataioError, NotFoundError


def uint8_pipe() -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=32, w=48).output(layout="CHW"),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
    )


def collect(records: list[dict[str, object]]) -> tuple[np.ndarray, list[int]]:
    images, labels = [], []
    for batch in uint8_pipe().bind(records).run("numpy"):
        images.append(np.asarray(batch["image"]))
        labels.extend(np.asarray(batch["label"]).tolist())
    return np.concatenate(images), labels


def test_a_pipeline_reads_s3_images_unchanged(s3: str, jpeg_paths: list[Path]) -> None:
    paths = jpeg_paths[:8]
    local = [{"image": str(p), "label": i} for i, p in enumerate(paths)]
    remote = []
    for i, p in enumerate(paths):
        uri = f"{s3}/images/{p.name}"
        dio.write(uri, p.read_bytes())
        remote.append({"image": uri, "label": i})
    local_images, local_labels = collect(local)
    remote_images, remote_labels = collect(remote)
    assert remote_labels == local_labels == list(range(8))
    np.testing.assert_array_equal(remote_images, local_images)


def test_read_bytes_on_every_backend(base: str) -> None:
    dio.write(f"{base}/x.bin", b"abc")
    assert dio.read_bytes(f"{base}/x.bin") == b"abc"
    with pytest.raises(NotFoundError):
        dio.read_bytes(f"{base}/y.bin")


def test_read_bytes_of_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataioError, match="directory"):
        dio.read_bytes(tmp_path)


def test_read_bytes_local_path_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(range(256)) * 4099  # not a multiple of any buffer size
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    monkeypatch.chdir(tmp_path)
    for form in (str(path), path, "blob.bin", path.as_uri(), f"file://{path}"):
        assert dio.read_bytes(form) == data, form
    (tmp_path / "empty").write_bytes(b"")
    assert dio.read_bytes(str(tmp_path / "empty")) == b""
    with pytest.raises(DataioError, match="directory"):
        dio.read_bytes(str(tmp_path))
    with pytest.raises(NotFoundError):
        dio.read_bytes(str(tmp_path / "missing.bin"))


def test_read_bytes_of_a_file_whose_size_stat_does_not_know() -> None:
    # /proc files report size 0 to stat but have content: read until the end
    text = dio.read_bytes("/proc/self/status")
    assert text.startswith(b"Name:") and b"\nPid:" in text
