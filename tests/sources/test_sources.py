"""Every source kind through one contract: order, shuffle, shards, concurrency, resume."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume, stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataio

N = 23  # not a multiple of batch sizes or world sizes used below


class Bulk:
    """A map-style dataset with a bulk read, counting calls."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.bulk_calls: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        self.bulk_calls.append(list(indices))
        return [self.rows[i] for i in indices]


class Reusable:
    """An iterable with an explicit ``__iter__``: every pass starts over."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def make_rows(images: list[bytes], n: int = N) -> list[dict]:
    return [{"v": i, "key": f"k{i}", "image": images[i % len(images)]} for i in range(n)]


def write_tar(path: Path, rows: list[dict]) -> Path:
    with tarfile.open(path, "w") as tar:
        for row in rows:
            for field, data in (("jpg", row["image"]), ("cls", str(row["v"]).encode())):
                info = tarfile.TarInfo(f"{row['key']}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def tar_record(sample: dict) -> dict:
    return {"v": int(sample["cls"]), "key": sample["__key__"], "image": sample["jpg"]}


def source_kinds(images: list[bytes], tmp: Path) -> dict[str, Callable[[], Any]]:
    """Factories for each source kind over the same N records, in the same order."""
    rows = make_rows(images)
    (tmp / "rows.jsonl").write_text(
        "\n".join(json.dumps({"v": r["v"], "key": r["key"]}) for r in rows)
    )
    with open(tmp / "rows.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["v", "key"])
        writer.writeheader()
        writer.writerows({"v": r["v"], "key": r["key"]} for r in rows)
    pq.write_table(
        pa.Table.from_pylist([{"v": r["v"], "key": r["key"]} for r in rows]), tmp / "rows.parquet"
    )
    write_tar(tmp / "shard-0.tar", rows[:10])
    write_tar(tmp / "shard-1.tar", rows[10:])
    with zipfile.ZipFile(tmp / "all.zip", "w") as archive:
        for row in rows:
            archive.writestr(f"{row['key']}.jpg", row["image"])
            archive.writestr(f"{row['key']}.cls", str(row["v"]))
    by_v = {r["v"]: r for r in rows}

    def attach(record: dict) -> dict:
        v = int(record["v"])
        return {"v": v, "key": record["key"], "image": by_v[v]["image"]}

    def expand(record: dict) -> list[dict]:
        return [attach(record)]

    return {
        "list": lambda: rows,
        "indexed-bulk": lambda: dataio.records(Bulk(rows), indexed=True),
        "iterable": lambda: Reusable(rows),
        "factory": lambda: lambda: iter(rows),
        "from_callable": lambda: dataio.from_callable(lambda: iter(rows)),
        "from_iterable": lambda: dataio.from_iterable(iter(rows)),
        "from_iterator": lambda: dataio.from_iterator(r for r in rows),
        "jsonl": lambda: dataio.manifest(tmp / "rows.jsonl").map_records(attach),
        "csv": lambda: dataio.manifest(tmp / "rows.csv").map_records(attach),
        "parquet": lambda: dataio.manifest(tmp / "rows.parquet").map_records(attach),
        "webdataset": lambda: dataio.webdataset(str(tmp / "shard-{0..1}.tar")).map_records(
            tar_record
        ),
        "zip": lambda: dataio.archive(tmp / "all.zip").map_records(tar_record),
        "concat": lambda: dataio.records(rows[:7]).concat(Reusable(rows[7:15]), rows[15:]),
        "flat_map": lambda: dataio.records(rows).flat_map_records(expand),
        "filter": lambda: dataio.records([*rows, {"v": -1}]).filter(lambda r: r["v"] >= 0),
    }


def pipe(size: int = 4) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image").decode_image().random_crop(h=16, w=16).random_flip(),
        dataio.slot("v").passthrough(),
        dataio.batch(size, prefetch=2),
    )


@pytest.fixture(scope="module")
def kinds(tiny_images, tmp_path_factory) -> dict[str, Callable[[], Any]]:
    return source_kinds(tiny_images, tmp_path_factory.mktemp("kinds"))


KINDS = [
    "list", "indexed-bulk", "iterable", "factory", "from_callable", "from_iterable",
    "from_iterator", "jsonl", "csv", "parquet", "webdataset", "zip", "concat", "flat_map",
    "filter",
]  # fmt: skip
REUSABLE = [k for k in KINDS if k not in ("from_iterable", "from_iterator")]


def values(loader: dataio.Loader) -> list[int]:
    return [v for batch in loader for v in batch["v"]]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_gives_the_records_in_order(kinds, kind) -> None:
    assert values(pipe().bind(kinds[kind]()).run()) == list(range(N))


@pytest.mark.parametrize("kind", REUSABLE)
def test_same_stream_for_concurrency_1_2_8(kinds, kind) -> None:
    streams = [stream(pipe().bind(kinds[kind]()).run(seed=5, concurrency=c)) for c in (1, 2, 8)]
    assert streams[0] == streams[1] == streams[2]


@pytest.mark.parametrize("kind", REUSABLE)
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(after=st.integers(0, 7), size=st.sampled_from([3, 4, 7]), epoch=st.integers(0, 3))
def test_resume_equals_the_uninterrupted_stream(kinds, kind, after, size, epoch) -> None:
    source = kinds[kind]()

    def make_loader(**options: Any) -> dataio.Loader:
        return pipe(size).bind(source).run(seed=9, **options)

    check_resume(make_loader, after, epoch=epoch)


@pytest.mark.parametrize("kind", ["list", "indexed-bulk", "iterable", "webdataset", "flat_map"])
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world=st.integers(1, 5), size=st.sampled_from([2, 3, 5]), pad=st.booleans(), drop=st.booleans()
)
def test_shards_are_disjoint_cover_and_agree_on_batch_counts(
    kinds, kind, world, size, pad, drop
) -> None:
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(size, drop_last=drop))
    ranks = []
    for rank in range(world):
        loader = plan.bind(kinds[kind]()).run(shard={"id": rank, "of": world, "pad": pad})
        ranks.append([(b.indices, b["v"].tolist()) for b in loader])
    counts = {len(r) for r in ranks}
    assert len(counts) == 1, f"ranks got different batch counts {counts}"
    seen = [v for r in ranks for _, vs in r for v in vs]
    rounds, rest = divmod(N, world)
    per_rank = rounds + (1 if rest and pad else 0)
    if not drop:
        assert len(seen) == per_rank * world
        unique = set(seen)
        if pad:
            assert unique == set(range(N))  # every record somewhere; repeats only as padding
        else:
            assert unique == set(range(rounds * world)) and len(seen) == len(unique)
    if kind in ("list", "indexed-bulk"):
        assert len(ranks[0]) == len(
            plan.bind(kinds[kind]()).run(shard={"id": 0, "of": world, "pad": pad})
        )


@settings(max_examples=10, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, 2**32), other=st.integers(0, 2**32))
def test_full_shuffle_of_an_indexed_source_is_a_seeded_permutation(n, seed, other) -> None:
    source = dataio.records(list(range(n)))
    order = list(source.shuffle(seed=seed))
    assert sorted(order) == list(range(n))
    assert list(source.shuffle(seed=seed)) == order
    if n >= 20 and other != seed:
        assert list(source.shuffle(seed=other)) != order


@settings(max_examples=10, deadline=None)
@given(n=st.integers(0, 200), buffer=st.integers(1, 50), seed=st.integers(0, 1000))
def test_buffered_shuffle_is_a_permutation_even_single_pass(n, buffer, seed) -> None:
    once = dataio.from_iterator(iter(range(n))).shuffle(seed=seed, buffer_size=buffer)
    order = list(once)
    assert sorted(order) == list(range(n))
    assert list(dataio.records(list(range(n))).shuffle(seed=seed, buffer_size=buffer)) == order
    # a record never moves earlier than buffer_size places before its position
    assert all(order.index(v) >= v - buffer for v in order)


def test_shuffled_sources_resume_and_keep_order_across_concurrency(kinds) -> None:
    for shuffled in (
        dataio.records(kinds["list"]()).shuffle(seed=3),
        dataio.records(Reusable(kinds["list"]())).shuffle(seed=3),
        dataio.records(kinds["list"]()).shuffle(seed=3, buffer_size=5),
    ):
        got = values(pipe().bind(shuffled).run())
        assert sorted(got) == list(range(N)) and got != list(range(N))

        def make_loader(source=shuffled, **options: Any) -> dataio.Loader:
            return pipe().bind(source).run(seed=1, **options)

        check_resume(make_loader, 2)


def test_unbuffered_indexed_shuffle_forwards_remapped_indices_to_bulk(kinds) -> None:
    dataset = Bulk(kinds["list"]())
    source = dataio.records(dataset, indexed=True).shuffle(seed=4)
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(5))
    got = values(plan.bind(source).run())
    assert [v for call in dataset.bulk_calls for v in call] == got
    assert [len(c) for c in dataset.bulk_calls] == [5, 5, 5, 5, 3]


def test_bulk_reads_keep_order_and_duplicates_and_snapshot_the_list() -> None:
    class Dupes(Bulk):
        def __getitems__(self, indices):
            rows = super().__getitems__(indices)
            return tuple(rows)

    dataset = Dupes([{"v": i} for i in range(4)])
    source = dataio.records(dataset, indexed=True)
    assert source.get_many([3, 1, 3]) == [{"v": 3}, {"v": 1}, {"v": 3}]
    plan = dataio.pipeline(
        dataio.map(lambda r: {"v": r["v"] * 10}), dataio.slot("v").passthrough(), dataio.batch(3)
    )
    assert values(plan.bind(source).run()) == [0, 10, 20, 30]
    assert dataset.bulk_calls[-2:] == [[0, 1, 2], [3]]


def test_collate_and_group_by_read_items_individually() -> None:
    dataset = Bulk([{"v": i, "g": i // 3} for i in range(7)])
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.group_by("g"))
    batches = [b["v"].tolist() for b in plan.bind(dataio.records(dataset, indexed=True)).run()]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    assert dataset.bulk_calls == []


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (type("Wrong", (Bulk,), {"__getitems__": lambda self, idx: self.rows[:1]}), "exactly 4"),
        (type("Mapping", (Bulk,), {"__getitems__": lambda self, idx: {"v": idx}}), "list or tuple"),
    ],
)
def test_bulk_reads_are_validated_without_retrying(dataset, message) -> None:
    instance = dataset([{"v": i} for i in range(8)])
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(4))
    with pytest.raises(dataio.DataioError, match=message):
        list(plan.bind(dataio.records(instance, indexed=True)).run())


def test_non_callable_getitems_is_refused() -> None:
    class Broken(Bulk):
        __getitems__ = 5  # type: ignore[assignment]

    with pytest.raises(dataio.PlanError, match="__getitems__ is 5"):
        dataio.records(Broken([]), indexed=True)

    class Off(Bulk):
        __getitems__ = None  # type: ignore[assignment]

    off = dataio.records(Off([{"v": 1}, {"v": 2}]), indexed=True)
    assert off.get_many([1, 0]) == [{"v": 2}, {"v": 1}]


def test_adapter_rules() -> None:
    class NoIter:
        __iter__ = None

    class NoIterFactory:
        __iter__ = None

        def __call__(self):
            return iter([{"v": 1}])

    class Legacy:
        def __getitem__(self, i):
            if i >= 2:
                raise IndexError
            return {"v": i}

    with pytest.raises(dataio.PlanError, match="__iter__ = None"):
        dataio.records(NoIter())
    assert list(dataio.records(NoIterFactory())) == [{"v": 1}]
    with pytest.raises(dataio.PlanError, match="__iter__ = None"):
        dataio.from_iterable(NoIterFactory())
    assert list(dataio.records(Legacy())) == [{"v": 0}, {"v": 1}]
    assert list(dataio.records(Legacy())) == [{"v": 0}, {"v": 1}]  # reusable
    for bad in (42, "path.jpg", b"bytes", {"a": 1}):
        with pytest.raises(dataio.PlanError):
            dataio.records(bad)
    with pytest.raises(dataio.PlanError, match="finite __len__"):
        dataio.records(Reusable([]), indexed=True)
    with pytest.raises(dataio.PlanError, match="one-shot iterator"):
        dataio.records(iter([]), indexed=True)
    once = dataio.from_iterable([{"v": 1}])
    assert list(once) == [{"v": 1}]
    with pytest.raises(dataio.DataioError, match="single-pass"):
        list(once)
    with pytest.raises(dataio.PlanError, match="single-pass"):
        dataio.from_iterator(iter([])).shuffle(seed=1)
    factory_once = dataio.from_iterable(lambda: iter([{"v": 2}]))
    assert list(factory_once) == [{"v": 2}]
    with pytest.raises(dataio.DataioError, match="single-pass"):
        list(factory_once)


def test_known_and_unknown_lengths(kinds) -> None:
    rows = kinds["list"]()
    assert len(dataio.records(rows)) == N
    assert len(dataio.records(rows).map_records(dict)) == N
    assert len(dataio.records(rows).concat(rows)) == 2 * N
    assert len(dataio.records(rows).shuffle(seed=1, buffer_size=3)) == N
    for unknown in (
        dataio.records(rows).filter(bool),
        dataio.records(rows).flat_map_records(lambda r: [r]),
        dataio.records(rows).concat(Reusable(rows)),
    ):
        with pytest.raises(TypeError, match="no known length"):
            len(unknown)
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(4))
    with pytest.raises(TypeError):
        len(plan.bind(dataio.records(rows).filter(bool)).run())


def test_concat_opens_later_sources_lazily() -> None:
    opened = []

    def later():
        opened.append("later")
        return iter([{"v": 2}])

    source = dataio.records([{"v": 0}, {"v": 1}]).concat(dataio.from_callable(later))
    iterator = iter(source)
    assert next(iterator) == {"v": 0} and opened == []
    assert list(iterator) == [{"v": 1}, {"v": 2}] and opened == ["later"]


def test_flat_map_must_return_an_iterable_of_records() -> None:
    source = dataio.records([{"v": 1}]).flat_map_records(lambda r: r)
    with pytest.raises(dataio.DataioError, match="wrap a single record in a list"):
        list(source)


def test_from_sampler_with_group_by_keeps_sampler_batches() -> None:
    rows = [{"id": i, "path": f"p{i}"} for i in range(7)]
    sampler = [[rows[0], rows[3]], [rows[1]], [rows[2], rows[4], rows[6]], [rows[5]]]
    source = dataio.from_sampler(sampler, lambda row: {"key": row["id"], "meta": row})
    plan = dataio.pipeline(dataio.slot("meta").passthrough(), dataio.group_by("batch_id"))
    batches = list(plan.bind(source).run())
    assert [[m["id"] for m in b["meta"]] for b in batches] == [[0, 3], [1], [2, 4, 6], [5]]
    assert next(b.row_keys for b in batches) == [0, 3]
    record = next(iter(dataio.from_sampler([[{"a": {"x": 1}}]])))
    assert record == {"a": {"x": 1}, "batch_id": 0}
    original = {"a": [1]}
    copied = next(iter(dataio.from_sampler([[original]])))
    assert "batch_id" not in original and copied["a"] is original["a"]  # shallow copy


def test_collate_keeps_upstream_batches_and_resumes() -> None:
    upstream = [[{"v": 0}, {"v": 1}], [{"v": 2}], [], [{"v": 3}, {"v": 4}, {"v": 5}]]
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.collate())
    assert [b["v"].tolist() for b in plan.bind(upstream).run()] == [[0, 1], [2], [3, 4, 5]]

    def make_loader(**options: Any) -> dataio.Loader:
        return plan.bind(upstream).run(**options)

    check_resume(make_loader, 1)
    with pytest.raises(dataio.DataioError, match="collate"):
        list(plan.bind([{"v": 1}]).run())


def test_group_by_needs_the_key() -> None:
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.group_by("g"))
    with pytest.raises(dataio.FieldError, match="record 1 has no field 'g'"):
        list(plan.bind([{"v": 0, "g": 1}, {"v": 1}]).run())


def test_files_and_urls(tmp_path: Path, tiny_images) -> None:
    for i, data in enumerate(tiny_images[:3]):
        sub = tmp_path / ("a" if i < 2 else "b")
        sub.mkdir(exist_ok=True)
        (sub / f"img{i}.jpg").write_bytes(data)
    source = dataio.files(str(tmp_path / "**" / "*.jpg"))
    assert [r["key"] for r in source] == ["a/img0", "a/img1", "b/img2"]
    plan = dataio.pipeline(
        dataio.slot("image", field="path").decode_image(),
        dataio.slot("key").passthrough(),
        dataio.batch(1),
    )
    assert [b["key"] for b in plan.bind(source).run()] == [["a/img0"], ["a/img1"], ["b/img2"]]
    with pytest.raises(dataio.NotFoundError, match="no files match"):
        len(dataio.files(str(tmp_path / "*.png")))
    assert list(dataio.urls(["s3://b/x.jpg", "/tmp/y.png"])) == [
        {"key": "x", "url": "s3://b/x.jpg"},
        {"key": "y", "url": "/tmp/y.png"},
    ]


def test_manifest_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"v": 1}\n{oops\n')
    with pytest.raises(dataio.DataioError, match="line 2 is not valid JSON"):
        list(dataio.manifest(bad))
    with pytest.raises(dataio.PlanError, match="format"):
        dataio.manifest(tmp_path / "x.txt")
    with pytest.raises(dataio.NotFoundError):
        list(dataio.manifest(tmp_path / "missing.csv"))


def test_corrupt_tar_member_is_skipped_and_reported(tmp_path: Path, tiny_images) -> None:
    rows = make_rows(tiny_images, 6)
    rows[2] = {**rows[2], "image": rows[2]["image"][:40]}
    write_tar(tmp_path / "s-0.tar", rows)
    plan = dataio.pipeline(
        dataio.slot("jpg").decode_image().resize(h=8, w=8),
        dataio.slot("cls").passthrough(),
        dataio.batch(6),
    )
    batch = next(
        iter(plan.bind(dataio.webdataset(str(tmp_path / "s-{0..0}.tar"))).run(on_failure="skip"))
    )
    assert [int(c) for c in batch["cls"]] == [0, 1, 3, 4, 5]
    assert len(batch.errors) == 1 and batch.errors[0].key == "k2"
    assert isinstance(batch.errors[0], dataio.DecodeError)


def test_truncated_archive_names_the_file(tmp_path: Path, tiny_images) -> None:
    path = write_tar(tmp_path / "t-0.tar", make_rows(tiny_images, 4))
    path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(dataio.DataioError, match=r"t-0\.tar"):
        list(dataio.webdataset(str(tmp_path / "t-{0..0}.tar")))
    with pytest.raises(dataio.NotFoundError):
        list(dataio.archive(tmp_path / "missing.zip"))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 10**12), seed=st.integers(0, 2**64 - 1), data=st.data())
def test_vectorized_permutation_equals_the_scalar_one(n, seed, data) -> None:
    from dataio.sources.permutation import FeistelPermutation

    perm = FeistelPermutation(n, seed)
    indices = data.draw(st.lists(st.integers(0, n - 1), max_size=50))
    assert perm.many(indices) == [perm[i] for i in indices]
    with pytest.raises(IndexError):
        perm.many([n])
