"""Training loops get what torch users expect: devices, Mapping batches, dtypes, adapters."""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import pytest
import torch
from PIL import Image

import dataio
from dataio.batch import Batch
from dataio.engine.export import PinnedRing
from dataio.exceptions import PlanError, TransformError
from dataio.udfs.arrays import to_dtype

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this host")


def rows(n: int = 10) -> list[dict]:
    return [
        {
            "key": f"r{i}",
            "label": i,
            "weight": i * 0.5,
            "flag": i % 3 == 0,
            "name": f"n{i}",
            "x": np.full((2, 3), i, np.float32).tobytes(),
        }
        for i in range(n)
    ]


def passthrough_plan(size: int = 4, *names: str) -> dataio.Pipeline:
    names = names or ("label", "weight", "flag", "name")
    return dataio.pipeline(
        dataio.slots(*names, chain=dataio.chain().passthrough()), dataio.batch(size)
    )


class Unreadable:
    """A source whose reading fails: proves an error came before any record was read."""

    def __iter__(self):
        raise AssertionError("the source was read")


# -- devices -------------------------------------------------------------------------------


def test_cpu_device_delivers_cpu_tensors_with_the_numpy_values() -> None:
    plan = passthrough_plan(4)
    with plan.bind(rows()).run("torch", device="cpu") as loader:
        batches = list(loader)
    expected = list(plan.bind(rows()).run("numpy"))
    assert [len(b) for b in batches] == [4, 4, 2]
    for got, want in zip(batches, expected, strict=True):
        for name in ("label", "weight", "flag"):
            assert got[name].device.type == "cpu"
            np.testing.assert_array_equal(got[name].numpy(), want[name])


def absent_devices() -> list[str]:
    absent = ["bogus", "cuda:x"]
    absent.append(f"cuda:{torch.cuda.device_count()}" if CUDA else "cuda:0")
    if not torch.backends.mps.is_available():
        absent.append("mps")
    return absent


@pytest.mark.parametrize("device", absent_devices())
def test_an_absent_or_unknown_device_raises_device_error_from_run(device: str) -> None:
    with pytest.raises(dataio.DeviceError, match=repr(device).replace("[", r"\[")):
        passthrough_plan().bind(Unreadable()).run("torch", device=device)


def test_device_error_is_a_runtime_error_users_already_catch() -> None:
    with pytest.raises(RuntimeError):
        passthrough_plan().bind(rows()).run("torch", device="bogus")


class FakeEvent:
    """A CUDA event stand-in: complete once ``done`` is set (or after ``synchronize``)."""

    def __init__(self, log: list[str], name: str) -> None:
        self.done = False
        self.log = log
        self.name = name

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.log.append(f"wait {self.name}")
        self.done = True


