"""examples/ddp_train.py: two gloo ranks with shard="auto" under real torch.distributed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dataio

ROOT = Path(__file__).resolve().parents[1]
WORLD, EPOCHS, RECORDS, BATCH, SAVE_AFTER = 2, 3, 48, 4, 2


def test_two_ranks_shard_reshuffle_and_resume(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ddp_train.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [r["shard"] for r in ranks] == [
        {"id": 0, "of": 2, "pad": True},
        {"id": 1, "of": 2, "pad": True},
    ]
    # the same shuffle, computed here without any process group: what each rank must see
    shuffled = dataio.records(list(range(RECORDS))).shuffle(seed=7)
    for epoch in range(EPOCHS):
        order = list(shuffled.at_epoch(epoch).iterate())
        for rank in ranks:
            assert rank["epochs"][epoch] == order[rank["rank"] :: WORLD]
        parts = [set(r["epochs"][epoch]) for r in ranks]
        assert not parts[0] & parts[1] and parts[0] | parts[1] == set(range(RECORDS))
    for rank in ranks:
        assert len({tuple(e) for e in rank["epochs"]}) == EPOCHS  # reshuffled every epoch
        assert rank["batches"] == [RECORDS // WORLD // BATCH] * EPOCHS
        assert rank["resume_from"] == SAVE_AFTER * BATCH
        assert rank["resumed"] == rank["epochs"][1][SAVE_AFTER * BATCH :]
        assert rank["last_loss"] < rank["first_loss"]
