"""Fast shuffled passes keep the shuffle's order: the C order, lists gathered with
``itemgetter``, reads ahead of consecutive positions and shuffled frames narrowed to the
plan's columns.

The oracle for the order is ``FeistelPermutation.__getitem__``: the per-position
definition in pure Python (six Feistel rounds of splitmix64, cycle-walked), unchanged
since checkpoints first recorded shuffles; a few literal values pin it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataio
from dataio.sources import _permute, permutation
from dataio.sources.base import epoch_seed
from dataio.sources.permutation import FeistelPermutation, PermutedIndexed
from tests.helpers.arrow_sources import TableSource
from tests.helpers.resume import check_resume

SEEDS = st.integers(0, 2**64 - 1)


def python_order(n: int, seed: int) -> list[int]:
    perm = FeistelPermutation(n, seed)
    return [perm[i] for i in range(n)]


def numpy_order(monkeypatch: pytest.MonkeyPatch, n: int, seed: int) -> list[int]:
    with monkeypatch.context() as m:
        m.setattr(permutation, "_permute", None)
        return FeistelPermutation(n, seed).many(range(n))


def test_the_order_is_the_one_checkpoints_recorded() -> None:
    """Literal values of the order before the C path existed (a change breaks resumes)."""
    assert FeistelPermutation(10, 0).many(range(10)) == [8, 2, 6, 1, 7, 0, 4, 9, 5, 3]
    assert FeistelPermutation(300_000, 7).many(range(8)) == [
        70838, 239173, 53850, 143646, 108027, 199278, 189369, 194355,
    ]  # fmt: skip
    big = FeistelPermutation(5_000_000, epoch_seed(3, 2, True))  # above TABULATE_ROWS
    assert big.many([0, 1, 4_999_999]) == [3498643, 2380114, 1199832]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3000), seed=SEEDS)
def test_the_c_table_equals_the_per_position_order(n: int, seed: int) -> None:
    perm = FeistelPermutation(n, seed)
    table = np.empty(n, np.int32)
    _permute.table(table, n, perm.half, tuple(perm.keys))
    assert table.tolist() == python_order(n, seed)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3000), seed=SEEDS, data=st.data())
def test_c_positions_equal_the_per_position_order(n: int, seed: int, data: Any) -> None:
    perm = FeistelPermutation(n, seed)
    wanted = data.draw(st.lists(st.integers(0, n - 1), max_size=50))
    out = np.empty(len(wanted), np.int64)
    _permute.at(np.array(wanted, np.int64), out, n, perm.half, tuple(perm.keys))
    assert out.tolist() == [perm[i] for i in wanted]


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1024, 1025, 4099, 70_001])
@pytest.mark.parametrize("seed", [0, 5, 2**63 + 11])
def test_c_numpy_and_python_give_one_order(monkeypatch, n: int, seed: int) -> None:
    """Tabulated (C), per call (C, above ``TABULATE_ROWS``) and NumPy (no C build)."""
    want = python_order(n, seed) if n < 5000 else numpy_order(monkeypatch, n, seed)
    assert FeistelPermutation(n, seed).many(range(n)) == want
    monkeypatch.setattr(permutation, "TABULATE_ROWS", 0)
    assert FeistelPermutation(n, seed).many(range(n)) == want
    assert numpy_order(monkeypatch, n, seed) == want
    assert sorted(want) == list(range(n))


def test_c_refuses_wrong_buffers() -> None:
    perm = FeistelPermutation(100, 1)
    keys = tuple(perm.keys)
    with pytest.raises(ValueError, match="int32 buffer"):
        _permute.table(np.empty(100, np.int64), 100, perm.half, keys)
    with pytest.raises(ValueError, match="round keys"):
        _permute.table(np.empty(100, np.int32), 100, perm.half, keys[:5])
    with pytest.raises(ValueError, match="domain"):
        _permute.table(np.empty(100, np.int32), 100, 3, keys)
    with pytest.raises(ValueError, match="equal length"):
        _permute.at(np.zeros(3, np.int64), np.empty(2, np.int64), 100, perm.half, keys)
    with pytest.raises(IndexError):
        _permute.at(np.array([100], np.int64), np.empty(1, np.int64), 100, perm.half, keys)
    with pytest.raises(TypeError):
        _permute.table(b"\0" * 400, 100, perm.half, keys)  # read-only


@pytest.mark.parametrize("tabulate", [True, False])
def test_ranges_are_checked_like_lists(monkeypatch, tabulate: bool) -> None:
    if not tabulate:
        monkeypatch.setattr(permutation, "TABULATE_ROWS", 0)
    perm = FeistelPermutation(50, 3)
    assert perm.many(range(10, 20)) == perm.many(list(range(10, 20)))
    assert perm.many(range(5, 5)) == []
    for bad in (range(45, 51), range(-1, 3)):
        with pytest.raises(IndexError):
            perm.many(bad)


# -- lists gathered in bulk --------------------------------------------------------------


@pytest.mark.parametrize("rows", [list(range(100)), tuple(range(100))])
def test_a_sequence_gathers_any_positions_in_order(rows) -> None:
    source = dataio.records(rows)
    assert source.get_many([7, 3, 7, -1]) == [7, 3, 7, 99]
    assert source.get_many([42]) == [42]
    assert source.get_many(np.array([5, 1])) == [5, 1]
    assert source.get_many([]) == []
    with pytest.raises(IndexError):
        source.get_many([1, 100])


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.integers() | st.text(max_size=3) | st.none(), min_size=1), data=st.data())
def test_the_c_gather_equals_indexing(rows: list[Any], data: Any) -> None:
    wanted = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=80))
    for container in (rows, tuple(rows)):
        got = _permute.gather(container, np.array(wanted, np.int64))
        assert got == [container[i] for i in wanted] and type(got) is list
        assert all(a is container[i] for a, i in zip(got, wanted, strict=True))


def test_the_c_gather_leaves_bad_positions_to_python() -> None:
    rows = [{"v": i} for i in range(5)]
    assert _permute.gather(rows, np.array([1, 5], np.int64)) is None
    assert _permute.gather(rows, np.array([-1], np.int64)) is None
    with pytest.raises(TypeError):
        _permute.gather(iter(rows), np.array([1], np.int64))
    source = dataio.records(rows)
    assert source.get_many(np.array([-1, 0])) == [{"v": 4}, {"v": 0}]
    with pytest.raises(IndexError):
        source.get_many(np.array([2, 5]))


def test_a_dataset_gets_python_ints_from_a_shuffle() -> None:
    seen: list[list[Any]] = []

    class Bulk:
        def __len__(self) -> int:
            return 40

        def __getitem__(self, index: int) -> dict[str, int]:
            return {"v": index}

        def __getitems__(self, indices: list[int]) -> list[dict[str, int]]:
            seen.append(list(indices))
            return [{"v": i} for i in indices]

    shuffled = dataio.records(Bulk(), indexed=True).shuffle(seed=1)
    assert [r["v"] for r in shuffled.get_many(range(40))] == python_order(40, 1)
    assert seen == [python_order(40, 1)] and all(type(i) is int for i in seen[0])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 600), seed=st.integers(0, 2**32), batch=st.integers(1, 70))
def test_a_shuffled_list_delivers_the_permuted_records(n: int, seed: int, batch: int) -> None:
    rows = [{"v": i, "key": f"k{i}"} for i in range(n)]
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(batch))
    with plan.bind(dataio.records(rows).shuffle(seed=seed)).run("numpy") as loader:
        got = [v for b in loader for v in b["v"].tolist()]
    assert got == python_order(n, seed)


# -- Arrow sources read ahead ----------------------------------------------------------


def table_of(n: int) -> pa.Table:
    return pa.table(
        {"v": pa.array(range(n), pa.int64()), "key": pa.array([f"k{i}" for i in range(n)])}
    )


@pytest.mark.parametrize("n", [1, 300, 5000])
def test_consecutive_reads_are_slices_of_one_read_ahead(monkeypatch, n: int) -> None:
    monkeypatch.setattr(permutation, "WHOLE_BYTES", 0)  # a parent too large to read whole
    parent = TableSource(table_of(n))
    shuffled = PermutedIndexed(parent, seed=4)
    order = python_order(n, 4)
    got = []
    for start in range(0, n, 64):  # a loader's blocks
        batch = shuffled.take_batch(np.arange(start, min(start + 64, n)))
        got += batch.column("v").to_pylist()
    assert got == order
    reads = len(parent.taken)
    assert reads <= 2 if n > 64 else reads == 1  # the first read measures the row size
    assert [p for taken in parent.taken for p in taken] == order
    # scattered positions (a padded shard) read exactly what is asked
    assert shuffled.take_batch([3 % n, 0, 3 % n]).column("v").to_pylist() == [
        order[3 % n], order[0], order[3 % n],
    ]  # fmt: skip
    assert parent.taken[-1] == [order[3 % n], order[0], order[3 % n]]


@pytest.mark.parametrize("n", [129, 300, 5000])
def test_a_small_parent_is_read_whole_once_a_pass_goes_on(n: int) -> None:
    """A parent stored in blocks: the first block as asked, then every row in order."""
    parent = TableSource(table_of(n))
    shuffled = PermutedIndexed(parent, seed=9)
    order = python_order(n, 9)
    got = []
    for start in range(0, n, 64):
        got += shuffled.take_batch(np.arange(start, min(start + 64, n))).column("v").to_pylist()
    assert got == order
    assert parent.taken == [order[:64], list(range(n))]
    random = [n - 1, 0, 3 % n]
    assert shuffled.take_batch(random).column("v").to_pylist() == [order[i] for i in random]
    assert len(parent.taken) == 2  # later reads gather from the rows read whole


@pytest.mark.parametrize("whole", [True, False])
def test_scattered_reads_of_a_small_parent_read_it_whole(monkeypatch, whole: bool) -> None:
    """A rank's round-robin positions are scattered: the second read reads every row."""
    if not whole:
        monkeypatch.setattr(permutation, "WHOLE_BYTES", 0)
    parent = TableSource(table_of(90))
    shuffled = PermutedIndexed(parent, seed=2)
    order = python_order(90, 2)
    rank = list(range(1, 90, 3))  # rank 1 of 3
    reads = [rank[i : i + 10] for i in range(0, 30, 10)]
    for wanted in reads:
        got = shuffled.take_batch(np.array(wanted)).column("v").to_pylist()
        assert got == [order[i] for i in wanted]
    firsts = [[order[i] for i in wanted] for wanted in reads]
    assert parent.taken == ([firsts[0], list(range(90))] if whole else firsts)


