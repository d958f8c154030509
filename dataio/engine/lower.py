"""Lowering: slot chains of plan ops become kernels the executor can run.

A chain is ``decoder, transforms..., [normalize, output], [custom ops]``. Lowering
turns it into one function ``run(data, rng, out) -> (value, source_size)``:

* ``data`` is the field's bytes, ``rng`` the record's generator (``None`` unless the
  chain is random), ``out`` the preallocated batch row or ``None``;
* image chains fuse the decoder with the geometry ops that follow it (one DCT-scaled
  decode and one resample) and with normalize/output (written into ``out``); any other
  transform or ``when`` branch runs on the decoded array in between;
* other decoders run, then their transforms in order.

Custom ops are batch-level: they run on the stacked column at assembly. Each decoder
op name maps to its decode function in :data:`DECODERS`; transforms to
:data:`ARRAY_OPS`. Both tables are generated from :mod:`dataio.plan.registry`, which names
each op's kernel.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from dataio.exceptions import PlanError
from dataio.plan import registry
from dataio.plan.ops import Op
from dataio.plan.pipeline import Pipeline, Slot
from dataio.plan.predicates import Predicate
from dataio.udfs.image import ImageSpec, run_chain, transform_pixels, write_pixels

__all__ = [
    "ARRAY_OPS",
    "DECODERS",
    "FinishFn",
    "KernelFn",
    "SlotKernel",
    "image_spec",
    "kernel_function",
    "lower",
    "lower_chain",
]

KernelFn = Callable[[Any, Any, Any], tuple[Any, tuple[int, ...] | None]]
FinishFn = Callable[[list[Any], list[Any]], list[Any]]


@dataclass(frozen=True)
class SlotKernel:
    """What the executor runs for one slot.

    Attributes:
        name: the slot (batch column) name.
        field: the record field it reads.
        run: the fused kernel, or ``None`` for a passthrough slot.
        row_shape: the per-row output shape when fixed by the chain, else ``None``.
        dtype: the output dtype of a tensor slot.
        random: whether ``run`` needs the record's generator.
        objects: the kernel yields Python objects (a list column, never stacked).
        optional: missing fields and ``None`` values give ``None`` rows.
        active: a field predicate deciding, before decoding, whether the row is decoded.
        custom: batch-level custom ops applied to the stacked column.
        finish: a batch step (the DALI backend): ``run`` then only prepares each row's
            input, and ``finish(prepared, outs)`` computes the batch's rows at once,
            writing each into its ``outs`` row (``None``: return a new array) and
            giving an array or a :class:`~dataio.exceptions.DataioError` per row.
    """

    name: str
    field: str
    run: KernelFn | None = None
    row_shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    random: bool = False
    objects: bool = False
    optional: bool = False
    active: Predicate | None = None
    custom: tuple[Op, ...] = ()
    finish: FinishFn | None = None

    @property
    def passthrough(self) -> bool:
        """True when the slot delivers Python values unchanged."""
        return self.run is None


def _is_random(ops: tuple[Op, ...]) -> bool:
    return any(
        op.random or (op.kind == "branch" and _is_random(op.param("then") + op.param("otherwise")))
        for op in ops
    )


def _array_op(op: Op) -> Callable[[Any, Any], Any]:
    params = op.params_dict()
    factory = ARRAY_OPS.get(op.name)
    if factory is None:  # pragma: no cover - every factory op has a kernel
        raise PlanError(f"no kernel for {op!r}")
    return factory(params)


def _branch(
    pred: Predicate, yes: Callable[[Any, Any], Any], no: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], Any]:
    def choose(value: Any, rng: Any) -> Any:
        return yes(value, rng) if pred.evaluate(value) else no(value, rng)

    return choose


def compile_ops(ops: tuple[Op, ...]) -> Callable[[Any, Any], Any]:
    """Compile transforms (and branches) into one ``f(value, rng) -> value``."""
    steps: list[Callable[[Any, Any], Any]] = []
    geometry: list[tuple[str, dict[str, Any]]] = []

    def flush() -> None:
        if geometry:  # consecutive geometry ops share one resample
            batch = tuple(geometry)
            steps.append(lambda x, rng: transform_pixels(x, batch, rng))
            geometry.clear()

    for op in ops:
        if op.kind == "geometry":
            geometry.append((op.name, op.params_dict()))
            continue
        flush()
        if op.kind == "branch":
            pred: Predicate = op.param("pred")
            yes, no = compile_ops(op.param("then")), compile_ops(op.param("otherwise"))
            steps.append(_branch(pred, yes, no))
        else:
            steps.append(_array_op(op))
    flush()

    def apply(value: Any, rng: Any) -> Any:
        for step in steps:
            value = step(value, rng)
        return value

    return apply


def _split(slot: Slot) -> tuple[Op, tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """decoder, transforms, image output ops (normalize/output), custom ops."""
    ops = slot.ops
    middle = tuple(op for op in ops[1:] if op.kind in ("geometry", "array", "branch"))
    tail = tuple(op for op in ops if op.kind in ("normalize", "output"))
    custom = tuple(op for op in ops if op.kind == "custom")
    return ops[0], middle, tail, custom


def image_spec(
    slot: Slot, steps: tuple[Op, ...] | None = None, *, output: bool = True
) -> ImageSpec:
    """Lower an image chain into an :class:`ImageSpec`.

    ``steps`` are the geometry ops to fuse (default: all of them); ``output=False``
    leaves the result as ``uint8`` HWC without normalization.
    """
    decoder, middle, tail, _ = _split(slot)
    if steps is None:
        steps = tuple(op for op in middle if op.kind == "geometry")
    normalize = next((op for op in tail if op.kind == "normalize"), None) if output else None
    out = next((op for op in tail if op.kind == "output"), None) if output else None
    dtype, layout = "uint8", "HWC"
    mean = std = None
    if normalize is not None:
        dtype, layout = "float32", normalize.param("layout")
        mean, std = normalize.param("mean"), normalize.param("std")
    if out is not None:
        dtype = out.param("dtype") or dtype
        layout = out.param("layout") or layout
    if dtype not in ("uint8", "float32"):  # computed in these, cast once at the end
        dtype = "float32" if "float" in dtype else "uint8"
    return ImageSpec(
        mode=decoder.param("mode"),
        steps=tuple((op.name, op.params_dict()) for op in steps),
        mean=mean,
        std=std,
        dtype=dtype,
        layout=layout,
        random=_is_random(steps),
        exact=bool(decoder.params_dict().get("exact", False)),
    )


def _lower_image(slot: Slot) -> SlotKernel:
    kernel = _lower_image_compute(slot)
    _, _, tail, _ = _split(slot)
    out = next((op for op in tail if op.kind == "output"), None)
    name = None if out is None else out.param("dtype")
    if name is None or kernel.dtype is None or name == kernel.dtype.name:
        return kernel
    from dataio.udfs.arrays import numpy_dtype

    target = numpy_dtype(name)
    compute = kernel.run
    assert compute is not None  # an image kernel always runs

    def cast(data: Any, rng: Any, out: Any) -> tuple[Any, tuple[int, ...] | None]:
        pixels, source = compute(data, rng, None)
        if out is None:
            return pixels.astype(target), source
        np.copyto(out, pixels, casting="unsafe")  # exact for pixels; floats round once
        return out, source

    return replace(kernel, run=cast, dtype=target)


def _lower_image_compute(slot: Slot) -> SlotKernel:
    _, middle, _, _ = _split(slot)
    prefix: tuple[Op, ...] = ()
    for op in middle:
        if op.kind != "geometry":
            break
        prefix += (op,)
    rest = middle[len(prefix) :]
    if not rest:
        spec = image_spec(slot)

        def fused(data: Any, rng: Any, out: Any) -> tuple[Any, tuple[int, ...] | None]:
            return run_chain(data, spec, rng, out)

        return SlotKernel(
            slot.name, slot.source_field, fused, spec.static_shape(), np.dtype(spec.dtype),
            spec.random,
        )  # fmt: skip
    head = image_spec(slot, prefix, output=False)
    final = image_spec(slot, ())
    transforms = compile_ops(rest)

    def run(data: Any, rng: Any, out: Any) -> tuple[Any, tuple[int, ...] | None]:
        pixels, source = run_chain(data, head, rng)
        pixels = transforms(pixels, rng)
        if pixels.ndim == 2:
            pixels = pixels[..., None]
        if pixels.dtype != np.uint8 and final.scale is None and final.dtype == "uint8":
            return pixels, source  # a to_dtype op chose the dtype: keep it
        return write_pixels(pixels, final, out), source

    return SlotKernel(
        slot.name, slot.source_field, run, None, np.dtype(final.dtype), _is_random(middle)
    )


def _lower_decoder(slot: Slot) -> SlotKernel:
    decoder, middle, _, _ = _split(slot)
    decode, objects = DECODERS[decoder.name](decoder.params_dict())
    transforms = compile_ops(middle)

    def run(data: Any, rng: Any, out: Any) -> tuple[Any, tuple[int, ...] | None]:
        value, source = decode(data)
        return transforms(value, rng), source

    return SlotKernel(slot.name, slot.source_field, run, random=_is_random(middle), objects=objects)


def kernel_function(spec: registry.OpSpec[Any]) -> Callable[..., Any]:
    """Import the ``dataio.udfs`` function that computes ``spec`` (``"module:function"``)."""
    module, _, name = spec.kernel.partition(":")
    return cast(Callable[..., Any], getattr(importlib.import_module(module), name))


DecoderBuilder = Callable[[dict[str, Any]], tuple[Callable[[Any], Any], bool]]
ArrayOpBuilder = Callable[[dict[str, Any]], Callable[[Any, Any], Any]]


def _decoder(spec: registry.OpSpec[Any]) -> DecoderBuilder:
    def build(params: dict[str, Any]) -> tuple[Callable[[Any], Any], bool]:
        fn = kernel_function(spec)
        if spec.rate:  # the kernel also returns the source's rate, the row's size

            def decode(data: Any) -> tuple[Any, tuple[int, ...] | None]:
                value, rate = fn(data, **params)
                return value, (rate,)

            return decode, spec.objects
        return (lambda data: (fn(data, **params), None)), spec.objects

    return build


def _array_op_builder(spec: registry.OpSpec[Any]) -> ArrayOpBuilder:
    def build(params: dict[str, Any]) -> Callable[[Any, Any], Any]:
        fn = kernel_function(spec)
        if spec.rng:
            return lambda x, rng: fn(x, rng=rng, **params)
        return lambda x, rng: fn(x, **params)

    return build


#: decoder op name -> builder of (decode(data) -> (value, source size), yields objects);
#: the fused image decoder is lowered by :func:`image_spec` instead
DECODERS: dict[str, DecoderBuilder] = {
    spec.name: _decoder(spec)
    for spec in registry.specs()
    if spec.kind == "decode" and not spec.fused
}

#: transform op name -> builder of ``f(value, rng) -> value``; geometry ops fuse instead
ARRAY_OPS: dict[str, ArrayOpBuilder] = {
    spec.name: _array_op_builder(spec) for spec in registry.specs() if spec.kind == "array"
}


def _lower_slot(slot: Slot) -> SlotKernel:
    if slot.passthrough_values:
        return SlotKernel(slot.name, slot.source_field, optional=slot.optional, active=slot.active)
    decoder = slot.ops[0]
    if decoder.name == "decode_image":
        kernel = _lower_image(slot)
    elif decoder.name in DECODERS:
        kernel = _lower_decoder(slot)
    else:
        raise PlanError(f"slot {slot.name!r}: no kernel for {decoder!r}")
    custom = _split(slot)[3]
    return SlotKernel(
        kernel.name,
        kernel.field,
        kernel.run,
        None if custom else kernel.row_shape,
        kernel.dtype,
        kernel.random,
        kernel.objects,
        slot.optional,
        slot.active,
        custom,
    )


def lower_chain(ops: tuple[Op, ...], *, name: str = "value") -> SlotKernel:
    """Lower a chain of ops (a chain expression's, decoder first) into one kernel.

    Example:
        >>> from dataio import decoders, transforms  # doctest: +SKIP
        >>> lower_chain((decoders.image(), transforms.center_crop(8))).row_shape  # doctest: +SKIP
        (8, 8, 3)
    """
    return _lower_slot(Slot(name).then(*ops))


def lower(plan: Pipeline) -> tuple[SlotKernel, ...]:
    """Lower every slot of ``plan`` into a :class:`SlotKernel`."""
    return tuple(_lower_slot(slot) for slot in plan.slots)
