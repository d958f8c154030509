"""Loader checkpoints are validated before anything is restored."""

from __future__ import annotations

from typing import Any

import pytest

import dataio


def plan(size: int = 3) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(size))


ROWS = [{"v": i} for i in range(10)]


def mid_epoch_state(source: Any = ROWS, **options: Any) -> dict:
    loader = plan().bind(source).run(**options)
    next(loader)
    state = loader.state_dict()
    loader.close()
    return state


def test_state_dict_fields() -> None:
    state = mid_epoch_state(seed=4, shard={"id": 1, "of": 2})
    assert state == {
        "schema": 3,
        "samples_consumed": 3,
        "epoch": 0,
        "seed": 4,
        "order": "submit",
        "plan_signature": plan().signature(),
        "record_source_signature": dataio.records(ROWS).signature(),
        "shard": {"id": 1, "of": 2, "pad": True},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s | {"plan_signature": "0" * 64}, "another pipeline"),
        (lambda s: s | {"record_source_signature": "f" * 64}, "another record source"),
        (lambda s: s | {"record_source_signature": "not-hex"}, "malformed"),
        (lambda s: s | {"record_source_signature": 5}, "malformed"),
        (lambda s: s | {"samples_consumed": -1}, "non-negative integer"),
        (lambda s: s | {"epoch": "1"}, "non-negative integer"),
        (lambda s: s | {"schema": 9}, "unsupported checkpoint schema"),
        (lambda s: s | {"order": "completion"}, "completion"),
        (lambda s: s | {"order": "sideways"}, "order must be"),
        (lambda s: s | {"shard": {"id": 0, "of": 4, "pad": True}}, "same rank and world size"),
        (lambda s: {k: v for k, v in s.items() if k != "order"} | {"schema": 2}, "schema-2"),
        (lambda s: [s], "a dict"),
    ],
)
def test_bad_checkpoints_are_refused_before_restoring(change, message) -> None:
    state = mid_epoch_state(shard={"id": 1, "of": 2})
    loader = plan().bind(ROWS).run(shard={"id": 1, "of": 2})
    next(loader)  # the loader has a position of its own
    with pytest.raises(dataio.CheckpointError, match=message):
        loader.load_state_dict(change(state))
    assert loader.state_dict()["samples_consumed"] == 3  # nothing changed
    assert next(loader)["v"].tolist() == [7, 9]


def test_another_source_configuration_is_refused() -> None:
    shuffled = dataio.records(ROWS).shuffle(seed=1)
    state = mid_epoch_state(shuffled)
    other = plan().bind(dataio.records(ROWS).shuffle(seed=2)).run()
    with pytest.raises(dataio.CheckpointError, match="another record source"):
        other.load_state_dict(state)
    same = plan().bind(dataio.records(ROWS).shuffle(seed=1)).run()
    same.load_state_dict(state)  # an equal description is accepted


def test_old_checkpoints_without_a_source_signature() -> None:
    state = mid_epoch_state()
    del state["record_source_signature"]
    plain = plan().bind(ROWS).run()
    plain.load_state_dict(state)  # no tracked configuration: accepted
    assert next(plain)["v"].tolist() == [3, 4, 5]
    configured = plan().bind(dataio.records(ROWS).map_records(dict)).run()
    with pytest.raises(dataio.CheckpointError, match="samples_consumed == 0"):
        configured.load_state_dict(state)
    configured.load_state_dict(state | {"samples_consumed": 0})


def test_completion_and_schema_2_checkpoints_at_epoch_boundaries() -> None:
    loader = plan().bind(ROWS).run(order="completion")
    list(loader)
    boundary = loader.state_dict()
    assert boundary["order"] == "completion" and boundary["samples_consumed"] == 0
    fresh = plan().bind(ROWS).run()
    fresh.load_state_dict(boundary)
    assert fresh.epoch == 1
    schema2 = {k: v for k, v in boundary.items() if k != "order"} | {"schema": 2}
    fresh.load_state_dict(schema2)
    mid = mid_epoch_state(order="completion")
    with pytest.raises(dataio.CheckpointError, match="completion"):
        plan().bind(ROWS).run().load_state_dict(mid)


def test_set_epoch_keeps_a_restored_position_for_the_same_epoch() -> None:
    state = mid_epoch_state(epoch=3)
    loader = plan().bind(ROWS).run()
    loader.load_state_dict(state)
    loader.set_epoch(3)
    assert next(loader)["v"].tolist() == [3, 4, 5]
    loader.set_epoch(4)
    assert next(loader)["v"].tolist() == [0, 1, 2]
