"""``rdma.serve(cuda=...)``: GPU memory served for GPUDirect RDMA, refused with the same
discovery and wording as ``connect(cuda=True)`` where a piece is missing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dataio._native
import dataio.rdma as rdma
from dataio.exceptions import DeviceError, PlanError
from dataio.rdma import _cuda, _server

NO_DRIVER = {"found": False, "why": "no NVIDIA driver (libcuda.so.1 not found)"}


def driver(monkeypatch: pytest.MonkeyPatch, found: dict[str, Any]) -> None:
    """What the capability report's CUDA probe says on this pretend host."""
    monkeypatch.setattr(dataio._native, "cuda", lambda: found)


def test_serve_and_connect_give_the_same_reason_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    driver(monkeypatch, NO_DRIVER)
    reason = r"needs a CUDA GPU: no NVIDIA driver \(libcuda.so.1 not found\); "
    with pytest.raises(
        DeviceError, match=r"^serve\(\.\.\., cuda=True\) " + reason + "serve without"
    ):
        rdma.serve(buffer_size=4096, provider=provider, cuda=True)
    with (
        rdma.serve(buffer_size=4096, provider=provider) as server,
        pytest.raises(DeviceError, match=r"^connect\(\.\.\., cuda=True\) " + reason),
    ):
        rdma.connect(server.local_addr, cuda=True)


def test_cuda_argument_and_device_index_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("cuda:0", -1, 1.0):
        with pytest.raises(PlanError, match="cuda= takes True or a device index"):
            rdma.serve(buffer_size=4096, cuda=bad)  # type: ignore[arg-type]
    driver(monkeypatch, {"found": True, "devices": 1, "library": "libcuda.so.1"})
    with pytest.raises(DeviceError, match=r"cuda:3 does not exist; this host has 1 GPU\(s\)"):
        rdma.serve(buffer_size=4096, cuda=3)
    if not torch.cuda.is_available():  # the driver says yes, torch says no: both named
        with pytest.raises(DeviceError, match=r"torch .* sees no GPU \(cuda: found"):
            rdma.serve(buffer_size=4096, cuda=True)
    with pytest.raises(DeviceError, match=r"needs libfabric >= 1.9 for FI_HMEM"):
        _cuda.require_cuda("serve(..., cuda=True)", 1 << 16 | 8, instead="")


def test_a_provider_without_fi_hmem_is_a_device_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # the GPU checks pass (a CPU tensor stands in), so the provider is what is missing
    monkeypatch.setattr(
        _server,
        "device_buffer",
        lambda size, cuda, version: (torch.zeros(size, dtype=torch.uint8), 0),
    )
    with pytest.raises(DeviceError, match=r"serve\(\.\.\., cuda=True\): no provider offers a "
                       r"device-memory \(FI_HMEM\) path here: fi_getinfo found no RMA-capable "
                       r"provider 'tcp;ofi_rxm' with FI_HMEM"):  # fmt: skip
        rdma.serve(buffer_size=4096, provider="tcp;ofi_rxm", cuda=True)


@pytest.mark.gpu
def test_gpu_memory_served_and_read_back() -> None:
    if not torch.cuda.is_available():
        pytest.skip("GPUDirect needs a CUDA device; this host has none")
    if not rdma.diagnose()["hmem"]["ok"]:
        pytest.skip("no FI_HMEM provider here; diagnose() says why")
    with rdma.serve(buffer_size=1 << 20, cuda=True) as server:
        assert server.cuda == 0 and server.buffer.device == torch.device("cuda", 0)
        server.buffer.copy_(torch.arange(1 << 20, device="cuda:0").to(torch.uint8))
        torch.cuda.synchronize()
        with rdma.connect(server.local_addr) as client:  # host memory on this side
            got = rdma.read(client, offset=1000, size=4096)
        assert got == server.buffer[1000:5096].cpu().numpy().tobytes()