class FakeCuda:
    def __init__(self) -> None:
        self.allocated: list[np.ndarray] = []
        self.events: list[FakeEvent] = []
        self.log: list[str] = []

    def allocate(self, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        buffer = np.empty(shape, np.float32)
        self.allocated.append(buffer)
        return buffer

    def record(self) -> FakeEvent:
        event = FakeEvent(self.log, f"e{len(self.events)}")
        self.events.append(event)
        return event


def test_pinned_ring_reuses_a_buffer_only_after_its_copy_finished() -> None:
    cuda = FakeCuda()
    ring = PinnedRing(cuda.allocate, cuda.record, depth=2)
    a = ring.acquire((4,), "f32")
    ring.release(a)  # copy of a in flight (event e0 pending)
    b = ring.acquire((4,), "f32")
    assert b is not a, "a pending copy still reads a"
    ring.release(b)
    cuda.events[1].done = True  # b's copy finished first
    assert ring.acquire((4,), "f32") is b
    assert cuda.log == [] and len(cuda.allocated) == 2


def test_pinned_ring_waits_for_the_oldest_copy_when_every_buffer_is_busy() -> None:
    cuda = FakeCuda()
    ring = PinnedRing(cuda.allocate, cuda.record, depth=2)
    first = ring.acquire((4,), "f32")
    ring.release(first)
    second = ring.acquire((4,), "f32")
    ring.release(second)
    third = ring.acquire((4,), "f32")  # both copies pending, ring full
    assert third is first and cuda.log == ["wait e0"]
    assert len(cuda.allocated) == 2


def test_pinned_ring_never_hands_out_a_claimed_buffer() -> None:
    cuda = FakeCuda()
    ring = PinnedRing(cuda.allocate, cuda.record, depth=1)
    held = ring.acquire((4,), "f32")  # claimed, copy not yet enqueued (no event)
    other = ring.acquire((4,), "f32")
    assert other is not held and cuda.log == []
    ring.release(other)  # a private buffer: not kept by the ring
    ring.release(held)
    cuda.events[-1].done = True
    assert ring.acquire((4,), "f32") is held


def test_pinned_ring_keeps_rings_per_shape_and_dtype_and_bounds_them() -> None:
    cuda = FakeCuda()
    ring = PinnedRing(cuda.allocate, cuda.record, depth=2, shapes=2)
    small = ring.acquire((4,), "f32")
    ring.release(small)
    cuda.events[-1].done = True
    assert ring.acquire((8,), "f32") is not small
    assert ring.acquire((4,), "f16") is not small
    assert ring.acquire((4,), "f32") is not small  # (4,) f32 was the least recent: dropped
    assert len(cuda.allocated) == 4


@pytest.mark.gpu
@needs_cuda
def test_cuda_device_values_survive_pinned_buffer_reuse() -> None:
    image_plan = dataio.pipeline(
        dataio.slot("image").decode_image().center_crop(h=16, w=16).normalize("imagenet"),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
    )
    images = image_records(24)
    with image_plan.bind(images).run("torch", device="cuda:0") as loader:
        on_gpu = [(b["image"], b["label"]) for b in loader]  # kept: later copies reuse buffers
    torch.cuda.synchronize()
    cpu = [(b["image"], b["label"]) for b in image_plan.bind(images).run("torch")]
    for (gi, gl), (ci, cl) in zip(on_gpu, cpu, strict=True):
        assert gi.device.type == "cuda" and gl.device.type == "cuda"
        torch.testing.assert_close(gi.cpu(), ci, rtol=0, atol=0)
        assert torch.equal(gl.cpu(), cl)


# -- batches are mappings with torch's protocols ---------------------------------------------


def first_batch(output: str = "torch") -> Batch:
    with passthrough_plan(4).bind(rows()).run(output) as loader:
        return next(iter(loader))


def test_batch_is_a_mapping_of_slot_names_to_columns() -> None:
    batch = first_batch()
    assert isinstance(batch, Mapping)
    assert list(batch.keys()) == ["label", "weight", "flag", "name"] == batch.slots
    assert len(batch.keys()) == len(batch.items()) == len(batch.values()) == 4
    assert len(batch) == 4 and batch.row_keys == ["r0", "r1", "r2", "r3"]
    plain = dict(batch)
    assert set(plain) == {"label", "weight", "flag", "name"}
    assert torch.equal(plain["label"], torch.tensor([0, 1, 2, 3]))
    assert {**batch}.keys() == plain.keys()
    assert batch.get("missing") is None and "label" in batch


def test_numeric_passthrough_columns_get_their_dtype() -> None:
    numpy_batch, torch_batch = first_batch("numpy"), first_batch("torch")
    for name, np_dtype, torch_dtype in (
        ("label", np.int64, torch.int64),
        ("weight", np.float64, torch.float64),
        ("flag", np.bool_, torch.bool),
    ):
        assert numpy_batch[name].dtype == np_dtype and torch_batch[name].dtype == torch_dtype
        want = [r[name] for r in rows()[:4]]
        assert numpy_batch[name].tolist() == want == torch_batch[name].tolist()
    assert numpy_batch["name"] == ["n0", "n1", "n2", "n3"] == torch_batch["name"]


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([np.float32(0.5), np.float32(1.5)], np.float32),
        ([np.int16(3), np.int16(-4)], np.int16),
        ([1, 2.5], np.float64),
        ([1, None], None),
        ([1, "a"], None),
        ([True, 1], None),
        ([2**70, 1], None),
    ],
)
def test_passthrough_dtype_rules(values: list, dtype: type | None) -> None:
    plan = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(2))
    column = next(iter(plan.bind([{"v": v} for v in values]).run()))["v"]
    if dtype is None:
        assert column == values
    else:
        assert column.dtype == dtype
        np.testing.assert_array_equal(column, np.array(values, dtype))


def test_to_moves_tensor_columns_and_keeps_metadata() -> None:
    batch = first_batch()
    moved = batch.to("meta")
    assert isinstance(moved, Batch) and moved is not batch
    assert moved["label"].device.type == "meta" and moved["weight"].device.type == "meta"
    assert moved["name"] == batch["name"]
    assert moved.row_keys == batch.row_keys and moved.indices == batch.indices
    assert batch["label"].device.type == "cpu"  # the original is unchanged
    assert batch.to(torch.float32)["label"].dtype == torch.float32


def test_lightning_move_data_to_device_moves_the_batch_whole() -> None:
    from lightning.fabric.utilities.apply_func import move_data_to_device

    batch = first_batch()
    moved = move_data_to_device(batch, torch.device("meta"))
    assert isinstance(moved, Batch)
    assert moved["label"].device.type == "meta" and moved.row_keys == batch.row_keys
    nested = move_data_to_device({"batch": batch, "step": 3}, torch.device("meta"))
    assert nested["batch"]["flag"].device.type == "meta" and nested["step"] == 3


