"""`make demo`: generate mixed-size JPEGs, run the ImageNet-style pipeline, report speed.

Usage: python examples/demo.py [--images N] [--data DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import dataio
from dataio.testing import make_jpegs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--data", default=".demo-data")
    args = parser.parse_args()

    started = time.perf_counter()
    paths = make_jpegs(Path(args.data), args.images, min_side=256, max_side=1400, seed=1)
    print(f"dataset: {len(paths)} JPEGs in {args.data}/ ({time.perf_counter() - started:.1f} s)")

    pipe = dataio.pipeline(
        dataio.slot("image")
        .decode_image(mode="rgb")
        .resize_short(256)
        .center_crop(h=224, w=224)
        .normalize("imagenet"),
        dataio.slot("label").passthrough(),
        dataio.batch(64, prefetch=4),
    )
    print(pipe.explain())
    output = "torch" if importlib.util.find_spec("torch") else "numpy"
    if output == "torch":
        import torch  # noqa: F401 - import outside the timed loop
    records = [{"image": str(p), "label": i % 10} for i, p in enumerate(paths)]

    started = time.perf_counter()
    rows = 0
    with pipe.bind(records).run(output) as loader:
        for number, batch in enumerate(loader):
            rows += len(batch)
            if number < 3 or rows == len(records):
                print(f"batch {number:>3}: {batch!r}")
    elapsed = time.perf_counter() - started
    workers = dataio.capabilities()["cpu_workers"]
    print(
        f"{rows} images -> {output} in {elapsed:.2f} s: {rows / elapsed:.0f} images/s "
        f"on {workers} CPU worker(s)"
    )


if __name__ == "__main__":
    main()
