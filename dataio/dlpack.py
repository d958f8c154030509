"""DLPack: hand tensors to torch, JAX, CuPy or NumPy without a copy.

:func:`tensor_view` wraps a column (an Arrow ``fixed_shape_tensor`` or numeric column,
a NumPy array, any DLPack producer) in a :class:`TensorView`, which implements the
DLPack protocol (``__dlpack__`` / ``__dlpack_device__``) over the same memory:
``torch.from_dlpack(view)`` shares the column's buffer.

* Arrow columns must be one chunk without nulls (a tensor has no place for a null, and
  several chunks are several buffers); anything else is a :class:`PlanError`.
* BF16 and FP8 arrays (``ml_dtypes`` in NumPy, which cannot export them) are exported
  with DLPack's own ``bfloat`` / ``float8`` type codes.
* CUDA memory honours the protocol's stream handshake: when the producer wrote the
  memory on a stream of its own (``stream=`` of :func:`tensor_view`), the consumer's
  stream waits for that work before the capsule is handed over.
* Read-only memory (Arrow buffers, file mappings) is exported with DLPack's read-only
  flag. torch ignores that flag: do not write to such tensors (``.clone()`` first).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from dataio.exceptions import DeviceError, PlanError

__all__ = ["TensorView", "tensor_view"]

#: DLPack device types (``DLDeviceType``)
CPU, CUDA, CUDA_HOST, ROCM = 1, 2, 3, 10
_GPUS = (CUDA, ROCM)

#: DLPack type codes (``DLDataTypeCode``) for dtypes NumPy cannot export: ``ml_dtypes``
#: names -> (code, bits); float8 codes are DLPack 1.1's
EXTRA_CODES = {
    "bfloat16": (4, 16),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
}
#: offset of ``dl_tensor.dtype`` in ``DLManagedTensorVersioned`` / ``DLManagedTensor``
_DTYPE_OFFSET = {b"dltensor_versioned": 52, b"dltensor": 20}


class TensorView:
    """One tensor's memory behind the DLPack protocol; made by :func:`tensor_view`.

    Pass it to any ``from_dlpack`` (``torch.from_dlpack``, ``np.from_dlpack``,
    ``jax.dlpack.from_dlpack``, ``cupy.from_dlpack``): the result shares its memory.
    The view keeps the memory's owner (Arrow array, file mapping) alive.

    Attributes:
        shape: the tensor's shape.
        dtype: its element type's name (``"float32"``, ``"bfloat16"``, ...).
    """

    __slots__ = ("_array", "_extra", "_owner", "_stream", "dtype", "shape")

    def __init__(self, array: Any, *, owner: Any = None, stream: int | None = None) -> None:
        self._array = array  # a NumPy array, or any DLPack producer
        self._owner = owner  # what keeps the memory alive (an Arrow array, a mapping)
        self._stream = stream  # the CUDA stream that wrote the memory, if not the consumer's
        dtype = getattr(array, "dtype", None)
        self.dtype = str(dtype).replace("torch.", "") if dtype is not None else "?"
        self.shape = tuple(int(n) for n in getattr(array, "shape", ()))
        self._extra = EXTRA_CODES.get(self.dtype) if isinstance(array, np.ndarray) else None

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device type, device id)``, as DLPack numbers them (``(1, 0)`` is the CPU)."""
        kind, index = self._array.__dlpack_device__()
        return int(kind), int(index)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export a DLPack capsule over this memory (the array API's protocol).

        ``stream`` is the consumer's: on a GPU, work on it waits for the producer's
        stream; on the CPU it must be ``None``.

        Raises:
            BufferError: the protocol's error: a stream on the CPU, stream ``0``, or a
                consumer that cannot take read-only memory.
            DeviceError: GPU streams to order, but neither torch nor CuPy imports.
        """
        device = self.__dlpack_device__()
        consumer = _consumer_stream(stream, device[0])
        if self._stream is not None and consumer is not None and consumer != self._stream:
            wait_stream(self._stream, consumer, device)
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
        if device[0] in _GPUS:  # the producer below syncs with the consumer's stream too
            kwargs["stream"] = stream
        if self._extra is None:
            return self._array.__dlpack__(**kwargs)
        code, bits = self._extra
        raw = self._array.view(np.uint16 if bits == 16 else np.uint8)
        return _retype(raw.__dlpack__(**kwargs), code, bits)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self._array if isinstance(self._array, np.ndarray) else np.from_dlpack(self)
        if copy:
            array = array.copy()
        return array if dtype is None else array.astype(dtype, copy=False)

    @property
    def data_ptr(self) -> int:
        """The address of the first element (what ``Tensor.data_ptr()`` returns)."""
        if isinstance(self._array, np.ndarray):
            return int(self._array.ctypes.data)
        if hasattr(self._array, "data_ptr"):  # a torch tensor
            return int(self._array.data_ptr())
        return int(self._array.data.ptr)  # CuPy

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor view")
        return self.shape[0]

    def __repr__(self) -> str:
        kind, index = self.__dlpack_device__()
        device = "cpu" if kind in (CPU, CUDA_HOST) else f"{_device_name(kind)}:{index}"
        return f"TensorView({self.dtype}{list(self.shape)}, device={device!r})"


def tensor_view(column: Any, *, stream: int | None = None) -> TensorView:
    """A zero-copy DLPack view of a column: ``torch.from_dlpack(tensor_view(col))``.

    Takes an Arrow ``fixed_shape_tensor`` column (frame and SQL op chains,
    ``run("arrow")`` tensor slots; shape ``[n, *shape]``), an Arrow integer or
    floating column (shape ``[n]``), a one-chunk ``ChunkedArray`` of either (a
    ``pa.Table`` column), a NumPy array, or any DLPack producer.

    Args:
        column: the column or tensor.
        stream: for GPU memory, the CUDA stream (its integer handle) the producer wrote
            it on; a consumer on another stream waits for that stream's work.

    Raises:
        PlanError: the column has nulls, several chunks, or no tensor layout (strings,
            nested, bit-packed booleans), or lives on a device Arrow cannot export.

    Example:
        >>> frame = dataio.scan_parquet("photos.parquet").with_columns(  # doctest: +SKIP
        ...     x=dataio.col("jpeg").image.decode().resize(64, 64)
        ... )
        >>> images = torch.from_dlpack(dataio.tensor_view(frame.collect()["x"]))  # doctest: +SKIP
    """
    if isinstance(column, TensorView):
        return column
    if isinstance(column, np.ndarray):
        return TensorView(column)
    arrow = _arrow_array(column)
    if arrow is not None:
        return TensorView(_arrow_numpy(arrow), owner=arrow)
    if hasattr(column, "__dlpack__") and hasattr(column, "__dlpack_device__"):
        return TensorView(column, stream=stream)
    raise PlanError(
        f"tensor_view takes an Arrow column, a NumPy array or a DLPack tensor, "
        f"got {type(column).__name__}"
    )


def _arrow_array(column: Any) -> Any:
    """``column`` as one ``pa.Array`` when it is an Arrow column, else ``None``."""
    import sys

    pa = sys.modules.get("pyarrow")  # an Arrow column means pyarrow is loaded
    if pa is None or not isinstance(column, (pa.Array, pa.ChunkedArray)):
        return None
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks > 1:
            raise PlanError(
                f"this {column.type} column has {column.num_chunks} chunks, and a DLPack "
                "tensor is one buffer; view each chunk (column.chunks), or combine them "
                "first with column.combine_chunks() (one copy)"
            )
        column = column.chunk(0) if column.num_chunks else column.combine_chunks()
    if not getattr(column, "is_cpu", True):
        raise PlanError(
            f"this {column.type} column lives in device memory Arrow does not export "
            "through DLPack; view its data on the CPU"
        )
    return column


def _arrow_numpy(array: Any) -> np.ndarray:
    """The NumPy view (zero-copy) of an Arrow column that has a tensor layout."""
    import pyarrow as pa

    kind = array.type
    if isinstance(kind, pa.FixedShapeTensorType):
        nulls = array.null_count or array.storage.flatten().null_count
        value_type = kind.value_type
        numeric = pa.types.is_integer(value_type) or pa.types.is_floating(value_type)
        shape = f"fixed_shape_tensor<{value_type}, {list(kind.shape)}>"
    else:
        nulls = array.null_count
        numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        shape = str(kind)
    if not numeric:
        raise PlanError(
            f"a {shape} column has no tensor layout DLPack can share (it takes integer "
            "and floating values; booleans are bit-packed in Arrow); cast it first"
        )
    if nulls:
        raise PlanError(
            f"this {shape} column holds {nulls} null(s), which a tensor cannot represent; "
            "filter them out or fill them (fill_null) first"
        )
    if isinstance(kind, pa.FixedShapeTensorType):
        return array.to_numpy_ndarray()  # lays out permuted dimensions as strides
    return array.to_numpy(zero_copy_only=True)


def _consumer_stream(stream: int | None, device_type: int) -> int | None:
    """The consumer's stream, checked as the DLPack protocol says; ``None``: no sync."""
    if device_type not in _GPUS:
        if stream is not None:
            raise BufferError(f"stream={stream!r} was given for memory on the CPU; pass None")
        return None
    if stream is None:
        return 1  # the legacy default stream
    if stream == 0:
        raise BufferError("stream=0 is ambiguous in DLPack; pass 1 (legacy) or 2 (per-thread)")
    return None if stream == -1 else int(stream)  # -1: the consumer asks for no sync


def wait_stream(producer: int, consumer: int, device: tuple[int, int]) -> None:
    """Make ``consumer`` wait for the work queued so far on ``producer`` (CUDA handles).

    An event recorded on the producer's stream, waited on by the consumer's: the host
    never blocks. Through torch, else CuPy, whichever the process has.
    """
    try:
        import torch
    except ImportError:
        _wait_cupy(producer, consumer, device)
        return
    with torch.cuda.device(device[1]):
        event = torch.cuda.Event()
        event.record(torch.cuda.ExternalStream(producer))
        torch.cuda.ExternalStream(consumer).wait_event(event)


def _wait_cupy(producer: int, consumer: int, device: tuple[int, int]) -> None:
    try:
        import cupy
    except ImportError:
        raise DeviceError(
            f"ordering CUDA stream {consumer} after stream {producer} needs torch or cupy, "
            "and neither imports here; install one, or pass stream=-1 and synchronize "
            "yourself"
        ) from None
    with cupy.cuda.Device(device[1]):
        event = cupy.cuda.Event()
        event.record(cupy.cuda.ExternalStream(producer))
        cupy.cuda.ExternalStream(consumer).wait_event(event)


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def _retype(capsule: Any, code: int, bits: int) -> Any:
    """Rewrite the element type of a fresh (unconsumed) capsule over the same bits."""
    name = _get_name(capsule)
    address = _get_pointer(capsule, name)
    ctypes.memmove(address + _DTYPE_OFFSET[name], bytes([code, bits, 1, 0]), 4)
    return capsule


def _device_name(kind: int) -> str:
    return {CUDA: "cuda", ROCM: "rocm"}.get(kind, f"dlpack-device-{kind}")
