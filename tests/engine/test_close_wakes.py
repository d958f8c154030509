"""Closing a loader from another thread ends a consumer waiting for a batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import dataio
from dataio.exceptions import DataioError
from dataio.testing import make_jpegs


def _slow(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.3)
    return record


def test_close_from_another_thread_wakes_the_waiting_consumer(tmp_path: Path) -> None:
    paths = make_jpegs(tmp_path, 8, min_side=32, max_side=48)
    plan = dataio.pipeline(
        dataio.map(_slow), dataio.slot("image").decode_image().resize(h=8, w=8), dataio.batch(4)
    )
    loader = plan.bind(dataio.records([{"image": str(p)} for p in paths])).run(concurrency=8)
    seen: list[BaseException] = []

    def consume() -> None:
        try:
            for _ in loader:
                pass
        except BaseException as exc:  # the consumer's outcome, checked below
            seen.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    time.sleep(0.1)  # the consumer now waits for the first batch (records take 0.3 s)
    loader.close()
    consumer.join(10)
    assert not consumer.is_alive(), "the consumer still waits after close()"
    assert len(seen) == 1 and isinstance(seen[0], DataioError)
    assert "closed" in str(seen[0])
    with pytest.raises(DataioError, match="closed"):
        next(iter(loader))
