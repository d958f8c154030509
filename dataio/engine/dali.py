"""The DALI backend: image slot chains lowered to an NVIDIA DALI pipeline.

``run(..., backend="dali")`` keeps the whole loader (sources, sharding, shuffling,
resume, ``on_failure``, batch transforms) and swaps only the image slots' kernel. Each
row's encoded bytes, read by dataio's own source stage, enter DALI through
``fn.external_source``; the chain runs as::

    decoders.image -> resize(roi, size) -> flip -> crop_mirror_normalize [-> cast]

Geometry stays dataio's: the image header gives the source size, and
:func:`~dataio.udfs.image.plan_geometry` composes the chain's resizes and crops into one
source box and output size, drawing random crops and flips from the record's generator
(``seed``, ``epoch``, record index), so a DALI run sees the same windows as a native
one and resumes the same. DALI then decodes, resamples the box (antialiased linear, as
the native kernel) and flips, normalizes, lays out and casts.

Rows run in two steps (``SlotKernel.finish``): each row's pool task reads the header
and draws the geometry, as the native kernel would; once every row of the batch is
prepared, the batch runs through DALI in one call. A batch DALI fails is run row by row,
so only the rows DALI cannot process get an error (``on_failure`` then treats them
exactly like native decode errors).

Without a GPU (``device`` unset or ``"cpu"``) the pipeline is DALI's CPU backend
(``device_id=None``, one DALI thread per pool worker). With
``run("torch", device="cuda:N")`` the decoder runs as ``device="mixed"`` (nvJPEG) and
the rest on GPU ``N``; rows come back to the batch's host buffer. One pipeline per chain
is shared and runs one batch at a time. Ops DALI cannot express are a
:class:`~dataio.exceptions.PlanError` naming the op; nothing falls back to the native
kernels.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio.engine.lower import SlotKernel, image_spec
from dataio.engine.pool import cpu_workers
from dataio.exceptions import DecodeError, DeviceError, PlanError, TransformError
from dataio.plan.pipeline import Pipeline, Slot
from dataio.udfs.image import ImageSpec, plan_geometry

__all__ = ["available", "lower_dali", "require_dali"]

#: the geometry ops composed into one box by plan_geometry (random ones use dataio's seeds)
GEOMETRY = frozenset(
    {"resize", "resize_short", "center_crop", "random_crop", "random_resized_crop", "random_flip"}
)
#: dataio output dtype -> DALI type name (``nvidia.dali.types.DALIDataType``)
DTYPES = {
    "uint8": "UINT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FLOAT16",
    "float32": "FLOAT",
    "float64": "FLOAT64",
}
MODES = {"rgb": "RGB", "gray": "GRAY"}
#: pipelines kept (one per chain and device; the oldest chain's goes first)
PIPELINES_KEPT = 8


def available() -> bool:
    """Whether NVIDIA DALI can be imported."""
    try:
        require_dali()
    except DeviceError:
        return False
    return True


def require_dali() -> Any:
    """Import ``nvidia.dali`` (lazily: ``import dataio`` never does).

    Raises:
        DeviceError: DALI is not installed.
    """
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn
        import nvidia.dali.types  # noqa: F401
    except ImportError as exc:
        raise DeviceError(
            "backend='dali' needs NVIDIA DALI, which is not installed; install the "
            "nvidia-dali-cuda120 package (pip install nvidia-dali-cuda120), or run "
            "with the default backend='native'"
        ) from exc
    if _FORKED_AFTER_USE:
        raise DeviceError(
            "backend='dali' cannot run in a process forked after DALI ran in its parent "
            "(DALI is not fork-safe: a pipeline built there may crash the process); start "
            "worker processes with the 'spawn' method, or use backend='native' in them"
        )
    return dali


@dataclass(frozen=True, eq=False)
class DaliChain:
    """One image slot chain in DALI terms.

    Attributes:
        spec: the chain as the native kernel sees it (geometry, mean/std, layout).
        compute: the dtype crop_mirror_normalize writes (``uint8`` or ``float32``).
        dtype: the slot's output dtype (a cast follows when it differs).
        device_id: the GPU, or ``None`` for DALI's CPU backend.
    """

    spec: ImageSpec
    compute: str
    dtype: str
    device_id: int | None

    @property
    def key(self) -> str:
        """Equal for chains that build the same pipeline (the spec holds dicts: no hash)."""
        return repr((self.spec, self.compute, self.dtype, self.device_id))


def _refuse(slot: Slot, op: Any, why: str) -> PlanError:
    return PlanError(
        f"slot {slot.name!r}: backend='dali' cannot run {op!r} ({why}); remove it from "
        "the chain or use backend='native'"
    )


def _check_slot(slot: Slot) -> str:
    """Refuse the ops DALI cannot express; return the slot's output dtype."""
    decoder = slot.ops[0]
    if decoder.name != "decode_image":
        raise _refuse(slot, decoder, "DALI lowers image chains only")
    if decoder.param("mode") not in MODES:
        raise _refuse(slot, decoder, f"DALI decodes {sorted(MODES)} only")
    dtype = "uint8"
    for op in slot.ops[1:]:
        if op.kind == "geometry":
            if op.name not in GEOMETRY:
                raise _refuse(slot, op, "no DALI lowering for this geometry op")
        elif op.kind == "normalize":
            dtype = "float32"
        elif op.kind == "output":
            dtype = op.param("dtype") or dtype
            if dtype not in DTYPES:
                raise _refuse(slot, op, f"DALI has no {dtype} output; use one of {sorted(DTYPES)}")
        elif op.kind == "branch":
            raise _refuse(slot, op, "DALI pipelines have no per-record branches on shapes")
        else:
            raise _refuse(slot, op, "no DALI operator computes it")
    return dtype


