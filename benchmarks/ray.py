"""The image chain on Ray Data (1- and 2-node local test clusters) vs the local loader.

JPEGs (photo-like, 320-640 x 280-520, quality 90) in an Arrow table, the ImageNet-style
chain ``decode -> resize_short(256) -> center_crop(224) -> normalize("imagenet")``:

* local: ``pipe.bind(table).run("numpy")`` with a 2-thread dataio pool (2 CPUs);
* Ray, 1 node of 1 CPU and 2 nodes of 1 CPU each (``ray.cluster_utils.Cluster``):
  ``map_pipeline(from_table(...), actors=nodes, cpus_per_actor=0.5)``, one dataio
  thread per actor, consumed with ``iter_batches``.

The images are repeated ``--repeat`` times in one run. ``wall`` counts the actors'
start (they import dataio, numpy, pyarrow), ``steady`` is the rate from the first batch
received to the last. The ratio the issue
targets is Ray's 2-node steady rate per CPU over the local loader's per CPU (>= 0.7x).
On this machine every "node" shares the same 2 cores: the 1 -> 2 node scaling says what
Ray's scheduling costs, not what a second machine adds.

Ray starts only inside a network namespace with nothing but ``lo``::

    unshare -n -- sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 \\
        .venv/bin/python benchmarks/ray.py [--images N] [--repeat K]'

Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import sys
import time

# this file is ray.py: its folder on sys.path would shadow Ray's package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from PIL import Image  # noqa: E402

import dataio  # noqa: E402
from dataio.testing import photo_like  # noqa: E402

BATCH = 16


def refuse_outside_namespace() -> None:
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"] or os.environ.get("RAY_USAGE_STATS_ENABLED") != "0":
        sys.exit(
            f"benchmarks/ray.py starts Ray only in a network namespace with nothing but lo "
            f"and RAY_USAGE_STATS_ENABLED=0 (here: {names}); run it as "
            "unshare -n -- sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 "
            "python benchmarks/ray.py'"
        )


def images(count: int) -> pa.Table:
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(count):
        width, height = int(rng.integers(320, 640)), int(rng.integers(280, 520))
        buffer = io.BytesIO()
        Image.fromarray(photo_like(width, height, rng)).save(buffer, format="JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    return pa.table({"jpeg": pa.array(jpegs, pa.binary()), "label": np.arange(count)})


def pipe() -> dataio.Pipeline:
    chain = (
        dataio.slot("image", field="jpeg")
        .decode_image()
        .resize_short(256)
        .center_crop(h=224, w=224)
        .normalize("imagenet")
    )
    return dataio.pipeline(chain, dataio.slot("label").passthrough(), dataio.batch(BATCH))


def local_rate(table: pa.Table) -> float:
    start = time.perf_counter()
    rows = 0
    with pipe().bind(table).run("numpy") as loader:
        for batch in loader:
            rows += len(batch)
    return rows / (time.perf_counter() - start)


def ray_rates(table: pa.Table, nodes: int) -> tuple[float, float]:
    """(wall, steady) images/s of one execution over ``table``."""
    import ray
    import ray.data
    from ray.cluster_utils import Cluster

    import dataio.ray

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": 150 * 2**20,
        },
    )
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, object_store_memory=150 * 2**20)
    ray.init(address=cluster.address, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    try:
        ds = dataio.ray.map_pipeline(
            dataio.ray.from_table(table, blocks=max(4, table.num_rows // BATCH)),
            pipe(),
            actors=nodes,
            cpus_per_actor=0.5,
            batch_size=BATCH,
        )
        start = time.perf_counter()
        first = None
        rows = first_rows = 0
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            rows += batch.num_rows
            if first is None:  # actors started: the steady part begins
                first, first_rows = time.perf_counter(), batch.num_rows
        end = time.perf_counter()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert rows == table.num_rows, (rows, table.num_rows)
    assert first is not None
    return rows / (end - start), (rows - first_rows) / max(end - first, 1e-9)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64, help="distinct JPEGs")
    parser.add_argument("--repeat", type=int, default=8, help="passes over them in one run")
    args = parser.parse_args(argv)
    refuse_outside_namespace()
    os.environ["DATAIO_CPU_WORKERS"] = "2"  # the local loader: 2 threads on 2 CPUs
    distinct = images(args.images)
    table = pa.concat_tables([distinct] * args.repeat)
    local_rate(distinct)  # warm-up
    local = statistics.median(local_rate(table) for _ in range(3))
    one_wall, one = ray_rates(table, 1)
    two_wall, two = ray_rates(table, 2)
    print(
        f"{table.num_rows} images ({args.images} x {args.repeat}), batches of {BATCH}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"{'run':<34}{'CPUs':>5}{'img/s':>9}{'img/s/CPU':>11}")
    print(f"{'local loader (2 threads)':<34}{2:>5}{local:>9.1f}{local / 2:>11.1f}")
    for name, cpus, rate in (
        ("ray 1 node, steady", 1, one),
        ("ray 1 node, wall (actor start)", 1, one_wall),
        ("ray 2 nodes, steady", 2, two),
        ("ray 2 nodes, wall (actor start)", 2, two_wall),
    ):
        print(f"{name:<34}{cpus:>5}{rate:>9.1f}{rate / cpus:>11.1f}")
    ratio = (two / 2) / (local / 2)
    print(f"target ray 2 nodes vs local loader per CPU >= 0.70x: {ratio:.2f}x")
    print(f"scaling ray 1 -> 2 nodes (steady): {two / one:.2f}x")


if __name__ == "__main__":
    main()
