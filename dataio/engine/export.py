"""Outputs: NumPy batches as they are, torch tensors sharing their memory (DLPack), Arrow."""

from __future__ import annotations

import itertools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.dlpack import EXTRA_CODES, TensorView
from dataio.exceptions import DataioError, DeviceError

__all__ = ["PinnedRing", "as_tensor", "check_device", "to_arrow", "to_torch"]


def check_device(device: Any) -> Any:
    """Validate a ``run("torch", device=...)`` target; returns the ``torch.device``.

    ``"cpu"`` always works; an accelerator must be present (``"cuda:1"`` on a
    one-GPU host, ``"mps"`` off Apple silicon and unknown names raise).

    Raises:
        DeviceError: the string is not a torch device, or the device is absent.
    """
    import torch

    try:
        target = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise DeviceError(
            f"device {device!r} is not a torch device ({exc}); use 'cpu', 'cuda' or 'cuda:N'"
        ) from exc
    if target.type == "cpu":
        return target
    count = _device_count(torch, target.type)
    if count == 0:
        raise DeviceError(
            f"device {device!r} is not available on this host (torch {torch.__version__} "
            f"finds no {target.type} device); use device='cpu' or run on a host that has one"
        )
    if target.index is not None and target.index >= count:
        raise DeviceError(
            f"device {device!r} does not exist: this host has {count} {target.type} "
            f"device(s), numbered 0 to {count - 1}"
        )
    return target


def _device_count(torch: Any, kind: str) -> int:
    if kind == "cuda":
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if kind == "mps":
        return 1 if torch.backends.mps.is_available() else 0
    backend = getattr(torch, kind, None)  # xpu, npu, ...: torch.<kind>.device_count()
    try:
        return int(backend.device_count()) if backend is not None else 0
    except (AttributeError, RuntimeError):
        return 0


class PinnedRing:
    """Pinned host staging buffers, reused only once their device copy has finished.

    Each ``(shape, dtype)`` gets up to ``depth`` buffers. After a buffer's
    host-to-device copy is enqueued, :meth:`release` records an event on the copying
    stream; the buffer is handed out again only when that event has completed
    (waiting on the oldest one when all are busy), so a later batch never overwrites
    host memory an earlier copy still reads.

    ``allocate(shape, dtype)`` makes a pinned buffer and ``record()`` an event
    recorded on the current stream, with ``query()`` and ``synchronize()``; both are
    parameters so the reuse logic runs without a GPU in tests.
    """

    def __init__(
        self,
        allocate: Callable[[tuple[int, ...], Any], Any],
        record: Callable[[], Any],
        *,
        depth: int = 3,
        shapes: int = 8,
    ) -> None:
        self._allocate = allocate
        self._record = record
        self._depth = depth
        self._shapes = shapes
        self._rings: OrderedDict[tuple[Any, ...], list[_Staged]] = OrderedDict()
        self._owners: dict[int, _Staged] = {}
        self._order = itertools.count()
        self._lock = threading.Lock()

    def acquire(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A buffer of ``shape``/``dtype`` no pending copy reads; yours until :meth:`release`."""
        with self._lock:
            ring = self._ring((tuple(shape), dtype))
            idle = [s for s in ring if not s.claimed]
            done = next((s for s in idle if s.event is None or s.event.query()), None)
            if done is None and len(ring) < self._depth:
                done = _Staged(self._allocate(tuple(shape), dtype))
                ring.append(done)
                self._owners[id(done.buffer)] = done
            if done is not None:
                done.claimed, done.event = True, None
                return done.buffer
            if not idle:  # all claimed by other threads' copies: stage privately
                return self._allocate(tuple(shape), dtype)
            oldest = min(idle, key=lambda s: s.order)
            oldest.claimed = True
        oldest.event.synchronize()  # outside the lock: other shapes keep flowing
        oldest.event = None
        return oldest.buffer

    def release(self, buffer: Any) -> None:
        """Record, on the current stream, the end of the copy that reads ``buffer``."""
        event = self._record()
        with self._lock:
            staged = self._owners.get(id(buffer))
            if staged is not None and staged.buffer is buffer:
                staged.event, staged.order, staged.claimed = event, next(self._order), False

    def _ring(self, key: tuple[Any, ...]) -> list[_Staged]:
        ring = self._rings.pop(key, [])
        self._rings[key] = ring  # most recently used last
        while len(self._rings) > self._shapes:
            _, dropped = self._rings.popitem(last=False)
            for staged in dropped:  # torch's host allocator frees pinned memory safely
                self._owners.pop(id(staged.buffer), None)
        return ring


class _Staged:
    """One staging buffer, the event of its last copy, and whether a copy holds it."""

    __slots__ = ("buffer", "claimed", "event", "order")

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.claimed = False
        self.event: Any = None
        self.order = 0


_rings: dict[Any, PinnedRing] = {}
_rings_lock = threading.Lock()


def _cuda_ring(target: Any) -> PinnedRing:
    """The process's staging ring for one CUDA device, made on first use."""
    import torch

    with _rings_lock:
        ring = _rings.get(target)
        if ring is None:

            def allocate(shape: tuple[int, ...], dtype: Any) -> Any:
                return torch.empty(shape, dtype=dtype, pin_memory=True)

            def record() -> Any:
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(target))
                return event

            ring = _rings[target] = PinnedRing(allocate, record)
    return ring


