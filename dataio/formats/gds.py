"""GPUDirect Storage: file bytes straight into CUDA tensors through cuFile (``kvikio``).

A read to a GPU takes the first route this host offers (:func:`choose_route`):

1. ``"gds"``: kvikio over cuFile with the GDS driver: the storage DMA lands in device
   memory, the host's page cache and memory bus untouched;
2. ``"compat"``: kvikio in its POSIX compatibility mode (no GDS driver, an unsupported
   filesystem): kvikio reads into its own pinned bounce buffers (on ``KVIKIO_NTHREADS``
   threads, 1 unless set) and copies them to the device;
3. ``"pinned"``: without kvikio, dataio reads into two alternating pinned buffers and
   copies each to the device while the next one is read.

``kvikio`` is optional (``pip install 'dataio[gds]'``) and imported on first use. A
route that was asked for and cannot be taken is a :class:`~dataio.DeviceError` naming
the missing piece with the capability report's reason (``python -m dataio``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Literal

from dataio._closing import Closing
from dataio.exceptions import DataioError, DeviceError, FormatError, PlanError
from dataio.formats import _devices
from dataio.formats._devices import compat_preferred, cuda_target, gds_info
from dataio.io.local import open_file

__all__ = [
    "GdsBuffer",
    "GdsFile",
    "ROUTES",
    "choose_route",
    "gds_open",
    "gds_read_into_tensor",
    "gds_register_buffer",
    "read_to_device",
]

Route = Literal["gds", "compat", "pinned"]
Mode = Literal["auto", "gds", "compat", "pinned"]
#: the routes in the order a read prefers them
ROUTES: tuple[Route, ...] = ("gds", "compat", "pinned")


def _kvikio() -> tuple[Any, Any, str]:
    """kvikio and its ``defaults`` module, or ``None``s and why kvikio cannot be used
    (not installed, or its libraries do not load: see :func:`_devices.load_kvikio`)."""
    return _devices.load_kvikio()


def choose_route(mode: Mode = "auto") -> tuple[Route, str]:
    """The route a device read takes for ``mode``, and why the better ones are not taken.

    ``"auto"`` takes the first of :data:`ROUTES` this host offers; naming a route
    requires it.

    Raises:
        DeviceError: the route asked for misses a piece (kvikio, cuFile's driver).
        PlanError: ``mode`` is not one of ``"auto"``, ``"gds"``, ``"compat"``, ``"pinned"``.
    """
    if mode not in ("auto", *ROUTES):
        raise PlanError(f"mode must be 'auto', 'gds', 'compat' or 'pinned', got {mode!r}")
    if mode == "pinned":
        return "pinned", ""
    kvikio, defaults, no_kvikio = _kvikio()
    if kvikio is None:
        if mode == "auto":
            return "pinned", no_kvikio
        raise DeviceError(f"mode={mode!r} reads through kvikio, which is missing: {no_kvikio}")
    info = gds_info()
    if info["available"] and not compat_preferred(defaults):
        return ("gds" if mode == "auto" else mode), ""
    why = f"gds: {info['why']}" if not info["available"] else (
        "kvikio is set to its compatibility mode (KVIKIO_COMPAT_MODE)"
    )  # fmt: skip
    if mode == "gds":
        raise DeviceError(
            f"mode='gds' needs GPUDirect Storage, which this host lacks: {why}; use "
            "mode='auto' to read through kvikio's POSIX compatibility mode instead"
        )
    return "compat", why


@contextlib.contextmanager
def _compat(kvikio: Any, defaults: Any, on: bool) -> Iterator[None]:
    """kvikio's compatibility mode switched on while a ``"compat"`` file opens (a file
    handle keeps the mode it was opened with)."""
    if not on:
        yield
        return
    setter = getattr(defaults, "set", None)
    if setter is not None:  # kvikio >= 25.04 (set_compat_mode is deprecated there)
        with setter("compat_mode", kvikio.CompatMode.ON):
            yield
    else:
        with defaults.set_compat_mode(kvikio.CompatMode.ON):
            yield


def _byte_view(tensor: Any, what: str) -> Any:
    """A contiguous tensor as a flat ``uint8`` tensor over the same memory."""
    if not tensor.is_contiguous():
        raise PlanError(f"{what} needs a contiguous tensor; call .contiguous() first")
    import torch

    return tensor.reshape(-1).view(torch.uint8)


class GdsFile(Closing):
    """A file opened for reads into device memory; see :func:`gds_open`.

    Attributes:
        path: the file.
        size: its size in bytes when opened.
        device: the ``torch.device`` reads land on.
        route: ``"gds"``, ``"compat"`` or ``"pinned"`` (see :mod:`dataio.formats.gds`).
        why: why the better routes were not taken (empty on ``"gds"``).
    """

    def __init__(self, path: str, device: Any, route: Route, why: str = "") -> None:
        self.path, self.device, self.route, self.why = path, device, route, why
        self._file = open_file(path, "open for device reads")
        self.size = os.fstat(self._file.fileno()).st_size
        self._cufile: Any = None
        self._staging: list[Any] = []
        self._ready: list[Any] = []
        if route != "pinned":
            kvikio, defaults, no_kvikio = _kvikio()
            if kvikio is None:
                self._file.close()
                raise DeviceError(f"route {route!r} reads through kvikio: {no_kvikio}")
            try:
                with _compat(kvikio, defaults, route == "compat"):
                    self._cufile = kvikio.CuFile(path, "r")
            except (RuntimeError, OSError) as exc:
                self._file.close()
                raise DeviceError(f"cuFile cannot open {path!r} ({route}): {exc}") from exc

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._file.closed

    def read_into(self, tensor: Any, *, offset: int = 0) -> int:
        """Fill ``tensor`` (contiguous, on :attr:`device`) with the bytes at ``offset``.

        Returns the bytes read (``tensor.nbytes``); the device has them on return.

        Raises:
            FormatError: the file ends before ``offset + tensor.nbytes``.
            DeviceError: ``tensor`` lives on another device, or the read failed.
        """
        if self.closed:
            raise DataioError(f"{self.path!r} is closed; open it again with gds_open")
        if tensor.device != self.device:
            raise DeviceError(
                f"{self.path!r} was opened for {self.device}, but the tensor is on "
                f"{tensor.device}; open it with gds_open(..., device={str(tensor.device)!r})"
            )
        dest = _byte_view(tensor, "gds_read_into_tensor")
        n = int(dest.numel())
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise PlanError(f"offset must be a non-negative byte offset, got {offset!r}")
        if offset + n > self.size:
            raise FormatError(
                f"{self.path!r} is {self.size} bytes; reading {n} at offset {offset} passes "
                "its end (was it truncated?)"
            )
        if n == 0:
            return 0
        if self._cufile is not None:
            return self._read_kvikio(dest, offset, n)
        return self._read_bounced(dest, offset, n)

    def _read_kvikio(self, dest: Any, offset: int, n: int) -> int:
        if dest.device.type == "cuda":
            # kvikio writes from its own threads and stream (or cuFile's DMA), unordered
            # with torch's: work torch has queued on the tensor (a zero_(), the kernels of
            # the memory's previous owner) must finish first, or it lands after the read
            import torch

            torch.cuda.current_stream(dest.device).synchronize()
        try:
            done = int(self._cufile.pread(dest, n, offset).get())
        except TypeError as exc:  # kvikio takes CUDA tensors (and host buffers), not CPU tensors
            raise DeviceError(
                f"kvikio cannot read {self.path!r} into a {dest.device} tensor: {exc}"
            ) from exc
        except (RuntimeError, OSError) as exc:
            raise DeviceError(f"cuFile read of {self.path!r} ({self.route}) failed: {exc}") from exc
        if done != n:
            raise FormatError(
                f"{self.path!r}: read {done} of {n} bytes at offset {offset}; the file "
                "shrank while being read"
            )
        return n

    def _read_bounced(self, dest: Any, offset: int, n: int) -> int:
        """Two staging buffers alternate: the host fills one while the device copies the
        other; an event per buffer says when it may be refilled."""
        import torch

        cuda = dest.device.type == "cuda"
        size = _devices.STAGING_BYTES
        if not self._staging or self._staging[0].numel() != size:
            self._staging = [torch.empty(size, dtype=torch.uint8, pin_memory=cuda) for _ in "ab"]
            self._ready = [torch.cuda.Event() if cuda else None for _ in "ab"]
        fd, turn, used = self._file.fileno(), 0, [False, False]
        # copies and events on the target's current stream, whatever device is current
        with torch.cuda.device(dest.device) if cuda else contextlib.nullcontext():
            for start in range(0, n, size):
                k = min(size, n - start)
                if used[turn] and cuda:
                    self._ready[turn].synchronize()  # the device has finished reading it
                staged = self._staging[turn][:k]
                self._fill(fd, staged.numpy(), offset + start)
                dest[start : start + k].copy_(staged, non_blocking=cuda)
                if cuda:
                    self._ready[turn].record()
                used[turn] = True
                turn ^= 1
            if cuda:
                torch.cuda.current_stream().synchronize()
        return n

    def _fill(self, fd: int, buffer: Any, at: int) -> None:
        view, done = memoryview(buffer), 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], at + done)
            if got == 0:
                raise FormatError(
                    f"{self.path!r} ends at byte {at + done}, before the {len(view)} bytes "
                    f"asked for at offset {at}; it was truncated while being read"
                )
            done += got

    def close(self) -> None:
        """Close the file (and its cuFile handle)."""
        if self._cufile is not None:
            self._cufile.close()
            self._cufile = None
        self._staging, self._ready = [], []
        self._file.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.size} bytes"
        return f"<GdsFile {self.path!r} -> {self.device} via {self.route} ({state})>"


def _gpu(device: Any, what: str) -> Any:
    target = cuda_target(str(device), "torch")
    if target is None:
        raise DeviceError(
            f"{what} reads into GPU memory, not {str(device)!r}; pass device='cuda:N' "
            "(read_safetensors or open() read into host memory)"
        )
    return target


def gds_open(
    path: str | os.PathLike[str], *, device: str = "cuda:0", mode: Mode = "auto"
) -> GdsFile:
    """Open a local file for reads straight into ``device`` memory.

    ``mode="auto"`` takes the best route this host offers: cuFile with GPUDirect
    Storage, else kvikio's POSIX compatibility mode, else dataio's pinned bounce
    buffers (``.route`` and ``.why`` on the result say which, and why).

    Raises:
        DeviceError: ``device`` is no GPU here, or the route asked for misses a piece.
        NotFoundError: ``path`` does not exist.

    Example:
        >>> with dataio.gds_open("model.safetensors", device="cuda:0") as f:  # doctest: +SKIP
        ...     dataio.gds_read_into_tensor(f, weight, offset=4096)
    """
    target = _gpu(device, "gds_open")
    route, why = choose_route(mode)
    return GdsFile(os.fspath(path), target, route, why)


class GdsBuffer(Closing):
    """A device tensor registered with cuFile; :meth:`close` deregisters it.

    Attributes:
        tensor: the registered tensor.
        registered: whether cuFile pinned it (``False`` where reads go through kvikio's
            compatibility mode, which needs no registration).
    """

    def __init__(self, tensor: Any, kvikio: Any, registered: bool) -> None:
        self.tensor, self.registered = tensor, registered
        self._kvikio = kvikio

    def close(self) -> None:
        """Deregister the tensor (once); it stays a valid tensor."""
        if self.registered:
            self.registered = False
            self._kvikio.memory_deregister(self.tensor)

    def __repr__(self) -> str:
        state = "registered" if self.registered else "not registered"
        return f"<GdsBuffer {tuple(self.tensor.shape)} on {self.tensor.device} ({state})>"


def gds_register_buffer(tensor: Any) -> GdsBuffer:
    """Register a CUDA tensor with cuFile for repeated reads into it (a streaming buffer).

    cuFile maps a registered buffer once instead of on every read. Use it as a context
    manager, or call ``close()`` to deregister.

    Raises:
        DeviceError: the tensor is not on a GPU, kvikio is missing, or cuFile refused.

    Example:
        >>> with dataio.gds_register_buffer(torch.empty(1 << 26, dtype=torch.uint8,
        ...                                             device="cuda:0")):  # doctest: +SKIP
        ...     ...
    """
    device = getattr(tensor, "device", None)
    if getattr(device, "type", None) != "cuda":
        raise DeviceError(
            f"gds_register_buffer takes a CUDA tensor, got one on {device}; cuFile "
            "registers device memory"
        )
    _byte_view(tensor, "gds_register_buffer")
    kvikio, _, no_kvikio = _kvikio()
    if kvikio is None:
        raise DeviceError(f"gds_register_buffer needs kvikio, which is missing: {no_kvikio}")
    route, _ = choose_route("auto")
    if route != "gds":
        return GdsBuffer(tensor, kvikio, registered=False)
    try:
        kvikio.memory_register(tensor)
    except (RuntimeError, OSError) as exc:
        raise DeviceError(f"cuFile refused to register the buffer: {exc}") from exc
    return GdsBuffer(tensor, kvikio, registered=True)


def gds_read_into_tensor(
    file: GdsFile | str | os.PathLike[str], tensor: Any, *, offset: int = 0
) -> int:
    """Fill a contiguous device tensor with ``tensor.nbytes`` bytes of ``file`` at ``offset``.

    ``file`` is a :func:`gds_open` handle (opened for the tensor's device) or a path,
    opened for this one read. Returns the number of bytes read.

    Raises:
        FormatError: the file ends before the range does.
        DeviceError: the tensor is not on a GPU (or not on the handle's device).

    Example:
        >>> w = torch.empty((4096, 4096), dtype=torch.bfloat16, device="cuda:0")  # doctest: +SKIP
        >>> dataio.gds_read_into_tensor("model.safetensors", w, offset=8 + 1024)  # doctest: +SKIP
        33554432
    """
    if isinstance(file, GdsFile):
        return file.read_into(tensor, offset=offset)
    device = getattr(tensor, "device", "cpu")
    with gds_open(file, device=str(device)) as opened:
        return opened.read_into(tensor, offset=offset)


def read_to_device(
    items: list[tuple[str, str, Any, int]], target: Any, *, mode: Mode = "auto"
) -> dict[str, Any]:
    """Read tensors from local files into new tensors on ``target``.

    ``items`` are ``(name, path, like, offset)``: ``like`` gives the shape and dtype
    (a CPU view of the file, never touched), ``offset`` where its bytes start. Each file
    opens once; the route is chosen once (see :func:`choose_route`).
    """
    import torch

    route, why = choose_route(mode)
    out: dict[str, Any] = {}
    files: dict[str, GdsFile] = {}
    try:
        for name, path, like, offset in items:
            dest = torch.empty(tuple(like.shape), dtype=like.dtype, device=target)
            if dest.numel():
                opened = files.get(path)
                if opened is None:
                    opened = files[path] = GdsFile(path, target, route, why)
                opened.read_into(dest, offset=offset)
            out[name] = dest
    finally:
        for opened in files.values():
            opened.close()
    return out
