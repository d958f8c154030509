"""GPUDirect Storage reads and device normalize, tested on the CPU with the GPU steps
factored out; the ``gpu`` tests at the end run them on a CUDA device (``make gpu-check``).

kvikio is replaced by a fake module that reads with ``os.pread`` into CPU tensors: the
route chosen, the compatibility mode switched on and the bytes landing where asked are
what dataio decides, and those are checked here against the ``safetensors`` package.
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

import dataio
import dataio.loader as loader_module
from dataio.engine import device_normalize
from dataio.engine.device_normalize import apply_on_device, split_normalize
from dataio.exceptions import DeviceError, FormatError, PlanError
from dataio.formats import _devices, gds
from dataio.formats import safetensors as st_module

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this host")


# -- a fake kvikio ---------------------------------------------------------------------------


class FakeKvikio(types.ModuleType):
    """The parts of kvikio dataio calls, reading into CPU tensors with os.pread."""

    class CompatMode(enum.Enum):
        OFF = 0
        ON = 1
        AUTO = 2

    def __init__(self, *, compat_preferred: bool = False) -> None:
        super().__init__("kvikio")
        self.__version__ = "99.0-fake"
        self.compat = self.CompatMode.AUTO
        self.opened: list[tuple[str, Any]] = []  # (path, compat mode at open)
        self.reads: list[tuple[int, int]] = []  # (size, offset)
        self.registered: list[Any] = []
        self.deregistered: list[Any] = []
        fake = self

        class Defaults:
            @staticmethod
            def is_compat_mode_preferred() -> bool:
                return compat_preferred or fake.compat == fake.CompatMode.ON

            @staticmethod
            @contextlib.contextmanager
            def set(name: str, value: Any) -> Iterator[None]:
                assert name == "compat_mode"
                old, fake.compat = fake.compat, value
                try:
                    yield
                finally:
                    fake.compat = old

        class CuFile:
            def __init__(self, path: str, flags: str) -> None:
                assert flags == "r"
                self.fd = os.open(path, os.O_RDONLY)
                fake.opened.append((path, fake.compat))

            def pread(self, buf: torch.Tensor, size: int, file_offset: int) -> Any:
                fake.reads.append((size, file_offset))
                data = os.pread(self.fd, size, file_offset)
                buf[: len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                return types.SimpleNamespace(get=lambda: len(data))

            def close(self) -> None:
                os.close(self.fd)

        # as in kvikio: ``defaults`` is a submodule that ``import kvikio`` does not load,
        # so it is no attribute here; install() puts it in sys.modules as "kvikio.defaults"
        self.defaults_module = types.ModuleType("kvikio.defaults")
        self.defaults_module.is_compat_mode_preferred = Defaults.is_compat_mode_preferred  # type: ignore[attr-defined]
        self.defaults_module.set = Defaults.set  # type: ignore[attr-defined]
        self.CuFile = CuFile

    def memory_register(self, buf: Any) -> None:
        self.registered.append(buf)

    def memory_deregister(self, buf: Any) -> None:
        self.deregistered.append(buf)


def install(monkeypatch: pytest.MonkeyPatch, kvikio: Any, *, gds_ready: bool) -> None:
    """Put ``kvikio`` (a fake, or None: not installed) in place, and a GDS probe result."""
    monkeypatch.setitem(sys.modules, "kvikio", kvikio)
    defaults = None if kvikio is None else kvikio.defaults_module
    monkeypatch.setitem(sys.modules, "kvikio.defaults", defaults)
    why = "" if gds_ready else "no libcufile.so.0 / libcufile.so on the loader path (test)"
    probe = {"available": gds_ready, "cufile": None, "cuda_devices": 1, "why": why}
    monkeypatch.setattr(gds, "gds_info", lambda: probe)


class CudaLooking:
    """A CPU tensor that says it lives on a GPU (for checks made before any copy)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor
        self.device = torch.device("cuda", 0)
        self.shape = tensor.shape

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tensor, name)


def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    state = {
        "w": torch.randn(65, 33, generator=gen),
        "h": torch.randn(17, generator=gen).to(torch.bfloat16),
        "i": torch.arange(-50, 50, dtype=torch.int64),
        "b": torch.rand(9, generator=gen) > 0.5,
        "empty": torch.zeros(0, 4),
    }
    path = tmp_path / "m.safetensors"
    dataio.write_safetensors(path, state)
    return path, state