def to_torch(batch: Batch, device: Any = None) -> Batch:
    """Convert tensor columns to torch tensors through DLPack, without copying.

    NumPy columns (the native kernels' outputs) and any other DLPack producer (DALI,
    CuPy, :class:`~dataio.TensorView`) become tensors with ``torch.from_dlpack`` over
    the same memory; a CUDA producer is handed torch's current stream as the
    consumer's, so its work is ordered before anything torch queues on the tensor.
    Read-only NumPy columns (zero-copy views of Arrow buffers: labels, scores) are
    copied: a torch tensor is writable, and a write through it would reach Arrow's
    immutable, possibly read-only mapped, memory.

    With a CUDA ``device`` each CPU column is staged through a reused pinned buffer and
    copied asynchronously (see :class:`PinnedRing`); columns already on that device
    stay as they are; other devices get ``.to(device)``.
    """
    import torch

    target = None if device is None else torch.device(device)
    columns: dict[str, Any] = {}
    for name, column in batch._columns.items():
        tensor = as_tensor(column)
        columns[name] = column if tensor is None else _place(tensor, target)
    return batch.with_columns(columns)


def as_tensor(column: Any) -> Any:
    """``column`` as a torch tensor sharing its memory, or ``None`` if it is no tensor."""
    import torch

    if isinstance(column, torch.Tensor):
        return column
    if isinstance(column, np.ndarray):
        if not column.flags.writeable:  # see to_torch: never a writable view of Arrow memory
            column = column.copy()
        # TensorView exports ml_dtypes (bfloat16, float8), which NumPy cannot, with
        # DLPack's own type codes
        producer = TensorView(column) if column.dtype.name in EXTRA_CODES else column
        try:
            return torch.from_dlpack(producer)
        except (BufferError, RuntimeError, TypeError):  # a dtype DLPack has no code for
            return torch.from_numpy(column)  # torch's own error for the truly unsupported
    if _is_arrow(column):  # Arrow columns export DLPack too, but stay Arrow (see Batch)
        return None
    if hasattr(column, "__dlpack__") and hasattr(column, "__dlpack_device__"):
        return torch.from_dlpack(column)  # passes torch's current stream for CUDA memory
    return None


def _is_arrow(column: Any) -> bool:
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(column, (pa.Array, pa.ChunkedArray))


def _place(tensor: Any, target: Any) -> Any:
    if target is None or (target.type == "cpu" and tensor.device.type == "cpu"):
        return tensor
    if tensor.device.type == "cpu" and target.type == "cuda":
        return _to_cuda(tensor, target)
    return tensor.to(target)


def _to_cuda(tensor: Any, target: Any) -> Any:
    ring = _cuda_ring(target)
    host = ring.acquire(tuple(tensor.shape), tensor.dtype)
    host.copy_(tensor)
    out = host.to(target, non_blocking=True)
    ring.release(host)
    return out


def to_arrow(batch: Batch) -> Any:
    """Build a ``pyarrow.RecordBatch``: tensor slots as ``fixed_shape_tensor`` columns.

    Also carries ``__index__`` (record indices) and ``__key__`` when rows have keys.
    """
    import pyarrow as pa

    arrays: list[Any] = []
    names: list[str] = []
    for name, column in batch._columns.items():
        if batch.mixed_by and name in batch.row_values:
            continue  # per-record values mean nothing for blended rows
        if isinstance(column, pa.Array):
            arrays.append(column)  # a passthrough column of Arrow rows, as it came
            names.append(name)
            continue
        if isinstance(column, TensorView):
            column = np.asarray(column)  # its NumPy array (bfloat16 included)
        elif hasattr(column, "__dlpack__") and not isinstance(column, np.ndarray):
            column = np.from_dlpack(column)  # a CPU torch tensor: same memory
        if isinstance(column, np.ndarray) and column.ndim == 1:
            arrays.append(pa.array(column))  # one number per row: a plain column
        elif isinstance(column, np.ndarray):
            arrays.append(pa.FixedShapeTensorArray.from_numpy_ndarray(column))
        else:
            try:
                arrays.append(pa.array(column))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                kinds = sorted({type(v).__name__ for v in column})
                raise DataioError(
                    f"passthrough slot {name!r} holds values Arrow cannot represent ({kinds}); "
                    "map them to plain types (numbers, strings, bytes, lists, dicts) first"
                ) from exc
        names.append(name)
    if batch.mixed_by is None:
        arrays.append(pa.array(batch._indices, pa.int64()))
        names.append("__index__")
        keys = batch._keys
        if isinstance(keys, np.ndarray):
            keys = pa.array(keys)
        if isinstance(keys, pa.Array):
            if keys.null_count < len(keys):
                arrays.append(keys)
                names.append("__key__")
        elif any(k is not None for k in batch.row_keys):
            arrays.append(pa.array(batch.row_keys))
            names.append("__key__")
    return pa.RecordBatch.from_arrays(arrays, names=names)
