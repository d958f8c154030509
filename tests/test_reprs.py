"""Short reprs (loaders, sources, bound pipelines) and notebook HTML views (batches,
frames) that say what an object is and never read data they do not hold."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import dataio

ADDRESS = re.compile(r"object at 0x")
PIPE = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(4))


def rows(n: int) -> list[dict[str, object]]:
    return [{"x": i, "key": f"k{i}"} for i in range(n)]


def never_called() -> list[object]:
    raise AssertionError("a repr read the source")


@pytest.mark.parametrize(
    ("source", "text"),
    [
        (dataio.records(rows(3)), "records(list)[3 rows]"),
        (dataio.records(pa.table({"a": [1, 2]})), "records(pyarrow.Table, {a: int64})[2 rows]"),
        (
            dataio.records(rows(10)).shuffle(seed=1),
            "records(list).shuffle(seed=1, reshuffle_each_epoch=True)[10 rows]",
        ),
        (
            dataio.records(rows(4)).shuffle(seed=2, buffer_size=8),
            "records(list).shuffle(seed=2, buffer_size=8, reshuffle_each_epoch=True)",
        ),
        (dataio.from_iterator(iter(rows(2))), "records(iterator)"),
        (dataio.from_callable(never_called), f"records({__name__}.never_called)"),
        (
            dataio.records(rows(3)).map_records(dict).filter(bool),
            "records(list).map_records(builtins.dict).filter(builtins.bool)",
        ),
        (
            dataio.records(rows(1)).concat(dataio.records(rows(2))),
            "concat(records(list), records(list))",
        ),
        (dataio.webdataset("/data/shard-{000..009}.tar"), "webdataset(pattern="),
    ],
)
def test_source_reprs(source: dataio.Source, text: str) -> None:
    shown = repr(source)
    assert shown.startswith(text), shown
    assert not ADDRESS.search(shown) and len(shown) < 200


def test_a_repr_never_reads_or_counts_a_lazy_source() -> None:
    # a factory that fails when called, under a filter (its length is not free)
    source = dataio.from_callable(never_called).filter(bool)
    assert repr(source) == f"records({__name__}.never_called).filter(builtins.bool)"


def test_files_and_frames_in_sources(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.bin").write_bytes(b"x")
    shown = repr(dataio.files(str(tmp_path / "*.bin")))
    assert shown.startswith("files(pattern='/") and shown.endswith("/*.bin')[3 rows]"), shown
    assert len(shown) < 100
    pq.write_table(pa.table({"a": np.arange(7)}), tmp_path / "t.parquet")
    frame = dataio.scan_parquet(str(tmp_path / "t.parquet"))
    shown = repr(frame.shuffle(seed=0))
    assert shown.startswith("frame(scan_parquet(") and shown.endswith("[7 rows]"), shown


def test_bound_pipeline_repr_is_short_for_a_million_records() -> None:
    bound = PIPE.bind(list(range(1_000_000)))
    shown = repr(bound)
    assert shown == (
        f"BoundPipeline(pipeline {PIPE.signature()[:12]}: slots [x], batch(4), "
        "records=list[1000000])"
    )
    table = pa.table({"x": np.arange(5)})
    assert repr(PIPE.bind(table)).endswith("records=Table[5 rows])")
    assert repr(PIPE.bind(dataio.records(rows(2)))).endswith("records=records(list)[2 rows])")


def test_loader_repr_follows_epoch_position_and_state() -> None:
    loader = PIPE.bind(rows(10)).run()
    head = f"Loader(pipeline {PIPE.signature()[:12]}: slots [x], batch(4); "
    head += "source=records(list)[10 rows]; output='numpy', "
    assert repr(loader) == head + "epoch=0, position=0, state='ready')"
    passing = iter(loader)
    next(passing)
    assert repr(loader) == head + "epoch=0, position=4, state='running')"
    state = loader.state_dict()
    list(passing)
    assert repr(loader) == head + "epoch=1, position=0, state='ready')"
    loader.load_state_dict(state)
    assert repr(loader) == head + "epoch=0, position=4, state='ready')"
    loader.close()
    assert repr(loader) == head + "epoch=0, position=4, state='closed')"


def test_batch_html_shows_slots_keys_errors_and_thumbnails(tmp_path: Path) -> None:
    paths = dataio.testing.make_jpegs(tmp_path, 3, min_side=24, max_side=32)
    records: list[dict[str, object]] = [
        {"image": p.read_bytes(), "key": p.stem, "label": i, "name": f"n{i}"}
        for i, p in enumerate(paths)
    ]
    records.append({"image": b"not a jpeg", "key": "broken", "label": 9, "name": "n9"})
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=20, w=20).normalize("imagenet"),
        dataio.slot("label").passthrough(),
        dataio.slot("name").passthrough(),
        dataio.batch(4),
    )
    with pipe.bind(records).run(on_failure="skip") as loader:
        (batch,) = list(loader)
    page = batch._repr_html_()
    assert "<b>Batch</b>: 3 rows, 1 dropped row(s)" in page
    assert "<td>image</td><td>float32</td><td>[3, 3, 20, 20]</td>" in page
    assert "<td>label</td><td>int64</td><td>[3]</td><td>0, 1, 2</td>" in page
    assert "<td>name</td><td>list</td><td>[3]</td><td>&#x27;n0&#x27;, &#x27;n1&#x27;" in page
    assert "row keys: " + ", ".join(p.stem for p in paths) in page
    assert "dropped:" in page and "broken" in page
    found = re.search(r'src="data:image/png;base64,([^"]+)"', page)
    assert found is not None
    thumbnails = Image.open(io.BytesIO(base64.b64decode(found.group(1))))
    assert thumbnails.tobytes() == dataio.show(batch, "image", size=64, columns=8).tobytes()


def test_frame_html_previews_cheap_plans(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"a": np.arange(100), "b": [f"s{i}" for i in range(100)]}), tmp_path / "t.parquet"
    )
    frame = dataio.scan_parquet(str(tmp_path / "t.parquet"))
    page = frame.select("b").limit(3, offset=10)._repr_html_()
    assert "<td>b</td><td>string</td>" in page
    assert "first 3 rows:" in page
    assert "<td>&#x27;s10&#x27;</td>" in page and "<td>&#x27;s12&#x27;</td>" in page
    memory = dataio.sql("SELECT * FROM t", t=pa.table({"v": [1]}))
    assert "not executed" in memory._repr_html_()  # SQL runs a query: no preview


def test_frame_html_runs_nothing_expensive(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": np.arange(10)}), path)
    frame = dataio.scan_parquet(str(path))
    filtered = frame.filter(dataio.col("a") > 3)
    sorted_ = frame.sort("a", descending=True)
    computed = frame.with_columns(b=dataio.col("a") * 2)
    path.unlink()  # running any of these plans would now fail
    for lazy in (filtered, sorted_, computed):
        page = lazy._repr_html_()
        assert "not executed" in page and "<td>a</td><td>int64</td>" in page


def test_frame_preview_reads_only_the_first_file_of_a_scan(tmp_path: Path) -> None:
    for i in range(3):
        part = pa.table({"a": np.arange(i * 10, i * 10 + 10)})
        pq.write_table(part, tmp_path / f"{i}.parquet")
    frame = dataio.scan_parquet(str(tmp_path / "*.parquet"))
    (tmp_path / "1.parquet").unlink()  # a collect would now fail on these
    (tmp_path / "2.parquet").unlink()
    page = frame._repr_html_()
    assert "first 5 rows:" in page
    assert "<td>0</td>" in page and "<td>4</td>" in page and "<td>5</td>" not in page
    with pytest.raises(dataio.DataioError):
        frame.collect()
