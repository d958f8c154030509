"""A node removed from a 2-node test cluster mid-job: the output is still complete and
in order (Ray reruns what the node held; values do not depend on where rows ran).

Started only inside a namespace with nothing but ``lo`` (see conftest.py).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
import dataio.ray

ROWS = 48


@pytest.fixture(scope="module")
def cluster(ray_ready: Any) -> Iterator[tuple[Any, Any]]:
    from ray.cluster_utils import Cluster

    ray = ray_ready

    # short health checks: a removed node is declared dead in about a second
    test_cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "object_store_memory": 100 * 2**20,
            "_system_config": {
                "health_check_initial_delay_ms": 0,
                "health_check_period_ms": 200,
                "health_check_failure_threshold": 3,
            },
        },
    )
    worker = test_cluster.add_node(num_cpus=2, object_store_memory=100 * 2**20)
    ray.init(address=test_cluster.address, log_to_driver=False)
    try:
        yield test_cluster, worker
    finally:
        ray.shutdown()
        test_cluster.shutdown()


def _images() -> pa.Table:
    rng = np.random.default_rng(5)
    images = []
    for _ in range(ROWS):
        out = io.BytesIO()
        pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(out, format="JPEG")
        images.append(out.getvalue())
    return pa.table({"jpeg": pa.array(images, pa.binary()), "id": np.arange(ROWS)})


def test_a_node_removed_mid_job_is_recovered_complete_and_ordered(cluster) -> None:
    test_cluster, worker = cluster
    table = _images()
    pipe = dataio.pipeline(
        dataio.slot("image", field="jpeg").decode_image().random_resized_crop(h=16, w=16),
        dataio.slot("id").passthrough(),
        dataio.batch(4),
    )
    ds = dataio.ray.map_pipeline(
        dataio.ray.from_table(table, blocks=12),
        pipe,
        seed=2,
        actors=2,
        cpus_per_actor=0.5,
        batch_size=4,
    )
    parts = []
    for i, batch in enumerate(ds.iter_batches(batch_format="pyarrow", batch_size=None)):
        parts.append(batch)
        if i == 0:
            test_cluster.remove_node(worker)
    got = pa.concat_tables(parts)
    assert len(test_cluster.list_all_nodes()) == 1
    with pipe.bind(table).run("arrow", seed=2) as loader:
        want = pa.Table.from_batches(list(loader))
    assert got["__index__"].to_pylist() == list(range(ROWS))
    assert got["id"].to_pylist() == list(range(ROWS))
    image = got["image"].combine_chunks()
    values = image.to_numpy_ndarray() if hasattr(image, "to_numpy_ndarray") else image.to_numpy()
    np.testing.assert_array_equal(values, want["image"].combine_chunks().to_numpy_ndarray())