def read_items(path: Path, route: str) -> dict[str, torch.Tensor]:
    """read_safetensors' device step, run with the CPU as the device."""
    with dataio.open_safetensors(path) as st:
        found = [(name, *st._entry(name)) for name in st]
        items = [(n, o.path, o.tensor(e), e.start) for n, o, e in found]
        return gds.read_to_device(items, torch.device("cpu"), mode=route)  # type: ignore[arg-type]


def assert_same(got: dict[str, torch.Tensor], path: Path) -> None:
    want = load_file(str(path))  # the safetensors package: an independent reader
    with dataio.open_safetensors(path) as st:
        assert list(got) == st.keys()
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(got[name].view(-1).view(torch.uint8), tensor.view(-1).view(torch.uint8))


# -- errors without kvikio, without CUDA ----------------------------------------------------


def test_without_kvikio_the_named_routes_say_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None, gds_ready=True)
    assert gds.choose_route("auto") == ("pinned", gds.choose_route("auto")[1])
    route, why = gds.choose_route("auto")
    assert route == "pinned" and "kvikio is not installed" in why and "dataio[gds]" in why
    for mode in ("gds", "compat"):
        wording = rf"mode='{mode}' reads through kvikio, which is missing: kvikio is not "
        with pytest.raises(DeviceError, match=wording + r"installed .*'dataio\[gds\]'"):
            gds.choose_route(mode)  # type: ignore[arg-type]
    tensor = CudaLooking(torch.empty(8, dtype=torch.uint8))
    with pytest.raises(DeviceError, match=r"gds_register_buffer needs kvikio.*dataio\[gds\]"):
        dataio.gds_register_buffer(tensor)
    with pytest.raises(PlanError, match="mode must be"):
        gds.choose_route("posix")  # type: ignore[arg-type]


def test_gds_asked_for_where_the_driver_is_missing_names_the_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, FakeKvikio(), gds_ready=False)
    wording = r"mode='gds' needs GPUDirect Storage.*gds: no libcufile.so.0 / libcufile.so on "
    with pytest.raises(DeviceError, match=wording + r"the loader path.*mode='auto'"):
        gds.choose_route("gds")
    install(monkeypatch, FakeKvikio(compat_preferred=True), gds_ready=True)
    with pytest.raises(DeviceError, match="KVIKIO_COMPAT_MODE"):
        gds.choose_route("gds")


def test_without_cuda_device_reads_are_a_device_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only host
    path, _ = checkpoint(tmp_path)
    # the reason is the capability report's line for cuda (python -m dataio)
    wording = r"device='cuda:0' needs CUDA, but this host has none usable by torch .*\(cuda: .*\)"
    with pytest.raises(DeviceError, match=wording + r"; read with device=None"):
        dataio.gds_open(path, device="cuda:0")
    with pytest.raises(DeviceError, match=wording):
        dataio.read_safetensors(path, framework="torch", device="cuda:0")
    with pytest.raises(DeviceError, match=wording):
        dataio.gds_read_into_tensor(path, CudaLooking(torch.empty(4, dtype=torch.uint8)))
    with pytest.raises(DeviceError, match=r"gds_open reads into GPU memory, not 'cpu'"):
        dataio.gds_open(path, device="cpu")
    with pytest.raises(DeviceError, match="takes a CUDA tensor, got one on cpu"):
        dataio.gds_register_buffer(torch.empty(4))


def test_gds_info_reports_kvikio_and_the_route_without_raising() -> None:
    _devices.gds_info.cache_clear()
    try:
        info = dataio.gds_info()
    finally:
        _devices.gds_info.cache_clear()
    assert info["kvikio"] is None or isinstance(info["kvikio"], str)
    if info["cuda_devices"] == 0:
        assert info["route"] is None and info["route_why"] == "no CUDA device"
    else:
        assert info["route"] in gds.ROUTES


# -- the fallback order ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kvikio", "gds_ready", "route"),
    [
        (None, True, "pinned"),  # no kvikio: dataio's pinned buffers, even with GDS
        (None, False, "pinned"),
        ("fake", False, "compat"),  # kvikio without the GDS driver: its POSIX mode
        ("compat-preferred", True, "compat"),  # KVIKIO_COMPAT_MODE=ON
        ("fake", True, "gds"),
    ],
)
def test_auto_takes_the_first_route_the_host_offers(
    monkeypatch: pytest.MonkeyPatch, kvikio: str | None, gds_ready: bool, route: str
) -> None:
    fake = None if kvikio is None else FakeKvikio(compat_preferred=kvikio == "compat-preferred")
    install(monkeypatch, fake, gds_ready=gds_ready)
    chosen, why = gds.choose_route("auto")
    assert chosen == route
    assert (why == "") == (route == "gds")


