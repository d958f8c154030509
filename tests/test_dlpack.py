"""DLPack both ways (issue #18, item 2): every route to a tensor shares memory, no copy.

* loader outputs reach torch through ``torch.from_dlpack`` (``run("torch")``), tensor
  columns of a ``Batch`` are DLPack producers, ``fixed_shape_tensor`` results of frames
  and SQL chains through :func:`dataio.tensor_view`, and
  ``read_safetensors(framework="dlpack")``: each checked by data pointers (the tensor's
  ``data_ptr()`` against the NumPy array's or the Arrow buffer's address);
* the stream handshake of CUDA memory, checked with a fake producer here and with a
  real side stream where a GPU exists.
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
import dataio.dlpack
from dataio import col
from dataio.engine.export import to_arrow, to_torch
from dataio.exceptions import DeviceError, PlanError

torch = pytest.importorskip("torch")


def image_pipe(rows: int = 4) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image").decode_image(mode="rgb").resize(h=16, w=16),
        dataio.slot("label").passthrough(),
        dataio.batch(rows),
    )


def image_records(tiny_images: list[bytes]) -> list[dict[str, Any]]:
    return [{"image": data, "label": i} for i, data in enumerate(tiny_images)]


def values_address(array: pa.Array) -> int:
    """Where row 0 of a numeric or ``fixed_shape_tensor`` Arrow array starts."""
    if isinstance(array.type, pa.FixedShapeTensorType):
        width = int(np.prod(array.type.shape))
        values = array.storage.values
        offset = array.storage.offset * width + values.offset
        return values.buffers()[1].address + offset * values.type.bit_width // 8
    return array.buffers()[1].address + array.offset * array.type.bit_width // 8


# -- loader outputs ---------------------------------------------------------------------


def test_run_torch_goes_through_from_dlpack_without_a_copy(
    tiny_images: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[tuple[int, int]] = []
    from_dlpack = torch.from_dlpack

    def spy(producer: Any) -> Any:
        tensor = from_dlpack(producer)
        address = producer.ctypes.data if isinstance(producer, np.ndarray) else producer.data_ptr
        handed.append((address, tensor.data_ptr()))
        return tensor

    monkeypatch.setattr(torch, "from_dlpack", spy)
    records = image_records(tiny_images)
    with image_pipe().bind(records).run("numpy") as loader:
        reference = [np.array(b["image"]) for b in loader]
    with image_pipe().bind(records).run("torch") as loader:
        batches = list(loader)
    assert [tuple(b["image"].shape) for b in batches] == [(4, 16, 16, 3)] * 2
    for batch, expected in zip(batches, reference, strict=True):
        np.testing.assert_array_equal(batch["image"].numpy(), expected)
    assert len(handed) == 4  # image and label of each batch, each through DLPack
    assert all(array == tensor for array, tensor in handed)


def test_to_torch_shares_each_numpy_column(tiny_images: list[bytes]) -> None:
    (batch, _) = list(image_pipe().bind(image_records(tiny_images)).run())
    tensors = to_torch(batch)
    for name in ("image", "label"):
        assert tensors[name].data_ptr() == batch[name].ctypes.data
        tensors[name].view(-1)[0] = 7  # one memory: a write shows through the array
        assert batch[name].reshape(-1)[0] == 7


def test_to_torch_takes_any_dlpack_producer(tiny_images: list[bytes]) -> None:
    """A column that is a DLPack producer but not NumPy (DALI's, CuPy's) is shared too."""
    (batch, _) = list(image_pipe().bind(image_records(tiny_images)).run())
    image = batch["image"]
    tensors = to_torch(batch.with_columns({"image": dataio.tensor_view(image)}))
    assert tensors["image"].data_ptr() == image.ctypes.data
    np.testing.assert_array_equal(tensors["image"].numpy(), image)


def test_run_arrow_takes_a_dlpack_column(tiny_images: list[bytes]) -> None:
    (batch, _) = list(image_pipe().bind(image_records(tiny_images)).run())
    image = batch["image"]
    exported = to_arrow(batch.with_columns({"image": dataio.tensor_view(image)}))
    column = exported.column("image")
    np.testing.assert_array_equal(column.to_numpy_ndarray(), image)


def test_to_torch_shares_dali_cpu_outputs() -> None:
    """What the DALI backend hands over (a ``TensorCPU``) reaches torch by DLPack."""
    from nvidia.dali.backend import TensorListCPU

    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    dali = TensorListCPU(values).as_tensor()
    tensor = to_torch(dataio.Batch({"x": dali}, keys=None, indices=[0, 1]))["x"]
    assert tensor.data_ptr() == dali.data_ptr()
    np.testing.assert_array_equal(tensor.numpy(), values)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_to_torch_exports_ml_dtypes_with_dlpack_type_codes(dtype: Any) -> None:
    values = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    array = values.astype(dtype)
    tensor = to_torch(dataio.Batch({"w": array}, keys=None, indices=[0, 1]))["w"]
    assert tensor.dtype == {ml_dtypes.bfloat16: torch.bfloat16}.get(dtype, torch.float8_e4m3fn)
    assert tensor.data_ptr() == array.ctypes.data
    np.testing.assert_array_equal(tensor.float().numpy(), values)


def test_run_torch_copies_read_only_arrow_columns() -> None:
    """A torch tensor is writable: over Arrow's immutable memory it would be a hazard."""
    table = pa.table({"v": pa.array(np.arange(8), pa.int64()), "s": list("abcdefgh")})
    pipe = dataio.pipeline(
        dataio.slot("v").passthrough(), dataio.slot("s").passthrough(), dataio.batch(8)
    )
    (batch,) = list(pipe.bind(table).run("torch"))
    batch["v"][0] = 99
    assert table.column("v").to_pylist() == list(range(8))
    assert isinstance(batch["s"], pa.Array)  # Arrow columns export DLPack, yet stay Arrow


