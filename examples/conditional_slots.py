"""Optional slots, shape branches and batch transforms in one pipeline.

A mask slot is decoded only for records that have a mask id (the others are never
read); tall images are center-cropped and the rest resized; labels are mixed with MixUp.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

import dataio
from dataio import batch_transforms as bt
from dataio import cond as c
from dataio import transforms as t
from dataio.testing import photo_like


def encode(width: int, height: int, seed: int, mode: str = "RGB") -> bytes:
    image = Image.fromarray(photo_like(width, height, np.random.default_rng(seed))).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def main() -> None:
    records = [
        {
            "image": encode(64, 96 if i % 2 else 48, i),
            "mask": encode(32, 32, 100 + i, "L") if i % 3 == 0 else None,
            "mask_id": i if i % 3 == 0 else None,
            "label": i % 4,
        }
        for i in range(8)
    ]
    pipe = dataio.pipeline(
        dataio.slot("image")
        .decode_image()
        .when(c.shape(axis=0).gt(64))
        .then(t.center_crop(h=48, w=48))
        .otherwise(t.resize(h=48, w=48))
        .normalize("imagenet"),
        dataio.slot("mask", optional=True)
        .active_when(c.col("mask_id").is_not_null())
        .decode_image(mode="gray")
        .resize(h=16, w=16),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
        bt.mixup(alpha=0.4, label="label", num_classes=4),
    )
    print(pipe.explain())
    with pipe.bind(records).run("numpy", seed=0) as loader:
        for batch in loader:
            masks = ["-" if m is None else m.shape for m in batch["mask"]]
            print(batch, "masks:", masks, "label rows sum to", batch["label"].sum(axis=1))


if __name__ == "__main__":
    main()
