"""Endpoint choices that do not need traffic: provider preference and memory addressing."""

from __future__ import annotations

import pytest

from dataio.rdma._fabric import Candidate, choose, mr_mode_names, region_base
from dataio.rdma._loader import shim_or_raise


def _candidate(provider: str) -> Candidate:
    return Candidate(provider, "fabric", "domain", 0, 0, 3, 1 << 30, 256, 2)


@pytest.mark.parametrize(
    ("offered", "picked"),
    [
        (["tcp;ofi_rxm", "sockets"], "tcp;ofi_rxm"),
        (["sockets", "tcp;ofi_rxm"], "tcp;ofi_rxm"),
        (["shm", "udp;ofi_rxd", "sockets"], "sockets"),
        (["tcp;ofi_rxm", "efa", "sockets"], "efa"),
        (["shm", "verbs;ofi_rxm"], "verbs;ofi_rxm"),
        (["shm"], "shm"),
    ],
)
def test_nic_providers_win_then_fallbacks_in_order(offered: list[str], picked: str) -> None:
    entries = [(_candidate(name), None) for name in offered]
    assert choose(entries, None)[0].provider == picked


def test_a_named_provider_is_taken_as_listed() -> None:
    entries = [(_candidate("sockets"), None)]
    assert choose(entries, "sockets")[0].provider == "sockets"


def test_addressing_follows_mr_mode() -> None:
    shim = shim_or_raise()
    lib = shim.lib
    assert region_base(shim, 0, 0x7F00_0000_1000) == 0  # offset addressing (loopback)
    virt = lib.FI_MR_VIRT_ADDR | lib.FI_MR_PROV_KEY | lib.FI_MR_LOCAL
    assert region_base(shim, virt, 0x7F00_0000_1000) == 0x7F00_0000_1000  # verbs, EFA
    assert mr_mode_names(shim, virt) == ["FI_MR_LOCAL", "FI_MR_VIRT_ADDR", "FI_MR_PROV_KEY"]
    assert mr_mode_names(shim, 0) == []