@pytest.mark.parametrize("route", ["gds", "compat"])
def test_kvikio_routes_read_each_tensor_at_its_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    fake = FakeKvikio()
    install(monkeypatch, fake, gds_ready=route == "gds")
    path, _ = checkpoint(tmp_path)
    got = read_items(path, "auto")
    assert_same(got, path)
    # one CuFile for the file, opened in compatibility mode exactly on the compat route
    assert len(fake.opened) == 1
    assert (fake.opened[0][1] == fake.CompatMode.ON) == (route == "compat")
    assert fake.compat == fake.CompatMode.AUTO  # restored after the open
    with dataio.open_safetensors(path) as st:
        header = st._open(st._where["w"]).header.tensors
    expected = sorted((e.nbytes, e.start) for e in header.values() if e.nbytes)
    assert sorted(fake.reads) == expected  # the empty tensor reads nothing


def test_register_buffer_registers_only_where_cufile_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKvikio()
    install(monkeypatch, fake, gds_ready=True)
    tensor = CudaLooking(torch.empty(64, dtype=torch.uint8))
    with dataio.gds_register_buffer(tensor) as buffer:  # type: ignore[arg-type]
        assert buffer.registered and fake.registered == [tensor]
    assert fake.deregistered == [tensor] and not buffer.registered
    buffer.close()  # twice is harmless
    assert fake.deregistered == [tensor]
    install(monkeypatch, fake, gds_ready=False)  # compat mode: nothing to register
    with dataio.gds_register_buffer(tensor) as buffer:  # type: ignore[arg-type]
        assert not buffer.registered
    assert fake.registered == [tensor]


def test_a_kvikio_read_waits_for_torchs_stream_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvikio writes from its own threads and stream: work torch queued on the tensor (a
    fill, the memory's previous owner) must be done before the read, not after it."""
    fake = FakeKvikio()
    install(monkeypatch, fake, gds_ready=False)
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(range(256)))
    events: list[str] = []

    class Stream:
        def synchronize(self) -> None:
            events.append("synchronize")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    real_pread = fake.CuFile.pread

    def pread(self: Any, buf: Any, size: int, file_offset: int) -> Any:
        events.append("pread")
        return real_pread(self, buf._tensor, size, file_offset)

    monkeypatch.setattr(fake.CuFile, "pread", pread)
    opened = gds.GdsFile(str(path), torch.device("cuda", 0), "compat")
    dest = CudaLooking(torch.zeros(16, dtype=torch.uint8))
    try:
        assert opened._read_kvikio(dest, 8, 16) == 16
    finally:
        opened.close()
    assert events == ["synchronize", "pread"]
    assert bytes(dest._tensor.tolist()) == bytes(range(8, 24))


def test_a_buffer_kvikio_refuses_is_a_device_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvikio 26.10 takes CUDA tensors and host buffers; a CPU torch tensor is its
    TypeError ("a bytes-like object is required, not 'Tensor'"), reported as ours."""
    fake = FakeKvikio()
    install(monkeypatch, fake, gds_ready=False)

    def pread(self: Any, buf: Any, size: int, file_offset: int) -> Any:
        raise TypeError("a bytes-like object is required, not 'Tensor'")

    monkeypatch.setattr(fake.CuFile, "pread", pread)
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(64))
    opened = gds.GdsFile(str(path), torch.device("cpu"), "compat")
    with opened, pytest.raises(DeviceError, match=r"kvikio cannot read .*raw.bin.* into a cpu"):
        opened.read_into(torch.empty(8, dtype=torch.uint8))


def test_a_kvikio_that_does_not_load_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kvikio's import loads libkvikio and libcufile; a missing library is a RuntimeError
    there (cuda.pathfinder's DynamicLibNotFoundError), not an ImportError."""

    class Unloadable:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> None:
            if name == "kvikio":
                raise RuntimeError('Failure finding "libcufile.so.0": No such file')

    monkeypatch.delitem(sys.modules, "kvikio", raising=False)
    monkeypatch.delitem(sys.modules, "kvikio.defaults", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Unloadable(), *sys.meta_path])
    kvikio, defaults, why = _devices.load_kvikio()
    assert kvikio is None and defaults is None
    assert "does not load" in why and "libcufile.so.0" in why
    probe = {"available": True, "cufile": None, "cuda_devices": 1, "why": ""}
    monkeypatch.setattr(gds, "gds_info", lambda: probe)
    assert gds.choose_route("auto") == ("pinned", why)
    with pytest.raises(DeviceError, match=r"mode='compat'.*does not load"):
        gds.choose_route("compat")
    assert _devices._route(probe) == ("pinned", why)