# -- Batch columns ----------------------------------------------------------------------


def test_batch_tensor_columns_are_dlpack_producers(tiny_images: list[bytes]) -> None:
    (batch, _) = list(image_pipe().bind(image_records(tiny_images)).run())
    for name in ("image", "label"):
        column = batch[name]
        assert column.__dlpack_device__() == (1, 0)
        assert torch.from_dlpack(column).data_ptr() == column.ctypes.data
        assert np.from_dlpack(column).ctypes.data == column.ctypes.data


def test_batch_arrow_passthrough_columns_reach_torch_without_a_copy() -> None:
    """Numeric and ``fixed_shape_tensor`` columns of Arrow rows: views of the buffers."""
    grid = np.arange(6 * 2 * 3, dtype=np.float32).reshape(6, 2, 3)
    table = pa.table(
        {
            "label": pa.array(np.arange(6), pa.int64()),
            "t": pa.FixedShapeTensorArray.from_numpy_ndarray(grid),
        }
    )
    pipe = dataio.pipeline(
        dataio.slot("label").passthrough(), dataio.slot("t").passthrough(), dataio.batch(3)
    )
    batches = list(pipe.bind(table).run())
    for number, batch in enumerate(batches):
        for name in ("label", "t"):
            arrow = table.column(name).chunk(0).slice(3 * number, 3)
            tensor = torch.from_dlpack(batch[name])
            assert tensor.data_ptr() == values_address(arrow) == batch[name].ctypes.data
        np.testing.assert_array_equal(torch.from_dlpack(batch["t"]).numpy(), grid[3 * number :][:3])


# -- fixed_shape_tensor results ---------------------------------------------------------


