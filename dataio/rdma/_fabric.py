"""One opened libfabric endpoint and its memory registrations, over the cffi shim.

An :class:`Endpoint` owns a fabric, a domain, a completion queue, an address vector and
a reliable-datagram (``FI_EP_RDM``) endpoint, opened for one provider. Its
``mr_mode`` decides how memory is addressed:

* offset addressing (``mr_mode`` 0, the loopback providers ``tcp;ofi_rxm`` and
  ``sockets``): remote addresses count from the start of the region;
* ``FI_MR_VIRT_ADDR`` (verbs, EFA, ...): remote addresses are the target's virtual
  addresses, so the region's base is its buffer address;
* ``FI_MR_PROV_KEY``: the provider picks the key, read back with ``fi_mr_key``;
* ``FI_MR_LOCAL``: local buffers must be registered too, and their descriptor passed;
* ``FI_MR_ENDPOINT``: a region must be bound to the endpoint and enabled.

``DATAIO_RDMA_MR_LOCAL=1`` registers local buffers even where the provider does not ask,
which runs the real-NIC local-registration path on loopback providers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dataio.exceptions import TransportError
from dataio.rdma._build import Shim

__all__ = [
    "FALLBACK_PROVIDERS",
    "Endpoint",
    "Region",
    "error_text",
    "getinfo",
    "make_hints",
    "mr_mode_names",
    "region_base",
]

# Software providers: usable anywhere, chosen only when no NIC provider matches.
FALLBACK_PROVIDERS = ("tcp;ofi_rxm", "net;ofi_rxm", "sockets", "net", "tcp", "udp;ofi_rxd")
# Intra-host only: never picked by default, though a caller may ask for them.
LOCAL_ONLY_PROVIDERS = ("shm", "sm2")

ENV_MR_LOCAL = "DATAIO_RDMA_MR_LOCAL"
_MR_BITS: tuple[str, ...] = ("LOCAL", "RAW", "VIRT_ADDR", "ALLOCATED", "PROV_KEY", "MMU_NOTIFY")
_MR_BITS += ("RMA_EVENT", "ENDPOINT", "HMEM")
_KEY_BASE = 0xDA7A_0000
_key_lock = threading.Lock()
_next_key = [_KEY_BASE]


def error_text(shim: Shim, rc: int) -> str:
    """``fi_strerror`` for a negative libfabric return code."""
    return str(shim.ffi.string(shim.lib.fi_strerror(-rc)).decode(errors="replace"))


def mr_mode_names(shim: Shim, mode: int) -> list[str]:
    """Name the ``FI_MR_*`` bits set in ``mode``."""
    lib = shim.lib
    return [f"FI_MR_{n}" for n in _MR_BITS if mode & getattr(lib, f"FI_MR_{n}")]


def region_base(shim: Shim, mr_mode: int, address: int) -> int:
    """The remote address of a region's first byte: its virtual address or 0."""
    return address if mr_mode & shim.lib.FI_MR_VIRT_ADDR else 0


def supported_mr_mode(shim: Shim, *, hmem: bool) -> int:
    """The ``FI_MR_*`` bits this code honours, offered to ``fi_getinfo``."""
    lib = shim.lib
    mode = lib.FI_MR_LOCAL | lib.FI_MR_VIRT_ADDR | lib.FI_MR_ALLOCATED | lib.FI_MR_PROV_KEY
    mode |= lib.FI_MR_ENDPOINT
    return mode | lib.FI_MR_HMEM if hmem else mode


