"""dataio on Ray Data against local oracles: the frame's collect(), the local loader.

Started only inside a namespace with nothing but ``lo`` (see conftest.py).
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from ray import cloudpickle

import dataio
import dataio.ray

# the record maps defined here travel to Ray's workers by value (they cannot import
# this test module)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FILES = 3
ROWS = 12  # per file
BAD = 17  # this frame position holds a truncated JPEG


def _jpeg(rng: np.random.Generator) -> bytes:
    h, w = (int(v) for v in rng.integers(36, 64, 2))
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(11)
    for f in range(FILES):
        ids = np.arange(f * ROWS, (f + 1) * ROWS)
        images = [_jpeg(rng) for _ in ids]
        if f * ROWS <= BAD < (f + 1) * ROWS:
            images[BAD - f * ROWS] = b"\xff\xd8\xff\xe0 truncated"
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "jpeg": pa.array(images, pa.binary()),
                "key": [f"r{i:03d}" for i in ids],
            }
        )
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=4)
    return root


def _frame(shards: Path) -> dataio.LazyFrame:
    return dataio.scan_parquet(str(shards / "*.parquet")).with_columns(label=dataio.col("id") * 10)


def _pipe() -> dataio.Pipeline:
    image = (
        dataio.slot("image", field="jpeg")
        .decode_image()
        .random_resized_crop(h=20, w=20, scale=(0.3, 1.0))
        .random_flip()
        .normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    )
    return dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(5))


def _table(ds) -> pa.Table:
    return pa.concat_tables(
        [pa.table(b) for b in ds.iter_batches(batch_format="pyarrow", batch_size=None)]
    )


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    for name in want.column_names:
        g, w = got[name].combine_chunks(), want[name].combine_chunks()
        if isinstance(w.type, pa.FixedShapeTensorType):
            np.testing.assert_array_equal(_tensor(g), w.to_numpy_ndarray())
        else:
            assert g.to_pylist() == w.to_pylist(), name


def _tensor(column) -> np.ndarray:
    if isinstance(column.type, pa.FixedShapeTensorType):
        return column.to_numpy_ndarray()
    return column.to_numpy()  # Ray's own tensor type


def test_to_ray_gives_the_frames_rows_in_order_with_positions(ray_session, shards) -> None:
    frame = _frame(shards).filter(dataio.col("id") % 3 != 1).select("id", "label", "key")
    got = _table(frame.to_ray(parallelism=2))
    want = frame.collect()
    assert got.column_names == [*want.column_names, "__position__"]
    assert got.drop_columns(["__position__"]).equals(want)
    assert got["__position__"].to_pylist() == list(range(want.num_rows))


@pytest.mark.parametrize(("seed", "epoch"), [(0, 0), (9, 2)])
def test_map_pipeline_equals_the_local_loader(ray_session, shards, seed, epoch) -> None:
    frame = _frame(shards)
    ds = dataio.ray.map_pipeline(
        frame.to_ray(),
        _pipe(),
        seed=seed,
        epoch=epoch,
        actors=2,
        cpus_per_actor=0.5,
        batch_size=7,
        on_failure="skip",
    )
    got = _table(ds)
    with _pipe().bind(frame).run("arrow", seed=seed, epoch=epoch, on_failure="skip") as loader:
        want = pa.Table.from_batches(list(loader))
    assert BAD not in got["__index__"].to_pylist()  # skipped, as locally
    assert got.num_rows == FILES * ROWS - 1
    _same(got, want)


def test_strict_fails_the_job_naming_the_record(ray_session, shards) -> None:
    ds = dataio.ray.map_pipeline(_frame(shards).to_ray(), _pipe(), cpus_per_actor=0.5)
    with pytest.raises(Exception, match=rf"key='r{BAD:03d}' index={BAD} slot='image'"):
        _table(ds)


def test_two_rank_feeds_are_disjoint_complete_and_equal(ray_session, shards) -> None:
    frame = _frame(shards).filter((dataio.col("id") != BAD) & (dataio.col("id") != 0))
    ds = dataio.ray.map_pipeline(frame.to_ray(), _pipe(), seed=3, cpus_per_actor=0.5)
    feeds = [dataio.ray.train_feed(ds, rank, 2, batch_size=4) for rank in range(2)]
    seen: list[list[dataio.Batch]] = [[], []]

    def consume(rank: int) -> None:
        seen[rank] = list(feeds[rank])

    threads = [threading.Thread(target=consume, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    with _pipe().bind(frame).run("numpy", seed=3) as loader:
        local = list(loader)
    by_index = {
        i: (b["image"][row], b.row_keys[row]) for b in local for row, i in enumerate(b.indices)
    }
    counts = [sum(len(b) for b in batches) for batches in seen]
    assert counts == [(FILES * ROWS - 2) // 2] * 2  # an even count: equal=True drops none
    indices = [i for batches in seen for b in batches for i in b.indices]
    assert len(indices) == len(set(indices))  # disjoint
    assert set(indices) == set(by_index)  # complete
    for batches in seen:
        for b in batches:
            assert isinstance(b["image"], np.ndarray)
            assert b["image"].shape[1:] == (3, 20, 20)  # normalize gives CHW
            for row, i in enumerate(b.indices):
                np.testing.assert_array_equal(b["image"][row], by_index[i][0])
                assert b.row_keys[row] == by_index[i][1]


def test_to_ray_prunes_row_groups_a_filter_excludes(ray_session, tmp_path) -> None:
    """Row group 0's pages are garbage: only a read that skips it by statistics works."""
    path = tmp_path / "sorted.parquet"
    ids = np.arange(30, dtype=np.int64)
    pq.write_table(
        pa.table({"id": ids, "v": ids * 2.0}), path, row_group_size=10, compression="none"
    )
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    for c in range(meta.num_columns):
        chunk = meta.row_group(0).column(c)
        # the chunk's pages start at its dictionary page, when it has one
        start = (
            chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        )
        data[start : start + chunk.total_compressed_size] = b"\xee" * chunk.total_compressed_size
    path.write_bytes(bytes(data))

    kept = dataio.scan_parquet(str(path)).filter(dataio.col("id") >= 12)
    got = _table(kept.to_ray())
    assert got["id"].to_pylist() == list(range(12, 30))
    assert got["v"].to_pylist() == [2.0 * i for i in range(12, 30)]
    assert got["__position__"].to_pylist() == list(range(18))
    with pytest.raises(Exception, match=r"sorted\.parquet"):
        _table(dataio.scan_parquet(str(path)).to_ray())  # reads row group 0: fails