@pytest.fixture(scope="module")
def jpeg_parquet(tiny_images: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dlpack") / "images.parquet"
    table = pa.table({"key": range(len(tiny_images)), "jpeg": pa.array(tiny_images, pa.binary())})
    pq.write_table(table, path)
    return path


def reference_images(tiny_images: list[bytes]) -> np.ndarray:
    pipe = dataio.pipeline(
        dataio.slot("x", field="jpeg").decode_image().resize(h=16, w=16).normalize("imagenet"),
        dataio.batch(len(tiny_images)),
    )
    (batch,) = list(pipe.bind([{"jpeg": data} for data in tiny_images]).run())
    return np.asarray(batch["x"])


def check_view(column: Any, expected: np.ndarray) -> None:
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    start = 0
    for chunk in chunks:
        assert isinstance(chunk.type, pa.FixedShapeTensorType)
        view = dataio.tensor_view(chunk)
        tensor = torch.from_dlpack(view)
        assert tensor.data_ptr() == view.data_ptr == values_address(chunk)
        np.testing.assert_array_equal(tensor.numpy(), expected[start : start + len(chunk)])
        start += len(chunk)
    assert start == len(expected)


def test_tensor_view_of_a_frame_chain_result(jpeg_parquet: Path, tiny_images: list[bytes]) -> None:
    prep = col("jpeg").image.decode().resize(h=16, w=16).normalize("imagenet")
    table = dataio.scan_parquet(jpeg_parquet).with_columns(x=prep).sort("key").collect()
    expected = reference_images(tiny_images)
    check_view(table.column("x"), expected)
    if table.column("x").num_chunks == 1:  # a one-chunk table column is viewed whole
        view = dataio.tensor_view(table.column("x"))
        assert view.shape == expected.shape and view.dtype == "float32"


def test_tensor_view_of_a_sql_chain_result(jpeg_parquet: Path, tiny_images: list[bytes]) -> None:
    prep = col("jpeg").image.decode().resize(h=16, w=16).normalize("imagenet")
    frame = dataio.scan_parquet(jpeg_parquet)
    query = "SELECT prep(jpeg) AS x FROM t ORDER BY key"
    table = dataio.sql(query, t=frame, functions={"prep": prep}).collect()
    check_view(table.column("x"), reference_images(tiny_images))


def test_tensor_view_of_run_arrow_tensor_slots(tiny_images: list[bytes]) -> None:
    records = image_records(tiny_images)
    with image_pipe().bind(records).run("numpy") as loader:
        expected = np.concatenate([b["image"] for b in loader])
    with image_pipe().bind(records).run("arrow") as loader:
        column = pa.chunked_array([b.column("image") for b in loader])
    check_view(column, expected)


def test_tensor_view_honours_slices_and_permutations() -> None:
    grid = np.arange(5 * 2 * 3, dtype=np.int16).reshape(5, 2, 3)
    array = pa.FixedShapeTensorArray.from_numpy_ndarray(grid)
    sliced = array.slice(2, 2)
    tensor = torch.from_dlpack(dataio.tensor_view(sliced))
    assert tensor.data_ptr() == values_address(sliced) == values_address(array) + 2 * 6 * 2
    np.testing.assert_array_equal(tensor.numpy(), grid[2:4])
    kind = pa.fixed_shape_tensor(pa.int16(), [2, 3], permutation=[1, 0])
    permuted = pa.ExtensionArray.from_storage(kind, array.storage)
    tensor = torch.from_dlpack(dataio.tensor_view(permuted))
    np.testing.assert_array_equal(tensor.numpy(), permuted.to_numpy_ndarray())
    assert tensor.data_ptr() == values_address(array)
    numbers = pa.array(np.arange(10, dtype=np.float64)).slice(3, 4)
    tensor = torch.from_dlpack(dataio.tensor_view(numbers))
    assert tensor.data_ptr() == values_address(numbers)
    assert tensor.tolist() == [3.0, 4.0, 5.0, 6.0]


def test_tensor_view_keeps_the_arrow_memory_alive() -> None:
    view = dataio.tensor_view(pa.array(np.arange(1000, dtype=np.int64)))
    assert torch.from_dlpack(view).sum().item() == sum(range(1000))  # the array is gone


def test_tensor_view_refuses_what_has_no_tensor_layout() -> None:
    kind = pa.fixed_shape_tensor(pa.float32(), [2])
    storage = pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2))
    with pytest.raises(PlanError, match=r"holds 1 null\(s\).*fill_null"):
        dataio.tensor_view(pa.ExtensionArray.from_storage(kind, storage))
    storage = pa.array([[1.0, None], [3.0, 4.0]], pa.list_(pa.float32(), 2))
    with pytest.raises(PlanError, match=r"fixed_shape_tensor<float, \[2\]> column holds 1 null"):
        dataio.tensor_view(pa.ExtensionArray.from_storage(kind, storage))
    with pytest.raises(PlanError, match="int64 column holds 1 null"):
        dataio.tensor_view(pa.array([1, None, 3]))
    with pytest.raises(PlanError, match=r"has 2 chunks.*combine_chunks"):
        dataio.tensor_view(pa.chunked_array([[1, 2], [3]]))
    for column in (pa.array(["a"]), pa.array([True]), pa.array([[1]], pa.list_(pa.int64()))):
        with pytest.raises(PlanError, match="no tensor layout"):
            dataio.tensor_view(column)
    with pytest.raises(PlanError, match="got list"):
        dataio.tensor_view([1, 2])


# -- read_safetensors -------------------------------------------------------------------


def test_read_safetensors_dlpack_views_the_file(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    path = tmp_path / "model.safetensors"
    weights = {
        "w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "b": torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16),
        "f8": torch.tensor([0.5, -1.0], dtype=torch.float8_e4m3fn),
        "i": torch.tensor([[1, 2]], dtype=torch.int8),
    }
    save_file(weights, str(path))
    original = path.read_bytes()
    views = dataio.read_safetensors(path, framework="dlpack")
    expected = load_file(str(path))
    assert set(views) == set(expected)
    for name, view in views.items():
        assert isinstance(view, dataio.TensorView)
        tensor = torch.from_dlpack(view)
        assert tensor.dtype == expected[name].dtype and tensor.data_ptr() == view.data_ptr
        assert torch.equal(tensor.view(torch.uint8), expected[name].view(torch.uint8))
        base = np.asarray(view)
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, mmap.mmap)  # a view of the file mapping, not a read
    tensor = torch.from_dlpack(views["w"])
    tensor[0, 0] = 100.0  # a copy-on-write mapping: the write stays in this process
    assert torch.from_dlpack(views["w"])[0, 0].item() == 100.0
    assert path.read_bytes() == original
    assert dataio.read_safetensors(path)["w"][0, 0] == 0.0


