"""``map_pipeline(..., normalize="feed")``: uint8 through Ray, normalized by ``train_feed``.

Oracles: a local loader of the same chain stopped at ``uint8`` (the pixels the actors
make), normalized here with NumPy from the ImageNet mean and std; and the local loader
of the whole chain (fused normalize), which differs by at most ``0.5 / (255 * std)``.
Started only inside a namespace with nothing but ``lo``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import dataio
import dataio.ray

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def frame(tmp_path_factory: pytest.TempPathFactory) -> dataio.LazyFrame:
    root = tmp_path_factory.mktemp("normalize")
    rng = np.random.default_rng(2)
    jpegs = []
    for _ in range(18):
        h, w = (int(v) for v in rng.integers(30, 60, 2))
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(out, format="JPEG")
        jpegs.append(out.getvalue())
    table = pa.table({"jpeg": pa.array(jpegs, pa.binary()), "label": np.arange(18)})
    pq.write_table(table, Path(root) / "images.parquet", row_group_size=6)
    return dataio.scan_parquet(str(Path(root) / "images.parquet"))


def _chain(normalize: bool) -> dataio.Pipeline:
    image = dataio.slot("image", field="jpeg").decode_image().random_resized_crop(h=20, w=20)
    if normalize:
        image = image.normalize("imagenet")  # CHW float32; without it, HWC uint8
    return dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(4))


def _local(pipe: dataio.Pipeline, frame: dataio.LazyFrame) -> np.ndarray:
    with pipe.bind(frame).run("numpy", seed=7) as loader:
        return np.concatenate([b["image"] for b in loader])


def test_uint8_crosses_ray_and_the_feed_normalizes(ray_session, frame) -> None:
    ds = dataio.ray.map_pipeline(
        frame.to_ray(), _chain(True), seed=7, cpus_per_actor=0.5, normalize="feed"
    ).materialize()
    image = ds.schema().base_schema.field("image")
    assert "uint8" in str(image.type) and "[3,20,20]" in str(image.type)  # a quarter the bytes
    got = np.concatenate([b["image"] for b in dataio.ray.train_feed(ds, batch_size=5)])
    assert got.dtype == np.float32 and got.shape == (18, 3, 20, 20)

    # the oracle: the same chain's uint8 pixels (HWC) normalized with NumPy
    pixels = _local(_chain(False), frame).transpose(0, 3, 1, 2)
    scale = (1.0 / (255.0 * STD)).astype(np.float32).reshape(1, 3, 1, 1)
    bias = (-MEAN / STD).astype(np.float32).reshape(1, 3, 1, 1)
    np.testing.assert_array_equal(got, pixels.astype(np.float32) * scale + bias)

    fused = _local(_chain(True), frame)  # normalized before rounding to uint8
    bound = (0.5 / (255.0 * STD)).reshape(1, 3, 1, 1) + 1e-6
    assert (np.abs(got - fused) <= bound).all()

    torch = pytest.importorskip("torch")
    batches = list(dataio.ray.train_feed(ds, batch_size=5, output="torch"))
    as_torch = torch.cat([b["image"] for b in batches])
    assert as_torch.dtype == torch.float32
    np.testing.assert_array_equal(as_torch.numpy(), got)
    assert torch.equal(torch.cat([b["label"] for b in batches]), torch.arange(18))


def test_actors_normalize_by_default_equal_to_the_local_loader(ray_session, frame) -> None:
    ds = dataio.ray.map_pipeline(frame.to_ray(), _chain(True), seed=7, cpus_per_actor=0.5)
    got = np.concatenate([b["image"] for b in dataio.ray.train_feed(ds, batch_size=5)])
    np.testing.assert_array_equal(got, _local(_chain(True), frame))


def test_normalize_must_be_actors_or_feed(ray_session, frame) -> None:
    with pytest.raises(dataio.PlanError, match="normalize must be 'actors' or 'feed'"):
        dataio.ray.map_pipeline(frame.to_ray(), _chain(True), normalize="gpu")


def test_a_feed_of_batch_size_none_yields_the_pipelines_batches(ray_session, frame) -> None:
    ds = dataio.ray.map_pipeline(
        frame.to_ray(), _chain(True), seed=7, cpus_per_actor=0.5, batch_size=5
    )
    batches = list(dataio.ray.train_feed(ds, batch_size=None))
    assert [len(b) for b in batches] == [5, 5, 5, 3]  # map_pipeline's batches, as they come
    assert [i for b in batches for i in b.indices] == list(range(18))
    got = np.concatenate([b["image"] for b in batches])
    np.testing.assert_array_equal(got, _local(_chain(True), frame))
