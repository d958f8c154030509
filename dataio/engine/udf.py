"""Slot chains as DataFusion scalar functions: one fused kernel call per record batch.

A chain is what a slot holds (a decoder op, then transforms, normalize/output). It is
lowered once by :mod:`dataio.engine.lower` into the same fused kernel a pipeline runs;
the scalar function then runs that kernel over each record batch DataFusion hands it:

* values are read zero-copy from the ``binary_view`` buffers DataFusion passes
  (``binary`` and ``large_binary`` columns are coerced to views, which keep the data
  buffers); a string column holds paths (any URI of :mod:`dataio.io`), read with
  :func:`dataio.io.read_bytes`;
* the rows are spread over dataio's CPU pool (:func:`dataio.engine.pool.cpu_pool`) in
  contiguous runs, each kernel call writing into one preallocated output buffer;
* a chain with a static per-row shape returns ``pa.fixed_shape_tensor(dtype, shape)``
  (DataFusion keeps the extension type on the field); any other chain returns the
  variable-shape struct ``{data: large_list<dtype>, shape: list<int32>}`` (the layout of
  Arrow's canonical ``arrow.variable_shape_tensor``, with a 64-bit list so one batch of
  large images cannot overflow its offsets);
* null values give null rows; a value that fails raises the kernel's error class
  (``DecodeError``, ``LimitError``, ...) naming the row of the batch and its path or
  size: SQL has no ``on_failure``, so the query fails (filter bad rows out first);
* a chain with random ops needs a seed (``ChainExpr.seed(s)``) and each row's position
  (DataFusion may split and reorder batches, so a batch's row offsets are no positions):
  row ``i`` draws from :func:`~dataio.engine.executor.record_rng` ``(seed, 0, i, 0)``,
  the generator a single-slot pipeline uses for record ``i`` at epoch 0, so the values
  equal the slot path's. Frames pass the row's position in the frame's order (see
  :mod:`dataio.engine.compile`); SQL functions take it as a second argument. Unseeded
  random chains are refused with a :class:`~dataio.exceptions.PlanError`.
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio.engine.lower import SlotKernel
from dataio.exceptions import DataioError, DecodeError, PlanError, QueryError, TransformError
from dataio.plan.ops import Op

__all__ = [
    "ChainKernel",
    "chain_kernel",
    "chain_udf",
    "compile_chain",
    "decode_image_udf",
    "image_sizes",
    "run_batch",
]

_PATH_TYPES = ("Utf8", "LargeUtf8", "Utf8View")
_MAX_BINARY = 2**31 - 1  # a plain ``binary`` array's int32 offsets
_recent: collections.deque[DataioError] = collections.deque(maxlen=32)  # append is atomic


@dataclass(frozen=True)
class ChainKernel:
    """A lowered chain and the Arrow type it returns.

    Attributes:
        ops: the chain's ops, decoder first.
        kernel: the fused kernel (the one a pipeline slot runs).
        dtype: the NumPy dtype of every output value.
        shape: the per-row shape when static (the kernel's, else the registry's
            :func:`~dataio.plan.registry.chain_type`), else ``None``.
        arrow_type: ``fixed_shape_tensor`` when ``shape`` is set, else the variable-shape
            struct ``{data: large_list<dtype>, shape: list<int32>}``.
        label: the chain as text, for errors.
    """

    ops: tuple[Op, ...]
    kernel: SlotKernel
    dtype: np.dtype
    shape: tuple[int, ...] | None
    arrow_type: Any
    label: str


def chain_kernel(ops: tuple[Op, ...], *, seeded: bool = False) -> ChainKernel:
    """Lower ``ops`` (decoder first) into the fused kernel a pipeline slot would run.

    ``seeded``: the caller passes a seed and row positions, so random ops are allowed.

    Raises:
        PlanError: the chain is malformed, random without a seed, ends in a batch-level
            custom op, or yields Python objects or a dtype Arrow cannot hold.
    """
    try:
        return _cached_kernel(ops, seeded)
    except TypeError:  # an unhashable parameter: lower without the cache
        return _lower_chain(ops, seeded)


@functools.lru_cache(maxsize=64)
def _cached_kernel(ops: tuple[Op, ...], seeded: bool) -> ChainKernel:
    return _lower_chain(ops, seeded)


def _lower_chain(ops: tuple[Op, ...], seeded: bool = False) -> ChainKernel:
    from dataio.engine.lower import lower_chain
    from dataio.plan.registry import chain_type

    label = " -> ".join(repr(op) for op in ops) or "an empty chain"
    if not ops or ops[0].kind != "decode":
        raise PlanError(f"chain {label}: it must start with a decoder, e.g. decoders.image()")
    kernel = lower_chain(ops)  # the very kernel a pipeline slot with this chain runs
    if kernel.random and not seeded:
        raise PlanError(
            f"chain {label} has random ops and no seed: give the chain expression one, "
            'col("jpeg").image.decode()...random_crop(224).seed(0) (frames seed row i as '
            "a pipeline run(seed=0) seeds record i); a SQL function of a seeded chain takes "
            "each row's position too: prep(jpeg, pos)"
        )
    if kernel.custom:
        raise PlanError(f"chain {label}: custom ops run on whole batches in a pipeline only")
    if kernel.objects:
        raise PlanError(
            f"chain {label} yields Python objects, not arrays; read such columns as they are"
        )
    declared = chain_type(ops)  # the registry's output rule
    dtype = _output_dtype(kernel, declared.dtype, label)
    shape = kernel.row_shape or declared.static_shape
    pa = pa_module()
    value_type = _arrow_value_type(dtype, label)
    if shape is not None:
        arrow_type = pa.fixed_shape_tensor(value_type, list(shape))
    else:
        arrow_type = pa.struct(
            [("data", pa.large_list(value_type)), ("shape", pa.list_(pa.int32()))]
        )
    return ChainKernel(ops, kernel, dtype, shape, arrow_type, label)


def pa_module() -> Any:
    """``pyarrow``, imported on first use."""
    import pyarrow as pa

    return pa


def _output_dtype(kernel: SlotKernel, declared: str | None, label: str) -> np.dtype:
    from dataio.udfs.arrays import numpy_dtype

    if kernel.row_shape is not None and kernel.dtype is not None:
        return kernel.dtype  # what the kernel writes into the buffer
    if declared is not None:
        return numpy_dtype(declared) if declared == "bfloat16" else np.dtype(declared)
    raise PlanError(
        f"chain {label}: its dtype is only known after reading; end it with "
        "transforms.to_dtype(...) to give the column a type"
    )


def _arrow_value_type(dtype: np.dtype, label: str) -> Any:
    pa = pa_module()
    try:
        return pa.from_numpy_dtype(dtype)
    except (pa.ArrowNotImplementedError, NotImplementedError, TypeError) as exc:
        raise PlanError(
            f"chain {label}: Arrow has no {dtype} type; cast with to_dtype('float32')"
        ) from exc


# -- reading values ---------------------------------------------------------------------------


def _reader(values: Any) -> Callable[[int], memoryview]:
    """``value(i)``: row ``i`` of a binary/large_binary/binary_view array, zero-copy."""
    pa = pa_module()
    buffers = values.buffers()
    start = values.offset
    empty = memoryview(b"")

    def raw(buffer: Any) -> memoryview:
        return memoryview(buffer).cast("B") if buffer is not None else empty

    if values.type == pa.binary_view() or values.type == pa.string_view():
        views_raw = raw(buffers[1])
        views = np.frombuffer(views_raw, np.int32).reshape(-1, 4)
        data = [raw(b) for b in buffers[2:]]

        def view(i: int) -> memoryview:
            j = start + i
            length, _, index, offset = (int(v) for v in views[j])
            if length <= 12:  # stored inline, after the length
                return views_raw[j * 16 + 4 : j * 16 + 4 + length]
            return data[index][offset : offset + length]

        return view
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    offsets = np.frombuffer(buffers[1], np.int64 if wide else np.int32)
    body = raw(buffers[2])

    def plain(i: int) -> memoryview:
        return body[int(offsets[start + i]) : int(offsets[start + i + 1])]

    return plain


def _as_view(values: Any) -> Any:
    pa = pa_module()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.type in (pa.binary_view(), pa.string_view()) or pa.types.is_binary(values.type):
        return values
    if pa.types.is_large_binary(values.type) or pa.types.is_string(values.type):
        return values
    if pa.types.is_large_string(values.type):
        return values
    raise DecodeError(f"a chain reads binary or string (path) values, got {values.type}")


# -- running -----------------------------------------------------------------------------------


def run_batch(
    chain: ChainKernel,
    values: Any,
    *,
    paths: bool = False,
    seed: int | None = None,
    positions: Any = None,
) -> Any:
    """Run ``chain``'s kernel over every value of an Arrow array; an array of ``arrow_type``.

    ``values`` are encoded bytes (``binary``, ``large_binary`` or ``binary_view``), or
    paths/URIs (UTF-8) when ``paths`` is true. Null values give null rows. A random
    chain needs ``seed`` and ``positions`` (an integer array, one per value): row ``i``
    draws from ``record_rng(seed, 0, positions[i], 0)``, as record ``positions[i]`` of a
    single-slot pipeline at epoch 0.

    Raises:
        DataioError: the first failing row's error (its class kept), naming the row.
    """
    values = _as_view(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    rngs = _generators(chain, seed, positions, valid)
    out, results = _run_rows(chain, values, valid, paths=paths, rngs=rngs)
    if out is not None:
        return _tensor_column(chain, out, valid)
    return _variable_column(chain, results, valid)


def _generators(
    chain: ChainKernel, seed: int | None, positions: Any, valid: np.ndarray
) -> Callable[[int], Any] | None:
    """``rng(i)``: row ``i``'s generator, for a random chain (``None`` otherwise)."""
    if not chain.kernel.random:
        return None
    from dataio.engine.executor import record_rng

    pa = pa_module()
    if seed is None or positions is None:
        raise PlanError(f"chain {chain.label} has random ops: it needs a seed and row positions")
    if isinstance(positions, pa.ChunkedArray):
        positions = positions.combine_chunks()
    if len(positions) != len(valid):
        raise QueryError(f"chain {chain.label}: {len(positions)} positions for {len(valid)} rows")
    missing = np.asarray(positions.is_null().to_numpy(zero_copy_only=False), bool) & valid
    if missing.any():
        raise QueryError(
            f"chain {chain.label}: row {int(np.flatnonzero(missing)[0])} of the batch has a "
            "null position; pass each row's position (an integer >= 0) as the second argument"
        )
    try:
        at = np.asarray(positions.fill_null(0).cast(pa.int64()).to_numpy(), np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise QueryError(
            f"chain {chain.label}: positions must be integers, got {positions.type}"
        ) from exc
    negative = (at < 0) & valid
    if negative.any():
        row = int(np.flatnonzero(negative)[0])
        raise QueryError(
            f"chain {chain.label}: row {row} of the batch has position {int(at[row])}; "
            "positions are integers >= 0"
        )
    return lambda i: record_rng(seed, 0, int(at[i]), 0)


def _run_rows(
    chain: ChainKernel,
    values: Any,
    rows: np.ndarray,
    *,
    paths: bool = False,
    rngs: Callable[[int], Any] | None = None,
) -> tuple[np.ndarray | None, list[np.ndarray | None]]:
    """The kernel over the rows where ``rows`` is true: one buffer when the shape is
    static (other rows zero), else one array per row (``None`` elsewhere)."""
    n = len(values)
    read = _reader(values)
    shape = chain.shape
    out = _allocate((n, *shape), chain.dtype, rows) if shape is not None else None
    direct = chain.kernel.row_shape is not None  # the kernel writes into ``out`` itself
    results: list[np.ndarray | None] = [None] * n

    def work(lo: int, hi: int) -> None:
        run = chain.kernel.run
        assert run is not None  # a chain always has a kernel
        for i in range(lo, hi):
            if not rows[i]:
                continue
            data: Any = None
            try:
                data = read(i)
                encoded = data
                if paths:
                    from dataio.io import read_bytes

                    encoded = read_bytes(bytes(data).decode("utf-8", "surrogateescape"))
                rng = None if rngs is None else rngs(i)
                value, _ = run(encoded, rng, out[i] if direct and out is not None else None)
                if not direct:
                    value = _checked(chain, np.asarray(value))
            except Exception as exc:
                raise _row_error(f"chain {chain.label}", exc, i, data, paths) from exc
            if out is None:
                results[i] = value
            elif not direct:
                out[i] = value

    _spread(work, n)
    return out, results


def _allocate(shape: tuple[int, ...], dtype: np.dtype, rows: np.ndarray) -> np.ndarray:
    """The output buffer, from Arrow's memory pool; rows that will not run are zeroed.

    The pool reuses freed pages: a fresh NumPy array of one batch (77 MB for 128 ImageNet
    rows) faults every page in, measured here at 15-31 ms a batch against 10 ms.
    """
    if dtype == np.bool_:  # Arrow packs booleans into bits: converted when wrapped
        return np.zeros(shape, dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    out = np.frombuffer(pa_module().allocate_buffer(size), dtype).reshape(shape)
    out[~rows] = 0
    return out


def _spread(work: Callable[[int, int], None], n: int) -> None:
    """Rows in contiguous runs on the CPU pool; the first failing row's error is raised."""
    from dataio.engine.pool import cpu_pool, cpu_workers

    workers = cpu_workers()
    # a few runs per worker even out images of unequal cost (sizes vary within a batch)
    tasks = min(4 * workers, n) if workers > 1 else 1
    if tasks <= 1 or _on_pool_thread():
        work(0, n)  # a pool thread waiting on the pool could starve it (a loader's reads)
        return
    bounds = np.linspace(0, n, tasks + 1).astype(int)
    futures = [cpu_pool().submit(work, int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
    errors = [f.exception() for f in futures]  # waits for all: none writes after we return
    for error in errors:
        if error is not None:
            raise error


def _on_pool_thread() -> bool:
    return threading.current_thread().name.startswith("dataio-cpu")


def _row_error(where: str, exc: Exception, row: int, data: Any, paths: bool) -> Exception:
    if data is None:  # the value itself could not be read from the array
        what = "unreadable value"
    elif paths and isinstance(data, memoryview):
        what = f"path {bytes(data).decode('utf-8', 'replace')!r}"
    else:
        what = f"{len(data)} bytes"
    message = f"{where}: row {row} of the batch ({what}): {exc}"
    if isinstance(exc, DataioError):
        error = _renamed(exc, message)
    else:  # a kernel library failed in a way it does not document
        error = DecodeError(f"{message} ({type(exc).__name__})")
    _recent.append(error)
    return error


def _renamed(exc: DataioError, message: str) -> DataioError:
    """An error of ``exc``'s class (and fields) with another message."""
    try:
        return type(exc)(message)
    except TypeError:  # a subclass with its own constructor (LimitError)
        error = type(exc).__new__(type(exc))
        error.__dict__.update(exc.__dict__)
        error.args = (message,)
        return error


def raised_error(message: str, where: str) -> DataioError | None:
    """The row error a batched kernel raised, found in the engine's error ``message``.

    DataFusion reports a Python function's exception as text; this gives the caller back
    the error's own class (``DecodeError``, ``LimitError``, ...), prefixed with ``where``.
    """
    for error in reversed(_recent):
        if repr(error) in message:
            return _renamed(error, f"{where}: {error}")
    return None


def _checked(chain: ChainKernel, value: np.ndarray) -> np.ndarray:
    """A row as the planned dtype (and shape, when static)."""
    if chain.shape is not None and value.shape != chain.shape:
        raise TransformError(f"gave shape {value.shape}, but the chain's type says {chain.shape}")
    if value.dtype == chain.dtype:
        return value
    if not np.can_cast(value.dtype, chain.dtype, "same_kind"):
        raise TransformError(
            f"gave {value.dtype}, but the chain's type says {chain.dtype}; "
            "end the chain with to_dtype(...)"
        )
    return value.astype(chain.dtype)


def _validity(valid: np.ndarray) -> Any:
    pa = pa_module()
    if valid.all():
        return None
    return pa.array(~valid, pa.bool_())


def _tensor_column(chain: ChainKernel, out: np.ndarray, valid: np.ndarray) -> Any:
    pa = pa_module()
    size = int(np.prod(out.shape[1:], dtype=np.int64))
    flat = pa.array(out.reshape(-1), type=chain.arrow_type.value_type)  # no copy for numbers
    mask = _validity(valid)
    storage = pa.FixedSizeListArray.from_arrays(flat, size, mask=mask)
    return pa.ExtensionArray.from_storage(chain.arrow_type, storage)


def _variable_column(
    chain: ChainKernel, results: list[np.ndarray | None], valid: np.ndarray
) -> Any:
    pa = pa_module()
    value_type = chain.arrow_type.field("data").type.value_type
    sizes = np.array([0 if r is None else r.size for r in results], np.int64)
    offsets = np.zeros(len(results) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), chain.dtype)
    for r, lo in zip(results, offsets[:-1], strict=False):
        if r is not None:
            flat[lo : lo + r.size] = r.reshape(-1)
    ndims = np.array([0 if r is None else r.ndim for r in results], np.int32)
    shape_offsets = np.zeros(len(results) + 1, np.int32)
    np.cumsum(ndims, out=shape_offsets[1:])
    dims = [d for r in results if r is not None for d in r.shape]
    mask = _validity(valid)
    data = pa.LargeListArray.from_arrays(
        pa.array(offsets), pa.array(flat, type=value_type), type=pa.large_list(value_type)
    )
    shapes = pa.ListArray.from_arrays(pa.array(shape_offsets), pa.array(dims, pa.int32()))
    return pa.StructArray.from_arrays([data, shapes], names=["data", "shape"], mask=mask)


# -- DataFusion --------------------------------------------------------------------------------


def chain_udf(ops: tuple[Op, ...], name: str, seed: int | None = None) -> Any:
    """A DataFusion scalar function ``name(bytes)`` running the chain (for SQL).

    ``bytes`` may be any binary column; for columns of paths, use the frame expression.
    With a ``seed`` the function is ``name(bytes, position)``: ``position`` (an integer
    per row) seeds the row's random ops as a pipeline seeds that record.
    """
    import pyarrow as pa
    from datafusion import udf

    chain = chain_kernel(ops, seeded=seed is not None)
    field = pa.field(name, chain.arrow_type)
    if seed is None:

        def call(values: Any) -> Any:
            return run_batch(chain, values)

        return udf(call, [pa.field("value", pa.binary_view())], field, "immutable", name)

    def seeded(values: Any, positions: Any) -> Any:
        return run_batch(chain, values, seed=seed, positions=positions)

    inputs = [pa.field("value", pa.binary_view()), pa.field("position", pa.int64())]
    return udf(seeded, inputs, field, "immutable", name)


def _frame_udf(ops: tuple[Op, ...], seed: int | None) -> Any:
    """The chain as a function of the values (as views), their type's name and, for a
    seeded chain, each row's position."""
    import pyarrow as pa
    from datafusion import udf

    chain = chain_kernel(ops, seeded=seed is not None)

    def kind(types: Any) -> Any:
        # the type's name through NumPy: no Python scalar per batch (as_py)
        return types.slice(0, 1).to_numpy(zero_copy_only=False)[0] if len(types) else None

    def call(values: Any, types: Any) -> Any:
        return run_batch(chain, values, paths=kind(types) in _PATH_TYPES)

    def seeded(values: Any, types: Any, positions: Any) -> Any:
        paths = kind(types) in _PATH_TYPES
        return run_batch(chain, values, paths=paths, seed=seed, positions=positions)

    inputs = [pa.field("value", pa.binary_view()), pa.field("type", pa.string())]
    field = pa.field("chain", chain.arrow_type)
    if seed is None:
        return udf(call, inputs, field, "immutable", "dataio_chain")
    inputs.append(pa.field("position", pa.int64()))
    return udf(seeded, inputs, field, "immutable", "dataio_chain")


def compile_chain(
    ops: tuple[Op, ...], value: Any, *, seed: int | None = None, position: Any = None
) -> Any:
    """A DataFusion expression running the chain over the compiled expression ``value``.

    Binary columns are read as bytes, string columns as paths; the kernel runs once per
    record batch when the frame runs. A seeded chain also reads ``position``, the
    compiled expression giving each row's position.
    """
    import pyarrow as pa
    from datafusion import functions as f

    function = _frame_udf(ops, seed)
    args = [value.cast(pa.binary_view()), f.arrow_typeof(value)]
    if seed is not None:
        args.append(position.cast(pa.int64()))
    return function(*args)


def decode_image_udf() -> Any:
    """``decode_image(bytes, mode)``: ``{height, width, channels, pixels}`` per image.

    ``pixels`` are the ``uint8`` HWC bytes. Batched: one decode chain per mode, rows
    spread over the CPU pool, values read zero-copy.
    """
    import pyarrow as pa
    from datafusion import udf

    struct = pa.struct(
        [
            ("height", pa.int32()),
            ("width", pa.int32()),
            ("channels", pa.int32()),
            ("pixels", pa.binary()),
        ]
    )

    def call(values: Any, modes: Any) -> Any:
        return _decode_images(values, modes, struct)

    inputs = [pa.field("bytes", pa.binary_view()), pa.field("mode", pa.string_view())]
    return udf(call, inputs, pa.field("image", struct), "immutable", "decode_image")


def _decode_images(values: Any, modes: Any, struct: Any) -> Any:
    import pyarrow as pa

    from dataio import decoders
    from dataio.udfs.image import CHANNELS

    values = _as_view(values)
    n = len(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    mode_values = modes.cast(pa.string()).to_pylist() if n else []
    if len(mode_values) == 1 and n > 1:  # a constant
        mode_values = mode_values * n
    pieces: list[np.ndarray | None] = [None] * n
    for mode in sorted({m for m, v in zip(mode_values, valid, strict=True) if v}, key=str):
        if mode not in CHANNELS:
            raise DecodeError(f"decode_image mode must be one of {list(CHANNELS)}, got {mode!r}")
        rows = valid & np.array([m == mode for m in mode_values], bool)
        _, results = _run_rows(chain_kernel((decoders.image(mode=mode),)), values, rows)
        for i in np.flatnonzero(rows):
            pieces[i] = results[i]
    valid &= np.array([p is not None for p in pieces], bool)
    shapes = np.array([p.shape if p is not None else (0, 0, 0) for p in pieces], np.int32)
    sizes = np.array([0 if p is None else p.size for p in pieces], np.int64)
    if sizes.sum() > _MAX_BINARY:
        raise QueryError(
            f"decode_image: {int(sizes.sum())} pixel bytes in one batch exceed a binary "
            "column's 2 GiB; decode fewer or smaller images per batch"
        )
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    body = np.empty(int(offsets[-1]), np.uint8)
    for k, p in enumerate(pieces):
        if p is not None:
            body[int(offsets[k]) : int(offsets[k + 1])] = p.reshape(-1)
    pixels = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(body)]
    )
    shapes = shapes.reshape(n, 3)
    return pa.StructArray.from_arrays(
        [pa.array(shapes[:, 0]), pa.array(shapes[:, 1]), pa.array(shapes[:, 2]), pixels],
        fields=list(struct),
        mask=_validity(valid),
    )


def image_sizes(values: Any) -> Any:
    """``{height, width}`` from each image's header, read in place (the ``image_size``
    SQL function); null values give null rows."""
    import pyarrow as pa

    from dataio.udfs.image import image_size

    values = _as_view(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    read = _reader(values)
    sizes = np.zeros((len(values), 2), np.int32)
    for i in np.flatnonzero(valid):
        data = None
        try:
            data = read(int(i))
            sizes[i] = image_size(data)[::-1]
        except Exception as exc:
            raise _row_error("image_size", exc, int(i), data, False) from exc
    return pa.StructArray.from_arrays(
        [pa.array(sizes[:, 0]), pa.array(sizes[:, 1])],
        names=["height", "width"],
        mask=_validity(valid),
    )