def test_read_safetensors_dlpack_one_key_and_cuda_refused(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    path = tmp_path / "one.safetensors"
    save_file({"x": np.arange(5, dtype=np.int32)}, str(path))
    with dataio.open_safetensors(path) as st:
        view = st.read(key="x", framework="dlpack")
        assert np.from_dlpack(view).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(PlanError, match="needs framework='torch'"):
        dataio.read_safetensors(path, framework="dlpack", device="cuda:0")


def test_read_safetensors_dlpack_over_http() -> None:
    """Remote tensors are in memory, exported read-only: torch still shares them."""
    from helpers.object_servers import RangeServer
    from safetensors.numpy import save

    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.int64)}
    server = RangeServer()
    try:
        server.objects["/objects/m.safetensors"] = save(values)
        views = dataio.read_safetensors(server.url + "/objects/m.safetensors", framework="dlpack")
    finally:
        server.kill()
    for name, expected in values.items():
        tensor = torch.from_dlpack(views[name])
        assert tensor.data_ptr() == views[name].data_ptr
        np.testing.assert_array_equal(tensor.numpy(), expected)


# -- streams ----------------------------------------------------------------------------


class FakeCuda:
    """A CUDA producer as DLPack sees it: records what it was asked."""

    shape = (2,)
    dtype = "float32"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 1)

    def __dlpack__(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        return "capsule"


def test_cuda_views_order_the_consumer_stream_after_the_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[tuple[int, int, tuple[int, int]]] = []
    monkeypatch.setattr(dataio.dlpack, "wait_stream", lambda *args: waits.append(args))
    producer = FakeCuda()
    view = dataio.tensor_view(producer, stream=7)
    assert view.__dlpack_device__() == (2, 1) and repr(view).endswith("device='cuda:1')")
    assert view.__dlpack__(stream=9, max_version=(1, 0)) == "capsule"
    assert waits == [(7, 9, (2, 1))]
    assert producer.calls[-1] == {"stream": 9, "max_version": (1, 0)}
    view.__dlpack__()  # no stream: the legacy default stream (1) waits
    assert waits[-1] == (7, 1, (2, 1)) and producer.calls[-1] == {"stream": None}
    view.__dlpack__(stream=7)  # the producer's own stream: already ordered
    view.__dlpack__(stream=-1)  # the consumer asks for no synchronization
    assert len(waits) == 2
    with pytest.raises(BufferError, match="stream=0 is ambiguous"):
        view.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="memory on the CPU"):
        dataio.tensor_view(np.zeros(2)).__dlpack__(stream=1)


def test_ordering_streams_without_torch_or_cupy_is_a_device_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(DeviceError, match=r"needs torch or cupy.*stream=-1"):
        dataio.dlpack.wait_stream(7, 9, (2, 0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check)")
def test_cuda_side_stream_work_is_visible_to_the_consumer() -> None:
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # a long kernel: a missing wait would read zeros
        produced = torch.ones(1 << 20, device="cuda")
    view = dataio.tensor_view(produced, stream=side.cuda_stream)
    tensor = torch.from_dlpack(view)  # torch passes its current stream
    assert tensor.data_ptr() == produced.data_ptr()
    assert tensor.sum().item() == 1 << 20


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check)")
def test_to_torch_shares_dali_gpu_outputs_on_their_stream() -> None:
    pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda120) is not installed")
    from nvidia.dali import fn, pipeline_def

    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)

    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def upload() -> Any:
        return fn.external_source(source=lambda: list(values), batch=True).gpu() * 2

    dali_pipe = upload()
    dali_pipe.build()
    (out,) = dali_pipe.run()
    dali = out.as_tensor()
    tensor = to_torch(dataio.Batch({"x": dali}, keys=None, indices=[0, 1]), device="cuda")["x"]
    assert tensor.is_cuda and tensor.data_ptr() == dali.data_ptr()
    np.testing.assert_array_equal(tensor.cpu().numpy(), values * 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check)")
def test_run_torch_on_cuda_keeps_device_columns(tiny_images: list[bytes]) -> None:
    (batch, _) = list(image_pipe().bind(image_records(tiny_images)).run())
    on_gpu = torch.from_numpy(batch["image"]).cuda()
    moved = to_torch(batch.with_columns({"image": on_gpu}), device="cuda")
    assert moved["image"].data_ptr() == on_gpu.data_ptr()
    np.testing.assert_array_equal(moved["label"].cpu().numpy(), batch["label"])