def device_index(device: str | None) -> int | None:
    """The GPU a ``device`` string names (``"cuda"``/``"cuda:N"``), ``None`` for the CPU."""
    if device is None or device == "cpu":
        return None
    kind, _, index = device.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise PlanError(f"backend='dali' runs on 'cpu' or 'cuda:N', not device={device!r}")
    return int(index or 0)


def lower_dali(plan: Pipeline, *, device: str | None = None) -> tuple[SlotKernel, ...]:
    """Lower every slot of ``plan`` for the DALI backend.

    Image slots become DALI kernels; passthrough slots stay passthrough.

    Raises:
        PlanError: a slot uses an op DALI cannot express (the message names it).
        DeviceError: DALI is not installed.

    Example:
        >>> lower_dali(pipe)  # doctest: +SKIP
    """
    require_dali()
    device_id = device_index(device)
    kernels: list[SlotKernel] = []
    for slot in plan.slots:
        if slot.passthrough_values:
            kernels.append(
                SlotKernel(slot.name, slot.source_field, optional=slot.optional, active=slot.active)
            )
            continue
        dtype = _check_slot(slot)
        spec = image_spec(slot)
        chain = DaliChain(spec, spec.dtype, dtype, device_id)
        kernels.append(
            SlotKernel(
                slot.name,
                slot.source_field,
                _prepare(chain),
                spec.static_shape(),
                np.dtype(dtype),
                spec.random,
                optional=slot.optional,
                active=slot.active,
                finish=_finish(chain),
            )
        )
    return tuple(kernels)


# -- the DALI pipeline -------------------------------------------------------------------


def _build(chain: DaliChain, capacity: int) -> Any:
    """Build the chain's DALI pipeline for batches of up to ``capacity`` rows."""
    built = _define(chain, capacity)
    built.build()
    return built