def test_pin_memory_protocol_pins_every_tensor_and_keeps_metadata(monkeypatch) -> None:
    from torch.utils.data._utils.pin_memory import pin_memory as torch_pin

    pinned: list[torch.Tensor] = []

    def fake_pin(tensor: torch.Tensor, device: object = None) -> torch.Tensor:
        copy = tensor.clone()  # no accelerator here: record the call instead of pinning
        pinned.append(copy)
        return copy

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    batch = first_batch()
    out = torch_pin(batch)  # what a DataLoader(pin_memory=True) thread does
    assert isinstance(out, Batch) and out.row_keys == batch.row_keys
    assert [id(t) for t in pinned] == [id(out[n]) for n in ("label", "weight", "flag")]
    assert out["name"] == batch["name"]


@needs_cuda
@pytest.mark.gpu
def test_pin_memory_pins_on_cuda_hosts() -> None:
    out = first_batch().pin_memory()
    assert out["label"].is_pinned() and out["weight"].is_pinned()


def test_arrow_output_keeps_numeric_passthrough_types() -> None:
    with passthrough_plan(4).bind(rows()).run("arrow") as loader:
        record_batch = next(iter(loader))
    assert str(record_batch.schema.field("label").type) == "int64"
    assert str(record_batch.schema.field("weight").type) == "double"
    assert str(record_batch.schema.field("flag").type) == "bool"
    assert record_batch.column("label").to_pylist() == [0, 1, 2, 3]


# -- dtypes ----------------------------------------------------------------------------------

TORCH_DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("source", [np.float32, np.float64, np.int32, np.uint8])
def test_to_dtype_matches_torch_and_numpy_casts(dtype: str, source: type) -> None:
    values = [-100.75, -1.5, -0.5, 0.0, 0.4, 1.0, 2.5, 99.9, 127.0]  # all fit int8
    if source is np.uint8:
        values = [abs(v) for v in values]
    x = np.array([values]).astype(source)
    got = to_dtype(x, dtype)  # type: ignore[arg-type]
    want = torch.from_numpy(x).to(TORCH_DTYPES[dtype])
    if dtype == "bfloat16":
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(got.astype(np.float32), want.float().numpy())
    else:
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want.numpy())
        np.testing.assert_array_equal(got, x.astype(dtype))


def test_to_dtype_uint8_keeps_pixel_semantics() -> None:
    x = np.array([-3.0, 0.4, 0.6, 254.5, 300.0], np.float32)
    np.testing.assert_array_equal(to_dtype(x, "uint8"), [0, 0, 1, 254, 255])


@pytest.mark.parametrize(
    ("x", "dtype", "message"),
    [
        (np.array([300.0]), "int8", r"values 300.0..300.0 do not fit in \[-128, 127\]"),
        (np.array([2**40], np.int64), "int32", "do not fit"),
        (np.array([np.nan]), "int64", "NaN or infinity"),
        (np.array([np.inf]), "int16", "NaN or infinity"),
    ],
)
def test_to_dtype_refuses_values_an_integer_type_cannot_hold(x, dtype, message) -> None:
    with pytest.raises(TransformError, match=message):
        to_dtype(x, dtype)


def test_to_dtype_in_a_pipeline_gives_tensors_of_that_dtype() -> None:
    records = [{"x": _npy(np.full((3,), i + 0.7, np.float32))} for i in range(4)]
    for dtype, torch_dtype in (("int64", torch.int64), ("bool", torch.bool)):
        plan = dataio.pipeline(dataio.slot("x").decode_numpy().to_dtype(dtype), dataio.batch(4))
        column = next(iter(plan.bind(records).run("torch")))["x"]
        source = torch.tensor([[i + 0.7] * 3 for i in range(4)], dtype=torch.float32)
        assert column.dtype == torch_dtype and torch.equal(column, source.to(torch_dtype))


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def image_records(n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append({"image": buffer.getvalue(), "label": i})
    return out


def image_column(slot: dataio.Slot, records: list[dict]) -> torch.Tensor:
    plan = dataio.pipeline(slot, dataio.batch(len(records)))
    return next(iter(plan.bind(records).run("torch")))["image"]


@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "float16", "bfloat16", "float64"])
def test_image_output_dtype_holds_the_uint8_pixels(dtype: str) -> None:
    records = image_records(3)
    base = dataio.slot("image").decode_image().center_crop(h=8, w=8)
    pixels = image_column(base.output(layout="CHW"), records)
    got = image_column(base.output(dtype=dtype, layout="CHW"), records)  # type: ignore[arg-type]
    assert got.dtype == TORCH_DTYPES[dtype]
    assert torch.equal(got, pixels.to(TORCH_DTYPES[dtype]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_normalized_half_outputs_round_the_float32_result_once(dtype: str) -> None:
    records = image_records(3)
    base = dataio.slot("image").decode_image().resize(h=10, w=12).normalize("imagenet")
    full = image_column(base, records)
    half = image_column(base.output(dtype=dtype), records)  # type: ignore[arg-type]
    assert half.dtype == TORCH_DTYPES[dtype]
    assert torch.equal(half, full.to(TORCH_DTYPES[dtype]))


def test_output_dtypes_that_make_no_sense_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="output dtype must be one of"):
        dataio.transforms.output(dtype="bool")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="normalize produces floats"):
        dataio.slot("image").decode_image().normalize("imagenet").output(dtype="int32")