def test_train_feed_torch_output(ray_session, shards) -> None:
    torch = pytest.importorskip("torch")
    frame = _frame(shards).filter(dataio.col("id") < 8)
    ds = dataio.ray.map_pipeline(frame.to_ray(), _pipe(), seed=1, cpus_per_actor=0.5)
    batches = list(dataio.ray.train_feed(ds, batch_size=3, output="torch"))
    assert [len(b) for b in batches] == [3, 3, 2]
    with _pipe().bind(frame).run("torch", seed=1) as loader:
        local = list(loader)
    got = torch.cat([b["image"] for b in batches])
    want = torch.cat([b["image"] for b in local])
    assert torch.equal(got, want)
    assert torch.equal(torch.cat([b["label"] for b in batches]), torch.arange(8) * 10)
    assert [i for b in batches for i in b.indices] == list(range(8))


def _kill_once(marker: str, at: int):
    """A record map that SIGKILLs its actor's process at record ``id == at``, once."""

    def kill(record):
        if record["id"] == at and not os.path.exists(marker):
            Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return record

    return kill


def test_a_worker_killed_mid_job_is_recovered_complete_and_ordered(
    ray_session, shards, tmp_path
) -> None:
    marker = str(tmp_path / "killed")
    frame = _frame(shards).filter(dataio.col("id") != BAD)
    killer = dataio.map(_kill_once(marker, at=20))
    pipe = dataio.pipeline(killer, *_pipe().slots, dataio.batch(5))
    ds = dataio.ray.map_pipeline(
        frame.to_ray(), pipe, seed=4, actors=2, cpus_per_actor=0.5, batch_size=4
    )
    got = _table(ds)
    assert os.path.exists(marker)  # an actor did die
    with _pipe().bind(frame).run("arrow", seed=4) as loader:
        want = pa.Table.from_batches(list(loader))
    _same(got, want)


def test_from_source_of_a_shuffled_file_list_equals_the_local_loader(ray_session, tmp_path) -> None:
    rng = np.random.default_rng(8)
    rows = []
    for i in range(14):
        path = tmp_path / f"{i:02d}.jpg"
        path.write_bytes(_jpeg(rng))
        rows.append({"jpeg": str(path), "id": i, "key": f"f{i}"})
    source = dataio.records(rows).shuffle(seed=6)
    pipe = dataio.pipeline(
        dataio.slot("image", field="jpeg").decode_image().random_resized_crop(h=12, w=12),
        dataio.slot("id").passthrough(),
        dataio.batch(4),
    )
    for epoch in (0, 1):
        ds = dataio.ray.from_source(source, epoch=epoch, blocks=3)
        got = _table(dataio.ray.map_pipeline(ds, pipe, seed=2, epoch=epoch, cpus_per_actor=0.5))
        with pipe.bind(source).run("arrow", seed=2, epoch=epoch) as loader:
            want = pa.Table.from_batches(list(loader))
        _same(got, want)
        assert sorted(got["id"].to_pylist()) == list(range(14))


def test_an_error_column_keeps_the_rejects_in_the_dataset(ray_session, shards) -> None:
    frame = _frame(shards)
    ds = dataio.ray.map_pipeline(
        frame.to_ray(), _pipe(), seed=5, on_failure="skip", errors="column", batch_size=8
    )
    got = _table(ds)
    assert got["__index__"].to_pylist() == list(range(FILES * ROWS))
    bad = got.filter(pa.compute.is_valid(got["__error__"]))
    assert bad["__index__"].to_pylist() == [BAD]
    assert bad["__key__"].to_pylist() == [f"r{BAD:03d}"]
    assert bad["__error__"][0].as_py().startswith("DecodeError: ")
    with _pipe().bind(frame).run("arrow", seed=5, on_failure="skip") as loader:
        want = pa.Table.from_batches(list(loader))
    good = got.filter(pa.compute.is_null(got["__error__"])).drop_columns(["__error__"])
    _same(good, want)
