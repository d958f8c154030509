"""The image chain on Ray Data (1- and 2-node local test clusters) vs the local loader.

JPEGs (photo-like, 320-640 x 280-520, quality 90) in an Arrow table, the ImageNet-style
chain ``decode -> resize_short(256) -> center_crop(224) -> normalize("imagenet")``
(float32 CHW out, 602 KB an image), all runs on the same 2 cores:

* local: ``pipe.bind(table).run("numpy")`` with a 2-thread dataio pool;
* Ray, 1 node of 2 CPUs, and 2 nodes of 1 CPU each (``ray.cluster_utils.Cluster``):
  ``map_pipeline(from_table(...), actors=2, cpus_per_actor=1)`` (one actor per CPU, one
  dataio thread each), batches of ``--batch`` rows (default ``batch_rows(pipe)``: about
  32 MiB of output), consumed by the driver as float32 NumPy batches of that size
  through ``train_feed``; on 2 nodes also with ``normalize="feed"`` (``uint8`` through Ray's
  object stores, a quarter of the bytes, normalized by ``train_feed`` in the driver).

Each configuration's cluster is started once; then ``--rounds`` rounds, each a local
pass and a Ray pass (one dataset execution: Ray starts its actors for each) over
``--images`` distinct JPEGs repeated ``--repeat`` times. ``steady`` is the Ray rate
after the first batch of every actor arrived (the actors have started: they import
dataio, numpy, pyarrow), ``wall`` the whole pass. Reported: median and min..max over the
rounds, the per-round ratio to the local pass of the same round, and the load average.

On this machine every "node" shares the same 2 cores with the raylets, object stores
and the driver: the 2-node figure says what Ray's second node costs (object transfers
between two object stores, a second raylet), not what a second machine adds.

Ray starts only inside a network namespace with nothing but ``lo``::

    unshare -n -- sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 \\
        .venv/bin/python benchmarks/ray.py [--images N] [--repeat K] [--rounds R] [--batch B]'

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
from typing import Any

# this file is ray.py: its folder on sys.path would shadow Ray's package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from PIL import Image  # noqa: E402

import dataio  # noqa: E402
from dataio.testing import photo_like  # noqa: E402


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
    return dataio.pipeline(chain, dataio.slot("label").passthrough(), dataio.batch(64))


def local_rate(table: pa.Table) -> float:
    start = time.perf_counter()
    rows = 0
    with pipe().bind(table).run("numpy") as loader:
        for batch in loader:
            rows += len(batch)
    return rows / (time.perf_counter() - start)


def start_cluster(nodes: int) -> Any:
    """A local test cluster of ``nodes`` nodes, 2 CPUs in all, connected."""
    import ray
    import ray.data
    from ray.cluster_utils import Cluster

    store = 300 * 2**20 // nodes
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2 // nodes,
            "include_dashboard": False,
            "object_store_memory": store,
        },
    )
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=2 // nodes, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    return cluster


def ray_pass(table: pa.Table, batch: int, *, normalize: str = "actors") -> tuple[float, float]:
    """(wall, steady) images/s of one execution over ``table``, consumed as float32 NumPy
    batches through ``train_feed``, of Ray's batch size (re-batching would copy every
    batch once more: a 64-row batch out of 55-row blocks is two Arrow chunks)."""
    import dataio.ray

    actors = 2
    ds = dataio.ray.map_pipeline(
        dataio.ray.from_table(table, blocks=max(actors, table.num_rows // batch)),
        pipe(),
        actors=actors,
        cpus_per_actor=1.0,
        batch_size=batch,
        normalize=normalize,  # type: ignore[arg-type]
    )
    start = time.perf_counter()
    arrivals: list[tuple[float, int]] = []
    for part in dataio.ray.train_feed(ds, batch_size=batch):
        assert part["image"].dtype == np.float32
        arrivals.append((time.perf_counter(), len(part)))
    end = time.perf_counter()
    rows = sum(n for _, n in arrivals)
    assert rows == table.num_rows, (rows, table.num_rows)
    # steady: after every actor delivered its first batch (all have started)
    settled = min(actors, len(arrivals) - 1)
    since = arrivals[settled - 1][0] if settled else start
    later = sum(n for _, n in arrivals[settled:])
    return rows / (end - start), later / max(end - since, 1e-9)


def spread(values: list[float], digits: int = 1) -> str:
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{median:8.{digits}f}  ({low:.{digits}f}..{high:.{digits}f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64, help="distinct JPEGs")
    parser.add_argument("--repeat", type=int, default=24, help="passes over them in one run")
    parser.add_argument("--rounds", type=int, default=3, help="local + Ray passes per cluster")
    parser.add_argument("--batch", type=int, default=None, help="rows per Ray batch")
    args = parser.parse_args(argv)
    refuse_outside_namespace()
    import ray

    import dataio.ray

    os.environ["DATAIO_CPU_WORKERS"] = "2"  # the local loader: 2 threads on 2 CPUs
    batch = args.batch or dataio.ray.batch_rows(pipe())
    distinct = images(args.images)
    table = pa.concat_tables([distinct] * args.repeat)
    local_rate(distinct)  # warm-up
    loads = [os.getloadavg()[0]]
    local: list[float] = []
    rows: list[tuple[str, list[float], list[float], list[float]]] = []
    runs = [(1, "actors"), (2, "actors"), (2, "feed")]
    for nodes in (1, 2):
        cluster = start_cluster(nodes)
        found: dict[str, tuple[list[float], list[float], list[float]]] = {}
        try:
            for _ in range(args.rounds):
                here = local_rate(table)
                local.append(here)
                for normalize in [n for k, n in runs if k == nodes]:
                    wall, steady = ray_pass(table, batch, normalize=normalize)
                    walls, steadies, ratios = found.setdefault(normalize, ([], [], []))
                    walls.append(wall)
                    steadies.append(steady)
                    ratios.append(steady / here)
                loads.append(os.getloadavg()[0])
        finally:
            ray.shutdown()
            cluster.shutdown()
        for normalize, (walls, steadies, ratios) in found.items():
            name = f"ray {nodes} node{'s' if nodes > 1 else ''}"
            name += ", normalize in feed" if normalize == "feed" else ""
            rows.append((name, steadies, walls, ratios))
    print(
        f"{table.num_rows} images ({args.images} x {args.repeat}), Ray batches of {batch} "
        f"({batch * 3 * 224 * 224 * 4 / 2**20:.0f} MiB out), {args.rounds} rounds per "
        f"cluster; load average {min(loads):.1f}..{max(loads):.1f} on {os.cpu_count()} cores"
    )
    print(f"{'run (2 CPUs each)':<40}{'img/s median (min..max)':>30}{'vs local, per round':>30}")
    print(f"{'local loader, 2 threads':<40}{spread(local):>30}")
    for name, steadies, walls, ratios in rows:
        print(f"{name + ', steady':<40}{spread(steadies):>30}{spread(ratios, 2):>30}")
        print(f"{name + ', wall':<40}{spread(walls):>30}")
    two = statistics.median(rows[1][3])
    print(f"target ray 2 nodes vs local loader per CPU >= 0.70x: {two:.2f}x (median of rounds)")
    one = statistics.median(rows[0][1])
    print(
        f"1 -> 2 nodes on the same 2 cores (what a second node costs, not scaling): "
        f"{statistics.median(rows[1][1]) / one:.2f}x"
    )
    feed = statistics.median(rows[2][3])
    print(
        f"ray 2 nodes with normalize='feed' (uint8 through Ray, normalized by train_feed) "
        f"vs local loader per CPU: {feed:.2f}x (median of rounds)"
    )


if __name__ == "__main__":
    main()