# -- DataLoader, slots, chain ----------------------------------------------------------------


def test_chain_and_slots_build_the_same_plan_as_spelled_out_slots() -> None:
    augment = dataio.chain().decode_image().center_crop(h=8, w=8)
    left, right = dataio.slots("left", "right", chain=augment)
    spelled = dataio.pipeline(
        dataio.slot("left").decode_image().center_crop(h=8, w=8),
        dataio.slot("right").decode_image().center_crop(h=8, w=8),
        dataio.batch(2),
    )
    assert dataio.pipeline(left, right, dataio.batch(2)).signature() == spelled.signature()
    grouped = dataio.pipeline(dataio.slots("left", "right", chain=augment), dataio.batch(2))
    assert grouped.signature() == spelled.signature()
    from_ops = dataio.chain(dataio.decoders.image(), dataio.transforms.center_crop(h=8, w=8))
    assert dataio.slot("left").then(from_ops) == spelled.slots[0]
    assert repr(augment) == "chain().decode_image(mode='rgb').center_crop(h=8, w=8)"


def test_a_chain_is_not_a_stage_and_slots_need_names() -> None:
    with pytest.raises(PlanError, match="has no record field"):
        dataio.pipeline(dataio.chain().decode_image(), dataio.batch(2))
    with pytest.raises(PlanError, match="at least one slot name"):
        dataio.slots()


def test_dataloader_is_reiterable_sized_and_resumable() -> None:
    plan = passthrough_plan(3, "label")
    loader = dataio.DataLoader(plan, rows(), output="torch", seed=1)
    assert len(loader) == 4
    first = [b["label"].tolist() for b in loader]
    assert first == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert [b["label"].tolist() for b in loader] == first  # a new pass, the next epoch
    resumed = dataio.DataLoader(plan, rows(), output="torch", seed=1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed.load_state_dict(state)
    assert [b["label"].tolist() for b in resumed] == first[1:]
    loader.close()
    resumed.close()


def test_dataloader_checks_options_without_reading_records() -> None:
    with pytest.raises(dataio.DeviceError):
        dataio.DataLoader(passthrough_plan(), Unreadable(), output="torch", device="bogus")
    with pytest.raises(PlanError, match=r"needs a dataio\.pipeline"):
        dataio.DataLoader([dataio.slot("x").passthrough()], rows())  # type: ignore[arg-type]


# -- dataio.torch ----------------------------------------------------------------------------


def test_dataio_torch_is_the_adapter_and_torch_stays_the_real_torch() -> None:
    import dataio.torch as adapter

    assert dataio.torch is adapter
    assert adapter.torch is sys.modules["torch"]
    assert "dataio" not in sys.modules["torch"].__file__.split("site-packages")[-1]
    import dataio.engine.export as export

    assert export.to_torch(first_batch("numpy"))["label"].__class__ is torch.Tensor


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_yields_every_sample_once(workers: int) -> None:
    import dataio.torch

    records = rows(23)
    plan = dataio.pipeline(dataio.slot("label").passthrough(), dataio.batch(4))
    dataset = dataio.torch.IterableDataset(plan, records)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    assert len(loader) == 6
    batches = [b["label"].tolist() for b in loader]
    assert batches == [list(range(i, min(i + 4, 23))) for i in range(0, 23, 4)]


def test_iterable_dataset_reshuffles_per_epoch_with_set_epoch() -> None:
    import dataio.torch

    plan = dataio.pipeline(
        dataio.slot("label").passthrough(), dataio.batch(6), dataio.batch_transforms.shuffle()
    )
    dataset = dataio.torch.IterableDataset(plan, rows(12), seed=5)
    epochs = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        epochs.append([v for b in loader for v in b["label"].tolist()])
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(12))
    assert epochs[0] != epochs[1]
