"""Passthrough batches of Python records: the C column helper equals the Python path."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataio
from dataio.engine import _columns, assemble, executor

VALUES = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.sampled_from([np.int64(3), np.float32(1.5), np.bool_(True), 10**400]),
)


def typed(column: Any) -> tuple:
    if isinstance(column, np.ndarray):
        return ("array", column.dtype.str, column.tolist())
    return ("list", [(type(v), v) for v in column])


def python_numeric(values: list[Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(assemble, "_fast", None)
        return assemble._numeric(list(values))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(VALUES, max_size=6), st.lists(st.integers(-(2**63), 2**63 - 1))))
def test_numeric_helper_types_columns_as_python_does(values: list[Any]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        want = python_numeric(values, patch)
    got = assemble._numeric(list(values))
    assert typed(got) == typed(want)
    if isinstance(got, np.ndarray):
        assert got.flags.writeable


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([1, 2, 3], np.int64),
        ([1.5, 2], np.float64),
        ([True, False], np.bool_),
        ([2**63 - 1, -(2**63)], np.int64),
    ],
)
def test_numeric_helper_packs_exact_columns(values: list[Any], dtype: Any) -> None:
    code, data = _columns.numeric(values)
    np.testing.assert_array_equal(np.frombuffer(data, np.dtype(code)), np.array(values, dtype))


@pytest.mark.parametrize("values", [[], [1, 2**63], [1.0, 10**400], [np.int64(1)], [1, [2]]])
def test_numeric_helper_leaves_the_rest_to_python(values: list[Any]) -> None:
    assert _columns.numeric(values) is None


@pytest.mark.parametrize("values", [["a"], [None, 1], [1, b"x"], [True, 1], [2.5, False]])
def test_numeric_helper_knows_lists(values: list[Any]) -> None:
    assert _columns.numeric(values) is False


def test_columns_helper_reads_dicts_and_refuses_the_rest() -> None:
    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert _columns.columns(rows, ("b", "a")) == [["x", None], [1, 2]]
    assert _columns.columns(rows, ("c",)) is None
    assert _columns.columns([*rows, OrderedDict(a=3, b="y")], ("a",)) is None
    assert _columns.columns([*rows, [1, 2]], ("a",)) is None
    assert _columns.columns([], ("a",)) == [[]]
    with pytest.raises(TypeError):
        _columns.columns(rows, ([],))  # an unhashable field name is a Python error


RECORDS = [
    [{"key": f"k{i}", "v": i, "f": i / 3, "s": str(i)} for i in range(11)],
    [{"v": i, "f": float(i), "s": None} for i in range(5)] + [OrderedDict(v=5, f=1.0, s="z")],
    [{"v": True, "f": 1, "s": "a"}, {"v": 1, "f": 2.5, "s": b"b"}, {"v": 2**70, "f": 0, "s": 1}],
    [{"v": 1, "f": 0.5, "s": "x"}, {"f": 0.5, "s": "y"}],
]


@pytest.mark.parametrize("rows", RECORDS)
@pytest.mark.parametrize("on_failure", ["skip", "strict"])
def test_loader_batches_equal_without_the_helper(
    rows: list[dict], on_failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = dataio.pipeline(
        dataio.slot("v").passthrough(),
        dataio.slot("f").passthrough(),
        dataio.slot("s", optional=True).passthrough(),
        dataio.batch(4),
    )

    def run() -> list[tuple]:
        out = []
        try:
            for batch in pipe.bind(rows).run(on_failure=on_failure):
                columns = tuple(typed(batch[name]) for name in batch.slots)
                errors = tuple(str(e) for e in batch.errors)
                out.append((tuple(batch.indices), tuple(batch.row_keys), columns, errors))
        except dataio.DataioError as exc:
            out.append(("raised", str(exc)))
        return out

    fast = run()
    monkeypatch.setattr(executor, "_fast", None)
    monkeypatch.setattr(assemble, "_fast", None)
    assert fast == run() and fast


def test_a_source_error_comes_after_the_batches_before_it() -> None:
    def records():
        for i in range(10):
            if i == 6:
                raise dataio.FormatError("record 6 is damaged")
            yield {"v": i}

    pipe = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(3))
    loader = pipe.bind(dataio.from_callable(records)).run()
    got = []
    with pytest.raises(dataio.FormatError, match="record 6"):
        for batch in loader:
            got.append(batch["v"].tolist())
    assert got == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 12, 13])
@pytest.mark.parametrize(
    ("world", "pad"), [(2, True), (3, True), (3, False), (5, True), (5, False)]
)
@pytest.mark.parametrize("drop_last", [False, True])
def test_sharded_streams_equal_sharded_lists(
    n: int, world: int, pad: bool, drop_last: bool
) -> None:
    rows = [{"v": i} for i in range(n)]
    pipe = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(2, drop_last=drop_last))
    for rank in range(world):
        shard = {"id": rank, "of": world, "pad": pad}
        got = [b.indices for b in pipe.bind(dataio.from_iterable(rows)).run(shard=shard)]
        want = [b.indices for b in pipe.bind(rows).run(shard=shard)]  # by position
        assert got == want