# -- the pinned route, run on the CPU ------------------------------------------------------


@pytest.mark.parametrize("staging", [7, 64, 1 << 20])
def test_pinned_route_stages_through_alternating_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, staging: int
) -> None:
    monkeypatch.setattr(_devices, "STAGING_BYTES", staging)  # many chunks, odd sizes
    path, _ = checkpoint(tmp_path)
    assert_same(read_items(path, "pinned"), path)


def test_read_into_checks_ranges_devices_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "raw.bin"
    payload = np.arange(1000, dtype=np.uint8).tobytes()
    path.write_bytes(payload)
    with gds.GdsFile(str(path), torch.device("cpu"), "pinned") as f:
        out = torch.empty(100, dtype=torch.uint8)
        assert dataio.gds_read_into_tensor(f, out, offset=900) == 100
        assert bytes(out.numpy()) == payload[900:]
        with pytest.raises(FormatError, match=r"is 1000 bytes; reading 101 at offset 900"):
            f.read_into(torch.empty(101, dtype=torch.uint8), offset=900)
        with pytest.raises(PlanError, match="non-negative byte offset"):
            f.read_into(out, offset=-1)
        with pytest.raises(PlanError, match="contiguous"):
            f.read_into(torch.empty(10, 10, dtype=torch.uint8).t())
        with pytest.raises(DeviceError, match="opened for cpu, but the tensor is on meta"):
            f.read_into(torch.empty(4, device="meta"))
        os.truncate(path, 500)  # shrinks under the open handle
        with pytest.raises(FormatError, match=r"ends at byte 500.*truncated"):
            f.read_into(torch.empty(200, dtype=torch.uint8), offset=400)
    with pytest.raises(dataio.DataioError, match="is closed"):
        f.read_into(out)
    assert "pinned" in repr(f) and "closed" in repr(f)


def test_read_safetensors_to_a_gpu_goes_through_the_gds_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = checkpoint(tmp_path)
    calls = []

    def to_cpu(device: Any, framework: str) -> Any:
        return torch.device("cpu") if device == "cuda:0" else None

    real = gds.read_to_device

    def spy(items: Any, target: Any, **kw: Any) -> Any:
        calls.append([name for name, *_ in items])
        return real(items, target, mode="pinned")

    monkeypatch.setattr(st_module, "cuda_target", to_cpu)  # "cuda:0" is the CPU here
    monkeypatch.setattr(gds, "read_to_device", spy)
    got = dataio.read_safetensors(path, framework="torch", device="cuda:0")
    assert_same(got, path)
    one = dataio.read_safetensors(path, keys=["h"], framework="torch", device="cuda:0")
    assert list(one) == ["h"] and calls == [list(got), ["h"]]
    for tensor in got.values():  # fresh memory, not views of the file mapping
        tensor.add_(1) if tensor.dtype != torch.bool else tensor.logical_not_()
    assert_same(dataio.read_safetensors(path, framework="torch"), path)


# -- device normalize -----------------------------------------------------------------------


def image_records(n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (21, 26, 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append({"image": buffer.getvalue(), "label": i})
    return out


def image_plan(*tail: Any, resize: bool = True, batch_ops: tuple[Any, ...] = ()) -> dataio.Pipeline:
    slot = dataio.slot("image").decode_image()
    slot = slot.resize(18).center_crop(16) if resize else slot.center_crop(16)
    for op in tail:
        slot = op(slot)
    return dataio.pipeline(slot, dataio.slot("label").passthrough(), dataio.batch(4), *batch_ops)


IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "CHW")
#: the chain's last ops, and the mean, std and layout they normalize with
TAILS = {
    "imagenet CHW": ((lambda s: s.normalize("imagenet"),), IMAGENET),
    "HWC": (
        (lambda s: s.normalize(mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), layout="HWC"),),
        ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3), "HWC"),
    ),
    "one channel value": ((lambda s: s.normalize(mean=0.5, std=0.25),), ((0.5,), (0.25,), "CHW")),
    "float16": ((lambda s: s.normalize("imagenet"), lambda s: s.output(dtype="float16")), IMAGENET),
    "random flip first": ((lambda s: s.random_flip(), lambda s: s.normalize("imagenet")), IMAGENET),
}


