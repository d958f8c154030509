"""An indexed dataset with a bulk read, sharded across ranks, checkpointed and resumed.

``__getitems__`` receives the positions of a whole batch; the loader calls it once per
batch. A checkpoint taken mid-epoch resumes exactly where it stopped.
"""

from __future__ import annotations

import dataio


class Squares:
    """A map-style dataset: row i is {"key": i, "value": i * i}."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.bulk_reads = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"key": i, "value": i * i}

    def __getitems__(self, indices: list[int]) -> list[dict]:
        self.bulk_reads += 1
        return [self[i] for i in indices]


def collate(batch: dataio.Batch) -> dict:
    """A custom Python collator after the native stage."""
    return {"keys": batch.row_keys, "total": sum(batch["value"])}


def main() -> None:
    dataset = Squares(20)
    source = dataio.records(dataset, indexed=True).shuffle(seed=1)
    pipe = dataio.pipeline(dataio.slot("value").passthrough(), dataio.batch(4), dataio.map(collate))
    for rank in range(2):
        loader = pipe.bind(source).run(shard={"id": rank, "of": 2, "pad": True})
        print(f"rank {rank}: {len(loader)} batches")
        first = next(loader)
        state = loader.state_dict()
        loader.close()
        resumed = pipe.bind(source).run(shard={"id": rank, "of": 2, "pad": True})
        resumed.load_state_dict(state)
        rest = list(resumed)
        print(f"  first {first}, then {len(rest)} more after resume")
    print("bulk reads:", dataset.bulk_reads)


if __name__ == "__main__":
    main()