def make_hints(shim: Shim, *, provider: str | None, hmem: bool = False) -> Any:
    """``fi_info`` hints for one-sided RMA over a reliable-datagram endpoint."""
    ffi, lib = shim.ffi, shim.lib
    hints = ffi.gc(lib.fi_allocinfo(), lib.fi_freeinfo)
    if hints == ffi.NULL:
        raise MemoryError("fi_allocinfo failed")
    caps = lib.FI_RMA | lib.FI_READ | lib.FI_WRITE | lib.FI_REMOTE_READ | lib.FI_REMOTE_WRITE
    hints.caps = caps | lib.FI_HMEM if hmem else caps
    hints.mode = lib.FI_CONTEXT | lib.FI_CONTEXT2
    hints.ep_attr.type = lib.FI_EP_RDM
    hints.domain_attr.mr_mode = supported_mr_mode(shim, hmem=hmem)
    hints.domain_attr.threading = lib.FI_THREAD_SAFE
    # Both sides drive progress themselves (the server's progress thread, the client's
    # completion loop); auto progress would add the provider's own thread and its naps.
    hints.domain_attr.data_progress = lib.FI_PROGRESS_MANUAL
    # Without it tcp;ofi_rxm completes a write once it is sent, before it lands.
    hints.tx_attr.op_flags = lib.FI_DELIVERY_COMPLETE
    if lib.dio_set_provider(hints, provider.encode() if provider else ffi.NULL):
        raise MemoryError("strdup failed")
    return hints


@dataclass(frozen=True)
class Candidate:
    """A snapshot of one ``fi_info`` entry, safe to keep after ``fi_freeinfo``."""

    provider: str
    fabric: str
    domain: str
    caps: int
    mr_mode: int
    ep_type: int
    max_msg_size: int
    tx_size: int
    addr_format: int


def _string(shim: Shim, pointer: Any) -> str:
    return "" if pointer == shim.ffi.NULL else str(shim.ffi.string(pointer).decode())


def _snapshot(shim: Shim, info: Any) -> Candidate:
    return Candidate(
        provider=_string(shim, info.fabric_attr.prov_name),
        fabric=_string(shim, info.fabric_attr.name),
        domain=_string(shim, info.domain_attr.name),
        caps=int(info.caps),
        mr_mode=int(info.domain_attr.mr_mode),
        ep_type=int(info.ep_attr.type),
        max_msg_size=int(info.ep_attr.max_msg_size),
        tx_size=int(info.tx_attr.size),
        addr_format=int(info.addr_format),
    )


@contextmanager
def getinfo(
    shim: Shim, hints: Any, *, node: str | None = None, source: bool = False
) -> Iterator[tuple[int, list[tuple[Candidate, Any]]]]:
    """Run ``fi_getinfo``; yield ``(rc, [(snapshot, fi_info*), ...])``, freed on exit."""
    ffi, lib = shim.ffi, shim.lib
    out = ffi.new("struct fi_info **")
    flags = lib.FI_SOURCE if source else 0
    version = min(int(lib.fi_version()), int(lib.dio_header_version()))
    node_arg = node.encode() if node else ffi.NULL
    rc = lib.fi_getinfo(version, node_arg, ffi.NULL, flags, hints, out)
    entries = []
    pointer = out[0] if rc == 0 else ffi.NULL
    while pointer != ffi.NULL:
        entries.append((_snapshot(shim, pointer), pointer))
        pointer = pointer.next
    try:
        yield rc, entries
    finally:
        if rc == 0:
            lib.fi_freeinfo(out[0])


def choose(entries: list[tuple[Candidate, Any]], provider: str | None) -> tuple[Candidate, Any]:
    """Pick the entry to open: the named provider, else a NIC one, else a fallback."""
    if provider or len(entries) == 1:
        return entries[0]
    for entry in entries:
        name = entry[0].provider
        if name not in FALLBACK_PROVIDERS and name not in LOCAL_ONLY_PROVIDERS:
            return entry
    for name in FALLBACK_PROVIDERS:
        for entry in entries:
            if entry[0].provider == name:
                return entry
    return entries[0]


@dataclass
class Region:
    """A registered memory region: what a peer needs (``base``, ``key``) and ``desc``."""

    mr: Any
    desc: Any
    key: int
    base: int
    length: int