def numpy_normalize(pixels: torch.Tensor, mean: Any, std: Any, layout: str) -> torch.Tensor:
    """The independent oracle: NumPy's float32 ``x * (1 / (255 std)) - mean / std``."""
    mean64, std64 = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    shape = (1, -1, 1, 1) if layout == "CHW" else (1, 1, 1, -1)
    scale = (1.0 / (255.0 * std64)).astype(np.float32).reshape(shape)
    bias = (-mean64 / std64).astype(np.float32).reshape(shape)
    return torch.from_numpy(pixels.numpy().astype(np.float32) * scale + bias)


@pytest.mark.parametrize("resize", [True, False], ids=["resampled", "cropped"])
@pytest.mark.parametrize("tail", sorted(TAILS))
def test_device_normalize_matches_the_host_kernel(tail: str, resize: bool) -> None:
    ops, (mean, std, layout) = TAILS[tail]
    plan = image_plan(*ops, resize=resize)
    records = image_records(10)
    host_plan, steps = split_normalize(plan)
    assert [s.slot for s in steps] == ["image"]
    host = list(plan.bind(records).run("torch", seed=3))
    moved = list(host_plan.bind(records).run("torch", seed=3))
    for want, got in zip(host, moved, strict=True):
        pixels = got["image"]
        assert pixels.dtype == torch.uint8  # what crosses the bus: a quarter of float32
        assert pixels.shape == want["image"].shape
        done = apply_on_device(got, steps)
        assert done["image"].dtype == want["image"].dtype
        assert torch.equal(done["label"], want["label"])
        # exactly NumPy's float32 normalize of the same uint8 pixels
        oracle = numpy_normalize(pixels, mean, std, layout).to(want["image"].dtype)
        assert torch.equal(done["image"], oracle)
        # the host kernel normalizes resampled pixels before any rounding to uint8: half
        # a pixel step apart at most (plus float16's rounding); equal without resampling
        worst = float((done["image"].float() - want["image"].float()).abs().max())
        slack = 4e-3 if want["image"].dtype == torch.float16 else 1e-5
        assert worst <= (0.5 / (255 * min(std)) + slack if resize else 0.0), worst
    assert host_plan.signature() != plan.signature()


def test_plans_that_need_host_floats_keep_normalize_on_the_host() -> None:
    mixed = image_plan(*TAILS["imagenet CHW"][0], batch_ops=(dataio.batch_transforms.mixup(),))
    assert split_normalize(mixed) == (mixed, ())
    plain = image_plan()  # no normalize: nothing to move
    assert split_normalize(plain) == (plain, ())
    flagged = dataio.pipeline(
        dataio.slot("image", optional=True).decode_image().center_crop(8).normalize("imagenet"),
        dataio.batch(2),
    )
    assert split_normalize(flagged)[1] == ()
    assert not device_normalize.on_device("torch", "cpu")
    assert not device_normalize.on_device("numpy", None)


@pytest.mark.parametrize("stats", [True, False])  # the loader's two build paths
def test_loader_normalizes_on_the_device_behind_run(
    monkeypatch: pytest.MonkeyPatch, stats: bool
) -> None:
    # the CUDA decision, made true for the CPU: the loader's own path, end to end
    monkeypatch.setattr(
        loader_module, "on_device", lambda output, device: output == "torch" and device == "cpu"
    )
    applied = []
    real = loader_module.apply_on_device

    def spy(batch: Any, steps: Any, constants: Any) -> Any:
        applied.append(batch["image"].dtype)
        return real(batch, steps, constants)

    monkeypatch.setattr(loader_module, "apply_on_device", spy)
    plan = image_plan(*TAILS["imagenet CHW"][0], resize=False)  # exact: no resampling
    records = image_records(9)
    with plan.bind(records).run("torch", device="cpu", stats=stats) as loader:
        moved = list(loader)
        state = loader.state_dict()
    host = list(plan.bind(records).run("torch"))
    assert applied == [torch.uint8] * 3
    for got, want in zip(moved, host, strict=True):
        torch.testing.assert_close(got["image"], want["image"], rtol=0, atol=0)
    # the checkpoint names the plan the user built, so it resumes on a host-normalize run
    with plan.bind(records).run("torch") as other:
        other.load_state_dict(state)


