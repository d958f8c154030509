"""Loader passes behave like torch's DataLoader; shuffles reshuffle per (seed, epoch)."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataio
from tests.helpers.resume import check_resume

ROWS = [{"v": i} for i in range(20)]


def plan(size: int = 5, *ops: object) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("v").passthrough(), *ops, dataio.batch(size))


def values(loader: object) -> list[list[int]]:
    return [[int(v) for v in batch["v"]] for batch in loader]  # type: ignore[attr-defined]


def flat(batches: list[list[int]]) -> list[int]:
    return [v for batch in batches for v in batch]


# -- passes ---------------------------------------------------------------------------


def test_zip_with_len_gives_full_epochs_and_advances_them() -> None:
    loader = plan().bind(ROWS).run()
    counts, epochs = [], []
    for _ in range(3):
        epochs.append(loader.epoch)
        counts.append(sum(1 for _ in zip(range(len(loader)), loader, strict=False)))
    assert counts == [4, 4, 4] and epochs == [0, 1, 2]
    assert loader.epoch == 3 and loader.state_dict()["samples_consumed"] == 0


def test_islice_of_len_batches_is_an_epoch() -> None:
    loader = plan().bind(ROWS).run()
    got = [len(list(itertools.islice(loader, len(loader)))) for _ in range(3)]
    assert got == [4, 4, 4] and loader.epoch == 3


def test_two_for_loops_are_two_epochs() -> None:
    loader = plan().bind(dataio.records(ROWS).shuffle(seed=3)).run()
    first, second = values(loader), values(loader)
    assert len(first) == len(second) == len(loader) == 4
    assert sorted(flat(first)) == sorted(flat(second)) == list(range(20))
    assert first != second  # the second epoch is reshuffled
    assert loader.epoch == 2


def test_break_then_for_starts_the_next_epoch_but_the_checkpoint_stays() -> None:
    loader = plan().bind(ROWS).run()
    for batch in loader:
        assert list(batch["v"]) == [0, 1, 2, 3, 4]
        break
    state = loader.state_dict()
    assert (state["epoch"], state["samples_consumed"]) == (0, 5)
    assert values(loader) == [list(range(i, i + 5)) for i in range(0, 20, 5)]
    assert loader.epoch == 2


def test_an_iterator_that_delivered_nothing_keeps_the_epoch() -> None:
    loader = plan().bind(ROWS).run()
    iter(loader)  # Lightning probes loaders with iter() before training
    assert loader.epoch == 0 and len(values(loader)) == 4 and loader.epoch == 1


def test_a_new_iter_abandons_the_running_pass() -> None:
    loader = plan().bind(ROWS).run()
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(StopIteration):
        next(first)  # superseded
    assert loader.epoch == 1 and len(list(second)) == 4


def test_next_walks_one_pass_and_stops_once() -> None:
    loader = plan(10).bind(ROWS).run()
    assert [int(next(loader)["v"][0]) for _ in range(2)] == [0, 10]
    with pytest.raises(StopIteration):
        next(loader)
    assert loader.epoch == 1 and int(next(loader)["v"][0]) == 0


def test_set_epoch_restarts_and_keeps_a_restored_position() -> None:
    source = dataio.records(ROWS).shuffle(seed=5)
    loader = plan().bind(source).run()
    reference = [values(plan().bind(source).run(epoch=e)) for e in range(3)]
    for epoch in (2, 0, 1):
        loader.set_epoch(epoch)
        assert values(loader) == reference[epoch]
    # DistributedSampler style: set_epoch(e) after restoring epoch e keeps the position
    loader.load_state_dict({**loader.state_dict(), "epoch": 1, "samples_consumed": 10})
    loader.set_epoch(1)
    assert values(loader) == reference[1][2:]
    # ...but mid-pass it restarts the epoch
    for _ in loader:
        break
    loader.set_epoch(loader.epoch)
    assert values(loader) == reference[2]


def test_resume_mid_epoch_and_at_the_boundary_with_reshuffling() -> None:
    source = dataio.records(ROWS).shuffle(seed=9)
    check_resume(lambda **o: plan(3).bind(source).run(**o), after=2, epoch=1)
    check_resume(lambda **o: plan(3).bind(source).run(**o), after=4)


def test_resume_continues_only_the_restored_pass() -> None:
    source = dataio.records(ROWS).shuffle(seed=9)
    full = [values(plan().bind(source).run(epoch=e)) for e in range(2)]
    loader = plan().bind(source).run()
    for _ in zip(range(2), loader, strict=False):
        pass
    state = loader.state_dict()
    resumed = plan().bind(source).run()
    resumed.load_state_dict(state)
    assert values(resumed) == full[0][2:]
    assert values(resumed) == full[1]  # then the next epoch, from its start


# -- reshuffling ------------------------------------------------------------------------


def orders(source: dataio.Source, epochs: int = 3, **run: object) -> list[list[int]]:
    loader = plan(4).bind(source).run(**run)
    return [flat(values(loader)) for _ in range(epochs)]


@pytest.mark.parametrize(
    "shuffle",
    [
        {"seed": 1},
        {"seed": 1, "buffer_size": 6},
    ],
)
@pytest.mark.parametrize("indexed", [True, False])
def test_each_epoch_is_a_different_permutation(shuffle: dict, indexed: bool) -> None:
    rows = ROWS if indexed else (lambda: iter(ROWS))
    got = orders(dataio.records(rows).shuffle(**shuffle))
    assert all(sorted(order) == list(range(20)) for order in got)
    assert len({tuple(order) for order in got}) == 3


@pytest.mark.parametrize("buffer_size", [None, 6])
def test_fixed_order_stays_available(buffer_size: int | None) -> None:
    source = dataio.records(ROWS).shuffle(
        seed=1, buffer_size=buffer_size, reshuffle_each_epoch=False
    )
    got = orders(source)
    assert got[0] == got[1] == got[2] != list(range(20))
    # epoch 0 of a reshuffling shuffle is that same order
    assert orders(dataio.records(ROWS).shuffle(seed=1, buffer_size=buffer_size), 1) == got[:1]
    with pytest.raises(dataio.PlanError, match="reshuffle_each_epoch"):
        dataio.records(ROWS).shuffle(seed=1, reshuffle_each_epoch=1)  # type: ignore[arg-type]


def test_the_order_does_not_depend_on_workers_or_prefetch() -> None:
    def slow(record: dict) -> dict:
        time.sleep(0.0005 * (record["v"] % 3))  # finish out of order
        return record

    source = dataio.records(ROWS).shuffle(seed=4)
    expected = orders(source, epochs=2)
    for concurrency in (1, 3, 16):
        for prefetch in (1, 4):
            pipe = dataio.pipeline(
                dataio.map(slow), dataio.slot("v").passthrough(), dataio.batch(4, prefetch=prefetch)
            )
            loader = pipe.bind(source).run(concurrency=concurrency)
            assert [flat(values(loader)) for _ in range(2)] == expected


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32), epoch=st.integers(0, 1000))
def test_every_epoch_order_is_a_permutation(n: int, seed: int, epoch: int) -> None:
    source = dataio.records(list(range(n))).shuffle(seed=seed).at_epoch(epoch)
    order = list(source.iterate())
    assert sorted(order) == list(range(n))
    assert order == list(dataio.records(list(range(n))).shuffle(seed=seed).at_epoch(epoch))


# -- reference rules ---------------------------------------------------------------------


def test_full_shuffle_after_flat_map_is_refused() -> None:
    expanded = dataio.records(ROWS).flat_map_records(lambda r: [r, r])
    with pytest.raises(dataio.PlanError, match="buffer_size"):
        expanded.shuffle(seed=0)
    (got,) = orders(expanded.shuffle(seed=0, buffer_size=8), 1)
    assert sorted(got) == sorted(list(range(20)) * 2)


def test_completion_order_counts_delivered_rows() -> None:
    def slow_first(record: dict) -> dict:
        if record["v"] < 3:
            time.sleep(0.2)  # the first batch finishes last
        return record

    pipe = dataio.pipeline(
        dataio.map(slow_first), dataio.slot("v").passthrough(), dataio.batch(3, prefetch=2)
    )
    loader = pipe.bind(ROWS[:6]).run(order="completion", concurrency=6)
    it = iter(loader)
    first = next(it)
    assert [int(v) for v in first["v"]] == [3, 4, 5]
    assert loader.state_dict()["samples_consumed"] == 3
    assert [int(v) for v in next(it)["v"]] == [0, 1, 2]
    assert loader.state_dict()["samples_consumed"] == 0 and loader.epoch == 1


def test_shard_auto_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(dataio.PlanError, match="RANK and WORLD_SIZE"):
        plan().bind(ROWS).run(shard="auto")
    seen = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        loader = plan(2).bind(ROWS).run(shard="auto")
        assert loader.state_dict()["shard"] == {"id": rank, "of": 3, "pad": True}
        seen.append(flat(values(loader)))
    assert [len(s) for s in seen] == [7, 7, 7]
    assert sorted(set(flat(seen))) == list(range(20))
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(dataio.PlanError, match="integers"):
        plan().bind(ROWS).run(shard="auto")
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(dataio.PlanError, match="0 <= id < of"):
        plan().bind(ROWS).run(shard="auto")


def test_shard_auto_prefers_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = plan().bind(ROWS).run(shard="auto")
    assert loader.state_dict()["shard"] == {"id": 1, "of": 2, "pad": True}
    assert flat(values(loader)) == list(range(1, 20, 2))


def test_the_last_batch_draws_from_its_own_epoch() -> None:
    # the pass finishes (and the loader moves on) when its last batch is delivered; that
    # batch's random ops still use the pass's epoch
    pipe = dataio.pipeline(
        dataio.slot("v").passthrough(), dataio.batch(10), dataio.batch_transforms.shuffle()
    )
    loader = pipe.bind(ROWS).run(seed=1)
    epoch0, epoch1 = values(loader), values(loader)
    assert epoch0 == values(pipe.bind(ROWS).run(seed=1))
    assert epoch1 == values(pipe.bind(ROWS).run(seed=1, epoch=1))
    assert sorted(epoch0[1]) == sorted(epoch1[1]) == list(range(10, 20))
    assert epoch0[1] != epoch1[1]


def test_a_failed_last_batch_still_ends_the_pass() -> None:
    import io

    import numpy as np

    def npy(value: int) -> bytes:
        out = io.BytesIO()
        np.save(out, np.full(3, value, np.float32))
        return out.getvalue()

    rows = [{"key": f"r{i}", "x": npy(i) if i < 4 else b"broken"} for i in range(6)]
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(2))
    loader = pipe.bind(rows).run(on_failure="skip")
    for epoch in range(2):
        it = iter(loader)
        assert [next(it).row_keys for _ in range(2)] == [["r0", "r1"], ["r2", "r3"]]
        with pytest.raises(dataio.BatchFailedError):
            next(it)
        assert loader.epoch == epoch + 1 and loader.state_dict()["samples_consumed"] == 0
        with pytest.raises(StopIteration):
            next(it)