def test_read_ahead_is_bounded_by_bytes(monkeypatch) -> None:
    monkeypatch.setattr(permutation, "WHOLE_BYTES", 0)
    monkeypatch.setattr(permutation, "READ_AHEAD_BYTES", 4096)
    big = pa.table({"blob": pa.array([bytes(1000)] * 200), "v": pa.array(range(200))})
    parent = TableSource(big)
    shuffled = PermutedIndexed(parent, seed=0)
    for start in range(0, 200, 2):
        shuffled.take_batch(range(start, start + 2))
    assert max(len(t) for t in parent.taken) <= 4  # ~1 KB rows: 4 KiB hold 4


def test_a_pickled_shuffle_leaves_its_read_ahead_behind() -> None:
    shuffled = dataio.records(table_of(100)).shuffle(seed=2)
    shuffled.take_batch(range(0, 10))  # measures the row size
    second = shuffled.take_batch(range(10, 20))  # reads ahead
    copy = pickle.loads(pickle.dumps(shuffled))
    assert copy._ahead is None and shuffled._ahead is not None
    assert copy.take_batch(range(10, 20)).equals(second)


@pytest.mark.parametrize("epoch", [0, 3])
def test_a_shuffled_table_pass_is_the_permuted_table(epoch: int) -> None:
    n = 20_000
    source = dataio.records(table_of(n)).shuffle(seed=6)
    plan = dataio.pipeline(
        dataio.slot("v").passthrough(), dataio.slot("key").passthrough(), dataio.batch(256)
    )
    loader = plan.bind(source).run("numpy")
    loader.set_epoch(epoch)
    with loader:
        batches = list(loader)
    values = np.concatenate([b["v"] for b in batches]).tolist()
    assert values == python_order(n, epoch_seed(6, epoch, True))
    assert [k for b in batches for k in b["key"].to_pylist()] == [f"k{v}" for v in values]


