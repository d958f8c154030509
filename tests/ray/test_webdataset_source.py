"""``from_source`` of WebDataset shards: read tasks per run of shards, driver reads counts.

Oracles: the local loader over the same ``dataio.webdataset`` source (values, order,
positions) and ``tarfile`` (what the shards hold). Started only inside a namespace with
nothing but ``lo``.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
import dataio.ray
from dataio.sources.archives import ArchiveSource

SHARDS = (5, 0, 7, 6)  # samples per shard; an empty one among them


def _jpeg(rng: np.random.Generator) -> bytes:
    h, w = (int(v) for v in rng.integers(24, 48, 2))
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture
def shards(tmp_path: Path) -> str:
    rng = np.random.default_rng(5)
    n = 0
    for s, count in enumerate(SHARDS):
        with tarfile.open(tmp_path / f"shard-{s}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(count):
                for field, data in (("jpg", _jpeg(rng)), ("cls", str(n % 3).encode())):
                    info = tarfile.TarInfo(f"s{n:04d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
    return str(tmp_path / "shard-{0..3}.tar")


def _pipe() -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image", field="jpg").decode_image().random_resized_crop(h=16, w=16),
        dataio.slot("cls").passthrough(),
        dataio.batch(4),
    )


def _table(ds) -> pa.Table:
    return pa.concat_tables(
        [pa.table(b) for b in ds.iter_batches(batch_format="pyarrow", batch_size=None)]
    )


def _tasks_run(ds) -> int:
    found = re.search(r"Read\w*: (\d+) tasks executed", ds.stats())
    assert found, ds.stats()
    return int(found.group(1))


def _check_equal_to_local(source: ArchiveSource, ds) -> None:
    samples = list(source)  # the oracle: the local source, in stream order
    got = _table(ds)
    assert got.column_names == ["__key__", "__url__", "jpg", "cls", "__position__"]
    assert got["__position__"].to_pylist() == list(range(sum(SHARDS)))
    assert got["__key__"].to_pylist() == [s["__key__"] for s in samples]
    assert got["jpg"].to_pylist() == [s["jpg"] for s in samples]
    out = _table(dataio.ray.map_pipeline(ds, _pipe(), seed=3, cpus_per_actor=0.5))
    with _pipe().bind(source).run("arrow", seed=3) as loader:
        want = pa.Table.from_batches(list(loader))
    assert out["__index__"].to_pylist() == want["__index__"].to_pylist()
    assert out["__key__"].to_pylist() == want["__key__"].to_pylist()
    assert out["cls"].to_pylist() == want["cls"].to_pylist()
    image = out["image"].combine_chunks()
    pixels = image.to_numpy_ndarray() if hasattr(image, "to_numpy_ndarray") else image.to_numpy()
    np.testing.assert_array_equal(pixels, want["image"].combine_chunks().to_numpy_ndarray())


def _count_driver_samples(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the samples the driver (this process) reads from shards."""
    read = [0]
    original = ArchiveSource.iterate

    def counted(self):
        for sample in original(self):
            read[0] += 1
            yield sample

    monkeypatch.setattr(ArchiveSource, "iterate", counted)
    return read


def test_shards_without_an_index_are_counted_on_ray(ray_session, shards, monkeypatch) -> None:
    read = _count_driver_samples(monkeypatch)
    ds = dataio.ray.from_source(dataio.webdataset(shards), blocks=2).materialize()
    assert read[0] == 1  # the driver read the first sample's fields, nothing else
    assert _tasks_run(ds) == 2
    monkeypatch.undo()
    _check_equal_to_local(dataio.webdataset(shards), ds)


def test_shards_with_an_index_use_its_counts(ray_session, shards, monkeypatch) -> None:
    index = dataio.write_webdataset_index(shards)
    read = _count_driver_samples(monkeypatch)
    ds = dataio.ray.from_source(dataio.webdataset(shards)).materialize()
    assert read[0] == 1
    assert _tasks_run(ds) == len(SHARDS)  # one task per shard by default
    monkeypatch.undo()
    _check_equal_to_local(dataio.webdataset(shards), ds)

    # the counts come from the index: an index that lies fails the shard's read task
    doc = json.loads(Path(index).read_text())
    doc["shardlist"][2]["nsamples"] += 1
    Path(index).write_text(json.dumps(doc))
    with pytest.raises(Exception, match=r"shard-2\.tar' holds 7 samples, but the index"):
        _table(dataio.ray.from_source(dataio.webdataset(shards)))


def test_a_corrupt_shard_fails_its_read_task_naming_it(ray_session, shards) -> None:
    path = Path(shards.replace("{0..3}", "2"))
    data = bytearray(path.read_bytes())
    data[600:1100] = b"\x00" * 500  # the header of the second member zeroed: a truncated tar
    path.write_bytes(bytes(data[:1100]))
    with pytest.raises(Exception, match=r"shard-2\.tar"):
        _table(dataio.ray.from_source(dataio.webdataset(shards)))