class Endpoint:
    """An RDM endpoint with its fabric, domain, CQ and AV, opened for one provider.

    Args:
        shim: the loaded extension.
        provider: a libfabric provider name (``"tcp;ofi_rxm"``), or None to choose.
        node: the local address to bind (servers), or None (clients).
        hmem: require ``FI_HMEM`` (device memory registration).
        wait: give the CQ a wait fd when the provider has one (``wait_fd``, else -1).

    Raises:
        TransportError: no provider matched or an open failed; the message says which.
    """

    def __init__(
        self,
        shim: Shim,
        *,
        provider: str | None,
        node: str | None = None,
        hmem: bool = False,
        wait: bool = True,
    ) -> None:
        self.shim = shim
        self._fids: list[Any] = []
        self._regions: list[Region] = []
        self._lock = threading.Lock()
        self.closed = False
        if provider in LOCAL_ONLY_PROVIDERS:
            node = None  # shm reads the node as its region name; two would collide
        hints = make_hints(shim, provider=provider, hmem=hmem)
        with getinfo(shim, hints, node=node, source=node is not None) as (rc, entries):
            if rc or not entries:
                what = f"provider {provider!r}" if provider else "any provider"
                extra = " with FI_HMEM" if hmem else ""
                raise TransportError(
                    f"fi_getinfo found no RMA-capable {what}{extra}"
                    f"{f' on {node!r}' if node else ''} ({error_text(shim, rc) if rc else 'empty'})"
                    "; run dataio.rdma.diagnose() to see why each provider does not match"
                )
            candidate, info = choose(entries, provider)
            try:
                self._open(info, wait)
            except BaseException:
                self.close()
                raise
        self.candidate = candidate
        self.provider = candidate.provider
        self.mr_mode = candidate.mr_mode
        self.register_local = bool(self.mr_mode & shim.lib.FI_MR_LOCAL) or os.environ.get(
            ENV_MR_LOCAL, ""
        ) not in ("", "0")
        max_msg = candidate.max_msg_size
        self.max_msg_size = max_msg if 0 < max_msg < (1 << 62) else 1 << 62
        self.tx_size = max(1, candidate.tx_size)

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise TransportError(f"{what} failed: {error_text(self.shim, rc)} ({rc})")

    def _open(self, info: Any, wait: bool) -> None:
        ffi, lib = self.shim.ffi, self.shim.lib
        fabric = ffi.new("struct fid_fabric **")
        self._check(lib.fi_fabric(info.fabric_attr, fabric, ffi.NULL), "fi_fabric")
        self._fids.append(fabric[0])
        domain = ffi.new("struct fid_domain **")
        self._check(lib.fi_domain(fabric[0], info, domain, ffi.NULL), "fi_domain")
        self._fids.append(domain[0])
        self.domain = domain[0]
        cq_attr = ffi.new("struct fi_cq_attr *")
        cq_attr.format = lib.FI_CQ_FORMAT_CONTEXT
        cq_attr.size = max(64, int(info.tx_attr.size))
        cq = ffi.new("struct fid_cq **")
        # A wait fd lets idle threads sleep in poll() instead of spinning (on loopback,
        # spinning starves the peer's progress); not every provider offers one.
        cq_attr.wait_obj = lib.FI_WAIT_FD if wait else lib.FI_WAIT_NONE
        rc = lib.fi_cq_open(domain[0], cq_attr, cq, ffi.NULL)
        if rc and wait:
            cq_attr.wait_obj = lib.FI_WAIT_NONE
            rc = lib.fi_cq_open(domain[0], cq_attr, cq, ffi.NULL)
        self._check(rc, "fi_cq_open")
        self._fids.append(cq[0])
        self.cq = cq[0]
        self.fabric = fabric[0]
        self.wait_fd = -1
        if cq_attr.wait_obj == lib.FI_WAIT_FD:
            fd = ffi.new("int *", -1)
            if lib.fi_control(ffi.addressof(cq[0], "fid"), lib.FI_GETWAIT, fd) == 0:
                self.wait_fd = int(fd[0])
        av_attr = ffi.new("struct fi_av_attr *")
        av_type = info.domain_attr.av_type
        av_attr.type = av_type if av_type != lib.FI_AV_UNSPEC else lib.FI_AV_TABLE
        av_attr.count = 64
        av = ffi.new("struct fid_av **")
        self._check(lib.fi_av_open(domain[0], av_attr, av, ffi.NULL), "fi_av_open")
        self._fids.append(av[0])
        self.av = av[0]
        ep = ffi.new("struct fid_ep **")
        self._check(lib.fi_endpoint(domain[0], info, ep, ffi.NULL), "fi_endpoint")
        self._fids.append(ep[0])
        self.ep = ep[0]
        self._check(
            lib.fi_ep_bind(ep[0], ffi.addressof(cq[0], "fid"), lib.FI_TRANSMIT | lib.FI_RECV),
            "fi_ep_bind(cq)",
        )
        self._check(lib.fi_ep_bind(ep[0], ffi.addressof(av[0], "fid"), 0), "fi_ep_bind(av)")
        self._check(lib.fi_enable(ep[0]), "fi_enable")
        size = ffi.new("size_t *", 256)
        name = ffi.new("char[]", 256)
        self._check(lib.fi_getname(ffi.addressof(ep[0], "fid"), name, size), "fi_getname")
        self.name = bytes(ffi.buffer(name, size[0]))

    def register(
        self, address: int, length: int, access: int, *, cuda_device: int | None = None
    ) -> Region:
        """Register ``length`` bytes at ``address`` with ``access`` (``FI_*`` bits)."""
        ffi, lib = self.shim.ffi, self.shim.lib
        with _key_lock:
            key = _next_key[0]
            _next_key[0] += 1
        iov = ffi.new("struct iovec *")
        iov.iov_base = ffi.cast("void *", address)
        iov.iov_len = max(1, length)
        attr = ffi.new("struct fi_mr_attr *")
        attr.mr_iov = iov
        attr.iov_count = 1
        attr.access = access
        attr.requested_key = key
        if cuda_device is not None:
            lib.dio_set_cuda_device(attr, cuda_device)
        mr = ffi.new("struct fid_mr **")
        with self._lock:
            if self.closed:
                raise TransportError("the endpoint is closed")
            self._check(lib.fi_mr_regattr(self.domain, attr, 0, mr), "fi_mr_regattr")
            region = Region(mr[0], lib.fi_mr_desc(mr[0]), 0, 0, length)
            self._regions.append(region)
        if self.mr_mode & lib.FI_MR_ENDPOINT:
            try:
                self._check(lib.fi_mr_bind(mr[0], ffi.addressof(self.ep, "fid"), 0), "fi_mr_bind")
                self._check(lib.fi_mr_enable(mr[0]), "fi_mr_enable")
            except TransportError:
                self.release(region)
                raise
        region.key = int(lib.fi_mr_key(mr[0]))
        region.base = region_base(self.shim, self.mr_mode, address)
        return region

    def release(self, region: Region) -> None:
        """Deregister a region (after every operation using it has completed)."""
        with self._lock:
            if region.mr is not None and not self.closed:
                self.shim.lib.fi_close(self.shim.ffi.addressof(region.mr, "fid"))
                self._regions.remove(region)
            region.mr = None

    def insert(self, name: bytes) -> int:
        """Add a peer's endpoint name to the address vector; return its ``fi_addr``."""
        ffi, lib = self.shim.ffi, self.shim.lib
        out = ffi.new("fi_addr_t *")
        rc = lib.fi_av_insert(self.av, name, 1, out, 0, ffi.NULL)
        if rc != 1:
            detail = error_text(self.shim, rc) if rc < 0 else f"{rc} inserted"
            raise TransportError(f"fi_av_insert of the server address failed: {detail}")
        return int(out[0])

    def close(self) -> None:
        """Close every object in reverse order of opening; safe to call twice."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            ffi, lib = self.shim.ffi, self.shim.lib
            fids = list(reversed(self._fids))
            # The endpoint goes first (it cancels posted work), then regions, then the rest.
            if fids and fids[0] is getattr(self, "ep", None):
                lib.fi_close(ffi.addressof(fids.pop(0), "fid"))
            for region in self._regions:
                lib.fi_close(ffi.addressof(region.mr, "fid"))
                region.mr = None
            self._regions.clear()
            for fid in fids:
                lib.fi_close(ffi.addressof(fid, "fid"))
            self._fids.clear()
