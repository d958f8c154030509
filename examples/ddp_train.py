"""Distributed data parallel training on dataio: two gloo processes on 127.0.0.1.

Each rank builds the same loader with ``shard="auto"`` (rank and world size come from the
initialized ``torch.distributed`` group), trains a tiny model wrapped in
``DistributedDataParallel`` for a few epochs, and records the keys it saw. The shuffle
reorders every epoch from ``(seed, epoch)``; ``pad=True`` (the default) gives every rank
the same batch count, which DDP's collective calls need. Midway through epoch 1 each rank
saves ``loader.state_dict()``; after training a fresh loader restores it and must
deliver exactly the rest of that epoch.

Run it::

    python examples/ddp_train.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dataio

WORLD = 2
EPOCHS = 3
RECORDS = 48
BATCH = 4
SAVE_AFTER = 2  # batches into epoch 1


def make_records() -> list[dict[str, Any]]:
    """Four features and a label that depends on them, one key per record."""
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(RECORDS, 4, generator=generator)
    labels = (features.sum(dim=1) > 0).long()
    return [{"key": i, "x": features[i].numpy(), "y": int(labels[i])} for i in range(RECORDS)]


def make_loader() -> dataio.Loader:
    """The same loader on every rank; ``shard="auto"`` picks this rank's records."""
    pipe = dataio.pipeline(
        dataio.slot("x").passthrough(),
        dataio.slot("y").passthrough(),
        dataio.slot("key").passthrough(),
        dataio.batch(BATCH),
    )
    source = dataio.records(make_records()).shuffle(seed=7)
    return pipe.bind(source).run("torch", shard="auto", seed=7)


def train(rank: int, port: int, out: str) -> None:
    """One rank: join the group, train, check resume, write what it saw."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = make_loader()
        seen: list[list[int]] = []
        saved: dict[str, Any] | None = None
        losses = []
        for epoch in range(EPOCHS):
            keys: list[int] = []
            for step, batch in enumerate(loader):
                x = torch.from_numpy(np.stack(batch["x"]))  # a passthrough of arrays: a list
                loss = torch.nn.functional.cross_entropy(model(x), batch["y"])
                optimizer.zero_grad()
                loss.backward()  # all-reduces gradients across ranks
                optimizer.step()
                losses.append(float(loss.detach()))
                keys += batch["key"].tolist()
                if epoch == 1 and step == SAVE_AFTER - 1:
                    saved = loader.state_dict()
            seen.append(keys)
        assert saved is not None
        restarted = make_loader()
        restarted.load_state_dict(saved)
        resumed = [k for batch in restarted for k in batch["key"].tolist()]
        result = {
            "rank": rank,
            "shard": loader.state_dict()["shard"],
            "epochs": seen,
            "batches": [len(keys) // BATCH for keys in seen],
            "resumed": resumed,
            "resume_from": saved["samples_consumed"],
            "first_loss": losses[0],
            "last_loss": losses[-1],
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port nobody listens on right now, on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(out: Path) -> list[dict[str, Any]]:
    """Spawn the ranks; return each rank's record of what it saw."""
    mp.spawn(train, args=(free_port(), str(out)), nprocs=WORLD, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def main() -> None:
    """Train, then check what a DDP user relies on and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where each rank writes rank<N>.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        ranks = run(out)
    for epoch in range(EPOCHS):
        parts = [set(r["epochs"][epoch]) for r in ranks]
        assert not parts[0] & parts[1], "ranks overlap"
        assert parts[0] | parts[1] == set(range(RECORDS)), "a record was missed"
    for r in ranks:
        assert r["epochs"][0] != r["epochs"][1], "the epoch was not reshuffled"
        assert r["resumed"] == r["epochs"][1][SAVE_AFTER * BATCH :], "resume is not exact"
        print(
            f"rank {r['rank']} of {WORLD}: batches per epoch {r['batches']}, "
            f"loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}, "
            f"resumed epoch 1 after {r['resume_from']} samples exactly"
        )
    assert ranks[0]["batches"] == ranks[1]["batches"]


if __name__ == "__main__":
    main()