def test_a_shuffled_table_gathers_only_the_plans_columns(monkeypatch) -> None:
    from dataio.sources.arrow import ArrowTableSource

    gathered: list[list[str]] = []
    take = ArrowTableSource.take_batch

    def spy(self, positions):
        batch = take(self, positions)
        gathered.append(batch.schema.names)
        return batch

    monkeypatch.setattr(ArrowTableSource, "take_batch", spy)
    table = table_of(3000).append_column("text", pa.array(["x" * 50] * 3000))
    source = dataio.records(table).shuffle(seed=5)
    narrow = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(256))
    with narrow.bind(source).run("numpy") as loader:
        assert np.concatenate([b["v"] for b in loader]).tolist() == python_order(3000, 5)
    assert gathered and all(names == ["v", "key"] for names in gathered)
    gathered.clear()
    mapped = dataio.pipeline(
        dataio.map(lambda r: {**r, "n": len(r["text"])}),
        dataio.slot("n").passthrough(),
        dataio.batch(256),
    )
    with mapped.bind(source).run("numpy") as loader:
        assert sum(len(b["n"]) for b in loader) == 3000
    assert gathered and all(names == ["v", "key", "text"] for names in gathered)


@pytest.mark.parametrize("shard", [None, {"id": 1, "of": 3}])
def test_shuffled_table_resumes(shard) -> None:
    source = dataio.records(table_of(3000)).shuffle(seed=1)
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(100))
    options = {} if shard is None else {"shard": shard}
    check_resume(lambda **o: plan.bind(source).run("numpy", **o), after=13, **options)


