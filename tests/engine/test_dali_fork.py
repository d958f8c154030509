"""A process that built a DALI pipeline can still fork DataLoader workers.

Before the fix the forked worker dropped the parent's pipelines, whose ``__del__`` joins
DALI threads that do not exist in the child: the worker hung, and the DataLoader with it.
Run in a subprocess with a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nvidia.dali", reason="DALI is a test extra")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import io
    import numpy as np
    import torch
    from PIL import Image
    import dataio

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((20, 24, 3), np.uint8)).save(buffer, "JPEG")
    records = [{"image": buffer.getvalue()}] * 4
    plan = dataio.pipeline(
        dataio.slot("image").decode_image().center_crop(16).normalize("imagenet"),
        dataio.batch(4),
    )
    with plan.bind(records).run("torch", backend="dali") as loader:
        assert next(iter(loader))["image"].shape == (4, 3, 16, 16)
    workers = torch.utils.data.DataLoader(list(range(8)), batch_size=4, num_workers=2)
    assert [b.tolist() for b in workers] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    print("forked fine")
    """
)


def test_dataloader_workers_fork_after_a_dali_pipeline_was_built() -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    # its own session: a hung run is killed with its forked workers
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("a DataLoader worker forked after a DALI pipeline was built hung")
    assert proc.returncode == 0, err[-3000:]
    assert "forked fine" in out
