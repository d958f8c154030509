"""A loader in a forked child (a torch DataLoader worker) after a loader ran in the parent."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import dataio
from dataio.testing import make_jpegs


def _images(pipe: dataio.Pipeline, records: list[dict[str, str]]) -> list[np.ndarray]:
    with pipe.bind(records).run() as loader:
        return [batch["image"].copy() for batch in loader]


def test_a_forked_child_runs_a_loader_after_the_parent_ran_one(tmp_path: Path) -> None:
    """The child has none of the parent's pool threads: work queued to them waited
    forever. Its pool starts afresh and gives the parent's values."""
    records = [{"image": str(p)} for p in make_jpegs(tmp_path, 6, min_side=32, max_side=48)]
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=16, w=16).normalize("imagenet"),
        dataio.batch(4),
    )
    want = _images(pipe, records)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            got = _images(pipe, records)
            same = len(got) == len(want) and all(
                np.array_equal(a, b) for a, b in zip(got, want, strict=True)
            )
            code = 0 if same else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
