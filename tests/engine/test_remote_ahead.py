"""The read-ahead of remote Parquet scans (``remote_files.Tail``): a new plan replaces the
old one without fetching any more of it."""

from __future__ import annotations

import threading

from dataio.engine import remote_files


def test_a_new_plan_fetches_none_of_the_old_one() -> None:
    fetched: list[tuple[int, int]] = []
    lock = threading.Lock()

    def fetch(start: int, end: int) -> bytes:
        with lock:
            fetched.append((start, end))
        return bytes(end - start)

    part = remote_files.AHEAD_PART
    size = 10**10
    tail = remote_files.Tail(size, size - 10, b"0" * 10)
    first = [(i * part, (i + 1) * part) for i in range(20)]
    tail.plan(first, fetch)
    window = len(tail.pieces)
    assert 0 < window < len(first)  # the window holds only the first few ranges
    new = (500 * part, 500 * part + 100)
    tail.plan([new], fetch)
    assert [(p.start, p.end) for p in tail.pieces] == [new]  # no piece of the old plan
    assert tail.held[0] == 100 and tail.planned == []
    for piece in tail.pieces:
        piece.data.result()
    with lock:
        assert fetched[window:] == [new]  # nothing of the old plan after the first window
    assert tail.ahead(*new) is not None