def _define(chain: DaliChain, capacity: int) -> Any:
    """The chain's DALI pipeline, defined (DALI checks each operator's arguments against
    its schema here) but not built (which needs the GPU of a ``device_id``)."""
    dali = require_dali()
    fn, types = dali.fn, dali.types
    spec = chain.spec
    gpu = chain.device_id is not None

    @dali.pipeline_def(
        batch_size=capacity,
        num_threads=cpu_workers(),
        device_id=chain.device_id,
        prefetch_queue_depth=1,
    )
    def pipe() -> Any:
        data = fn.external_source(name="data", dtype=types.UINT8, ndim=1)
        # nvJPEG's own chroma upsampling differs from libjpeg-turbo's "fancy" one (the
        # CPU backend's and the native kernels'): ask the mixed decoder for the same
        gpu_only = {"jpeg_fancy_upsampling": True} if gpu else {}
        images = fn.decoders.image(
            data,
            device="mixed" if gpu else "cpu",
            output_type=getattr(types, MODES[spec.mode]),
            adjust_orientation=False,  # the native kernels ignore EXIF orientation too
            **gpu_only,
        )
        if spec.steps:
            roi_start = fn.external_source(name="roi_start", dtype=types.FLOAT, ndim=1)
            roi_end = fn.external_source(name="roi_end", dtype=types.FLOAT, ndim=1)
            size = fn.external_source(name="size", dtype=types.FLOAT, ndim=1)
            images = fn.resize(
                images,
                roi_start=roi_start,
                roi_end=roi_end,
                roi_relative=False,
                size=size,
                antialias=True,
                interp_type=types.INTERP_LINEAR,
            )
            hflip = fn.external_source(name="hflip", dtype=types.INT32, ndim=0)
            vflip = fn.external_source(name="vflip", dtype=types.INT32, ndim=0)
            images = fn.flip(images, horizontal=hflip, vertical=vflip)
        channels = spec.channels
        scale = 255.0 if spec.mean is not None else 1.0
        mean = [m * scale for m in spec.mean] if spec.mean is not None else [0.0]
        std = [s * scale for s in spec.std] if spec.std is not None else [1.0]
        if len(mean) == 1:
            mean, std = mean * channels, std * channels
        images = fn.crop_mirror_normalize(
            images,
            dtype=getattr(types, DTYPES[chain.compute]),
            output_layout=spec.layout,
            mean=mean,
            std=std,
        )
        if chain.dtype != chain.compute:
            images = fn.cast(images, dtype=getattr(types, DTYPES[chain.dtype]))
        return images

    return pipe()


@dataclass
class _Built:
    """One built pipeline, its capacity (the most rows it takes per run) and its lock:
    a DALI pipeline runs one batch at a time."""

    pipe: Any
    capacity: int
    lock: threading.Lock


_BUILT: dict[str, _Built] = {}
_BUILT_LOCK = threading.Lock()
#: this process was forked after its parent (or an ancestor) built DALI pipelines
_FORKED_AFTER_USE = False


def _forget_after_fork() -> None:
    """A forked child (a DataLoader worker) has none of the parent's DALI threads: its
    pipelines, and locks another thread may have held, must not be reused."""
    global _BUILT_LOCK, _FORKED_AFTER_USE
    import ctypes

    _FORKED_AFTER_USE = _FORKED_AFTER_USE or bool(_BUILT)
    for built in _BUILT.values():
        # leaked on purpose: destroying a pipeline joins threads this child does not
        # have, which crashes it (seen as SIGSEGV in a forked child that never used DALI)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(built))
    _BUILT.clear()
    _BUILT_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _pipeline(chain: DaliChain, rows: int) -> _Built:
    """The chain's shared pipeline entry (capacity grown to ``rows``; built once)."""
    with _BUILT_LOCK:
        built = _BUILT.get(chain.key)
        if built is None:
            built = _BUILT[chain.key] = _Built(None, 0, threading.Lock())
            while len(_BUILT) > PIPELINES_KEPT:
                _BUILT.pop(next(iter(_BUILT)))  # the oldest chain's pipeline
    with built.lock:
        if built.pipe is None or built.capacity < rows:
            built.pipe, built.capacity = _build(chain, max(rows, built.capacity)), max(rows, 1)
    return built


