"""Precomputed latents in safetensors files feeding a pipeline, plus checkpoint I/O.

Each record points at one safetensors file holding a latent tensor; the slot decodes it
(memory-mapped, no copy of the file) and batches stack them. A small "model" state dict is
written as Hugging Face-style shards and read back zero-copy.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import dataio


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        records = []
        for i in range(6):
            path = root / f"latent-{i}.safetensors"
            dataio.write_safetensors(path, {"latent": rng.standard_normal((4, 8, 8), np.float32)})
            records.append({"latent": str(path), "key": f"img-{i}"})

        pipe = dataio.pipeline(
            dataio.slot("latent").decode_safetensors(key="latent"), dataio.batch(3)
        )
        with pipe.bind(records).run("numpy") as loader:
            for batch in loader:
                print(batch.row_keys, batch["latent"].shape, batch["latent"].dtype)

        state = {f"layer.{i}.weight": rng.standard_normal((64, 64), np.float32) for i in range(8)}
        dataio.write_safetensors(
            root / "ckpt", state, max_shard_size="40KB", metadata={"step": "100"}
        )
        shards = sorted(p.name for p in (root / "ckpt").iterdir())
        loaded = dataio.read_safetensors(root / "ckpt", keys=["layer.3.weight"])
        print(shards)
        print("layer.3 equal:", np.array_equal(loaded["layer.3.weight"], state["layer.3.weight"]))


if __name__ == "__main__":
    main()