# -- shuffled frames -------------------------------------------------------------------


@pytest.fixture
def parquet_path(tmp_path: Path) -> Path:
    n = 5000
    table = table_of(n).append_column("text", pa.array([f"text {i}" * 5 for i in range(n)]))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=700)
    return path


def read_columns(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    original = pq.ParquetFile.read_row_groups

    def record(self, row_groups, columns=None, **options):
        calls.append(sorted(columns) if columns is not None else None)
        return original(self, row_groups, columns=columns, **options)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", record)
    return calls


def test_a_shuffled_frame_reads_only_the_plans_columns(monkeypatch, parquet_path: Path) -> None:
    calls = read_columns(monkeypatch)
    source = dataio.scan_parquet(parquet_path).shuffle(seed=8)
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(256))
    loader = plan.bind(source).run("numpy")
    epochs = []
    for _ in range(2):
        epochs.append(np.concatenate([b["v"] for b in loader]).tolist())
    assert epochs == [python_order(5000, epoch_seed(8, e, True)) for e in range(2)]
    # the slot's column and the row key; the text column was never decoded
    assert calls and all(c == ["key", "v"] for c in calls)
    assert loader.state_dict()["record_source_signature"] == source.signature()


def test_a_shuffled_frame_with_a_record_map_reads_whole_rows(
    monkeypatch, parquet_path: Path
) -> None:
    calls = read_columns(monkeypatch)
    source = dataio.scan_parquet(parquet_path).shuffle(seed=8)
    plan = dataio.pipeline(
        dataio.map(lambda r: {**r, "n": len(r["text"])}),
        dataio.slot("n").passthrough(),
        dataio.slot("v").passthrough(),
        dataio.batch(500),
    )
    with plan.bind(source).run("numpy") as loader:
        batches = list(loader)
    order = python_order(5000, 8)
    assert np.concatenate([b["v"] for b in batches]).tolist() == order
    assert np.concatenate([b["n"] for b in batches]).tolist() == [
        len(f"text {i}" * 5) for i in order
    ]
    assert calls and all(c is None or "text" in c for c in calls)


def test_shuffled_frame_resumes(parquet_path: Path) -> None:
    source = dataio.scan_parquet(parquet_path).shuffle(seed=3)
    plan = dataio.pipeline(
        dataio.slot("v").passthrough(), dataio.slot("key").passthrough(), dataio.batch(128)
    )
    check_resume(lambda **o: plan.bind(source).run("numpy", **o), after=9)
    check_resume(lambda **o: plan.bind(source).run("numpy", **o), after=5, shard={"id": 0, "of": 2})