def test_the_dali_backend_keeps_its_own_normalize(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nvidia.dali", reason="DALI is a test extra")
    monkeypatch.setattr(
        loader_module, "on_device", lambda output, device: output == "torch" and device == "cpu"
    )
    plan = image_plan(*TAILS["imagenet CHW"][0], resize=False)
    with plan.bind(image_records(4)).run("torch", device="cpu", backend="dali") as loader:
        assert loader._device_steps == ()  # DALI's pipeline normalizes on its device
        (batch,) = list(loader)
    assert batch["image"].dtype == torch.float32


# -- on a GPU (make gpu-check) ------------------------------------------------------------


def offered(route: str) -> None:
    """Skip, saying why, where this GPU host cannot take ``route`` (kvikio, nvidia-fs)."""
    try:
        gds.choose_route(route)  # type: ignore[arg-type]
    except DeviceError as exc:
        pytest.skip(f"route {route!r} is not offered on this GPU host: {exc}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("route", ["gds", "compat", "pinned"])
def test_gpu_reads_match_the_safetensors_package(tmp_path: Path, route: str) -> None:
    offered(route)
    path, _ = checkpoint(tmp_path)
    with dataio.open_safetensors(path) as st:
        found = [(name, *st._entry(name)) for name in st]
        items = [(n, o.path, o.tensor(e), e.start) for n, o, e in found]
        got = gds.read_to_device(items, torch.device("cuda", 0), mode=route)  # type: ignore[arg-type]
    assert all(t.device == torch.device("cuda", 0) for t in got.values())
    assert_same({k: v.cpu() for k, v in got.items()}, path)
    whole = dataio.read_safetensors(path, framework="torch", device="cuda:0")
    assert_same({k: v.cpu() for k, v in whole.items()}, path)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("route", ["gds", "compat", "pinned"])
def test_gpu_low_level_reads_and_registration(tmp_path: Path, route: str) -> None:
    offered(route)
    path = tmp_path / "raw.bin"
    payload = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
    path.write_bytes(payload.tobytes())
    dest = torch.empty(1 << 20, dtype=torch.uint8, device="cuda:0")
    with dataio.gds_open(path, device="cuda:0", mode=route) as f:  # type: ignore[arg-type]
        assert f.route == route
        with dataio.gds_register_buffer(dest) if route != "pinned" else contextlib.nullcontext():
            # work queued on torch's stream before the read (a long kernel, then a fill)
            # must land before it: kvikio writes from its own stream, so dataio waits
            torch.cuda._sleep(50_000_000)
            dest.fill_(7)
            assert dataio.gds_read_into_tensor(f, dest, offset=1 << 20) == 1 << 20
    assert np.array_equal(dest.cpu().numpy(), payload[1 << 20 : 2 << 20])


@pytest.mark.gpu
@needs_cuda
def test_gpu_loader_normalizes_on_the_device() -> None:
    plan = image_plan(*TAILS["imagenet CHW"][0], resize=False)  # exact: no resampling
    records = image_records(12)
    with plan.bind(records).run("torch", device="cuda:0") as loader:
        assert loader._device_steps  # the host kernels stop at uint8
        on_gpu = [b["image"] for b in loader]
    torch.cuda.synchronize()
    host = [b["image"] for b in plan.bind(records).run("torch")]
    for got, want in zip(on_gpu, host, strict=True):
        assert got.device.type == "cuda" and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_the_capability_report_names_the_device_read_route() -> None:
    from dataio._capabilities import format_report, report

    info = report()
    assert info["gds_route"] == {
        "route": dataio.gds_info()["route"], "why": dataio.gds_info()["route_why"]
    }  # fmt: skip
    line = next(x for x in format_report(info).splitlines() if x.startswith("device reads:"))
    assert (info["gds_route"]["route"] or "none") in line and info["gds_route"]["why"] in line