def _source_size(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(width, height)`` from the header, checked against the limits before DALI
    allocates anything (a corrupt header is a :class:`DecodeError` here)."""
    from dataio.udfs.image import _JPEG_MAGIC, _jpeg_header, _open

    if bytes(data[:3]) == _JPEG_MAGIC:
        return _jpeg_header(data)
    with _open(data) as im:
        size: tuple[int, int] = im.size
        return size


def _prepare(chain: DaliChain) -> Callable[[Any, Any, Any], tuple[Any, tuple[int, int]]]:
    """The per-row step: read the header, draw the geometry, keep DALI's inputs."""
    spec = chain.spec

    def prepare(data: Any, rng: Any, out: Any) -> tuple[Any, tuple[int, int]]:
        width, height = _source_size(data)
        feeds: dict[str, np.ndarray] = {"data": np.frombuffer(data, np.uint8)}
        if spec.steps:
            geo = plan_geometry(spec.steps, width, height, rng)
            left, top, right, bottom = geo.box
            feeds["roi_start"] = np.array([top, left], np.float32)  # DALI orders (y, x)
            feeds["roi_end"] = np.array([bottom, right], np.float32)
            feeds["size"] = np.array([geo.size[1], geo.size[0]], np.float32)
            feeds["hflip"] = np.array(int(geo.hflip), np.int32)
            feeds["vflip"] = np.array(int(geo.vflip), np.int32)
        return feeds, (height, width)

    return prepare


def _finish(chain: DaliChain) -> Callable[[list[Any], list[Any]], list[Any]]:
    """The batch step: run the prepared rows through DALI as one batch.

    When the batch fails, each row runs alone, so only the rows DALI cannot process get
    an error (the others keep their pixels, as with the native kernels).
    """

    def finish(prepared: list[Any], outs: list[Any]) -> list[Any]:
        built = _pipeline(chain, len(prepared))
        with built.lock:
            try:
                images = _run(chain, built, prepared)
            except DecodeError:
                results: list[Any] = []
                for feeds, out in zip(prepared, outs, strict=True):
                    try:
                        (image,) = _run(chain, built, [feeds])
                    except DecodeError as exc:
                        results.append(exc)
                        continue
                    results.append(_store(image, out))
                return results
            return [_store(image, out) for image, out in zip(images, outs, strict=True)]

    return finish


def _store(image: np.ndarray, out: np.ndarray | None) -> Any:
    """Copy one row out of DALI's buffer (reused by its next run) into ``out``."""
    if out is None:
        return image.copy()
    if out.shape != image.shape:
        return TransformError(
            f"DALI gave shape {image.shape} but the batch holds {out.shape}; "
            "end the chain with a fixed-size op such as center_crop or resize"
        )
    np.copyto(out, image)
    return out


def _run(chain: DaliChain, built: _Built, prepared: list[dict[str, np.ndarray]]) -> list[Any]:
    """One DALI run over ``prepared`` rows (the caller holds ``built.lock``)."""
    try:
        for name in prepared[0]:
            built.pipe.feed_input(name, [feeds[name] for feeds in prepared])
        (images,) = built.pipe.run()
    except RuntimeError as exc:
        # DALI marks a pipeline that failed as no longer valid: build a fresh one
        built.pipe = _build(chain, built.capacity)
        raise DecodeError(
            f"DALI could not decode or transform the image ({_reason(str(exc))}); "
            "check that the file is a complete JPEG/PNG, or skip bad rows with "
            "on_failure='skip'"
        ) from exc
    if chain.device_id is not None:
        images = images.as_cpu()
    return [np.asarray(images[i]) for i in range(len(prepared))]


def _reason(text: str) -> str:
    """The operator and its error from DALI's multi-line message (tracebacks left out)."""
    operator = re.search(r"operator `([^`]+)`", text)
    lines = [line.strip() for line in text.partition("encountered:")[2].splitlines()]
    detail = next((line for line in lines if line), "") or text.strip().splitlines()[-1]
    where = f"{operator.group(1)}: " if operator else ""
    return f"{where}{detail.rstrip(' :')}"
