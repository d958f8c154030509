"""Keep an existing Python collate function: raw samples through a passthrough slot.

Native slots decode; a batch map after the shape stage turns each Batch into whatever
structure the training loop wants.
"""

from __future__ import annotations

import tempfile

import numpy as np

import dataio
from dataio.testing import make_jpegs


def collate(samples: list[dict], images: np.ndarray) -> dict:
    """A typical hand-written collate: stack what stacks, keep the rest as lists."""
    return {
        "pixels": images,
        "labels": np.array([s["label"] for s in samples]),
        "captions": [s["caption"] for s in samples],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_jpegs(tmp, 10, min_side=200, max_side=500)
        records = [
            {"image": str(p), "sample": {"label": i % 3, "caption": f"picture {i}"}}
            for i, p in enumerate(paths)
        ]
        pipe = dataio.pipeline(
            dataio.slot("image").decode_image().resize(h=96, w=96),
            dataio.slot("sample").passthrough(),
            dataio.batch(4),
            dataio.map(lambda batch: collate(batch["sample"], batch["image"])),
        )
        with pipe.bind(records).run("numpy") as loader:
            for out in loader:
                print(out["pixels"].shape, out["labels"].tolist(), out["captions"][0])


if __name__ == "__main__":
    main()
