"""The one resume contract every source kind is checked against.

``make_loader(**run_options)`` builds a fresh loader over the same source and plan.
A stream is the list of delivered batches as comparable values (indices and columns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import dataio


def snapshot(batch: dataio.Batch) -> tuple:
    """A batch as plain, comparable values."""
    columns = []
    for name, column in batch.items():
        if isinstance(column, np.ndarray):
            value = column.tobytes()
        elif hasattr(column, "to_pylist"):  # an Arrow column (its repr names its address)
            value = repr(column.to_pylist())
        else:
            value = repr(column)
        columns.append((name, value))
    return (tuple(batch.indices), tuple(columns))


def stream(loader: dataio.Loader, limit: int | None = None) -> list[tuple]:
    """Consume up to ``limit`` batches of the loader's current pass."""
    out: list[tuple] = []
    if limit == 0:
        return out
    for batch in loader:
        out.append(snapshot(batch))
        if limit is not None and len(out) == limit:
            break
    return out


def check_resume(make_loader: Callable[..., dataio.Loader], after: int, **options: Any) -> None:
    """Resuming after ``after`` batches (and mid-batch) equals the uninterrupted stream."""
    full = stream(make_loader(**options))
    after = min(after, max(len(full) - 1, 0))  # stop inside the epoch
    first = make_loader(**options)
    head = stream(first, after)
    state = first.state_dict()
    first.close()
    assert state["schema"] == 3 and state["samples_consumed"] == sum(len(b[0]) for b in head)
    resumed = make_loader(**options)
    resumed.load_state_dict(state)
    assert head + stream(resumed) == full

    if head and len(head[-1][0]) > 1:
        # a checkpoint inside a batch replays that batch from its first sample
        mid = dict(state, samples_consumed=state["samples_consumed"] - 1)
        again = make_loader(**options)
        again.load_state_dict(mid)
        assert stream(again) == full[len(head) - 1 :]

    # end of epoch: the state moves to the next epoch, from its start
    whole = make_loader(**options)
    assert stream(whole) == full
    boundary = whole.state_dict()
    assert boundary["samples_consumed"] == 0
    assert boundary["epoch"] == options.get("epoch", 0) + 1
    restored = make_loader(**options)
    restored.load_state_dict(boundary)
    assert stream(restored) == stream(make_loader(**{**options, "epoch": boundary["epoch"]}))
