"""A slot chain lowered for batched use: the fused kernel and the Arrow type it returns.

The chain (decoder first) is lowered once by :mod:`dataio.engine.lower` into the kernel a
pipeline slot runs; a chain with a static per-row shape returns
``pa.fixed_shape_tensor(dtype, shape)``, any other the variable-shape struct
``{data: large_list<dtype>, shape: list<int32>}``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio.engine.lower import SlotKernel
from dataio.exceptions import PlanError
from dataio.plan.ops import Op

__all__ = ["ChainKernel", "chain_kernel", "pa_module"]


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
